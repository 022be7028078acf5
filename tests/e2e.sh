#!/usr/bin/env bash
# The real build -> smoke -> tag -> push path on a machine without a GPU, run by `make e2e` and
# .ci/run. Every command it runs is echoed ("+ ..."), so docs/ci.md can quote them.
#
# Where no engine answers it starts one (installing Debian's docker.io when root), makes a
# local base image without any registry (debootstrap + `docker import`), starts a registry on
# 127.0.0.1 (Debian's docker-registry) and serves the base from it. Then, on images/torch-slim:
#   1. classic builder: image --allow-cpu          -> exit 0, tag with both labels
#   1b. the same pass signed (--sign-key --evidence) -> verify exit 0; a forged copy -> 22
#   2. the same without --allow-cpu                 -> exit 7, no tag, no container
#   3. --smoke-timeout 1 --resmoke --push REF       -> exit 6, no tag, nothing pushed
#   4. lock a copy whose base is the local registry's -> pinned = true, FROM ref@sha256:...,
#      the digest recomputed here from the manifest bytes
#   5. BuildKit (docker buildx, cache mounts, --cache-to inline) on the pinned lock,
#      --push REF --sign-key                        -> exit 0, the registry holds the digest
#      the JSON reports, with the signed attestation and SBOM attached as its referrers
#   5a. Slurm (tests/slurm/up.sh: munged, slurmctld, slurmd on 127.0.0.1): `envbuild fleet
#      slurm` writes the sbatch script, sbatch runs the pushed image's smoke on the node
#      through Docker by digest, `envbuild fleet results` reads the verdict back -> passed;
#      the same with a digest the registry lacks -> failed (no verdict, the engine's stderr)
#   5b. verify REG/REPO@digest -> exit 0; promote the base (no attestation) -> exit 9; a forged
#      attestation attached to the base -> verify 22, promote 9; promote step 5's digest
#      -> an OCI index naming it, linux/amd64
#   5c. two architectures (E2E_ARM64=1, the default): images/jax-cpu built natively and
#      images/jax-cpu-arm64 built and smoke-tested under qemu-aarch64 (binfmt_misc), both
#      pushed to one repository; promote refused (9) while the arm64 image has no attestation,
#      then exit 0 after it is signed: an OCI index naming linux/amd64 and linux/arm64
#   6. Podman through its Docker-compatible API (`podman system service`) on a copy of
#      images/torch-cpu (1 GB; torch CPU from E2E_WHEELS=/opt/wheels) locked pinned to the
#      local registry's base as in step 4   -> exit 0, tagged in Podman with the labels
#   7. images/torch-project (a pyproject.toml project, torch CPU from E2E_WHEELS=/opt/wheels):
#      its code installed, its own smoke command passes and is in the report; a code change
#      rebuilds at most its last 3 layers
#   7b. tests/fixtures/projects/writes-cwd: a folder of scripts (no pyproject) whose smoke step
#      writes its checkpoint and log into /app (owned by the runtime user)
#   7c. a pure-Python sdist-only package built in a plain builder stage (no compiler)
#   7d. tests/fixtures/projects/scm-version: a project whose version comes from git
#      (setuptools-scm), tagged v1.2.3 -> the image's installed project reports 1.2.3
#   8. images/torch-ext: a CUDA extension compiled for the lock's GPUs (about 7 min on 2 cores from a clean clone)
# `bash tests/e2e.sh prepare` only starts the engine and makes the base image (.ci/run uses it
# so the engine-marked tests of `make check` run too). E2E_SLURM=0, E2E_PODMAN=0, E2E_PROJECT=0
# and E2E_TORCH_EXT=0 skip steps 5a, 6, 7 and 8, E2E_ARM64=0 step 5c; E2E_ONLY=5c runs only
# step 5c (with the engine, the bases and the registry it needs); E2E_REGISTRY_PORT (5955) is
# the registry's port when free. One run at a time per machine (flock): see below.
set -euo pipefail
cd "$(dirname "$0")/.."

ENVBUILD=${ENVBUILD:-.venv/bin/envbuild}
PY=${PY:-.venv/bin/python}
BASE=envbuild-e2e/base:bookworm
BASE_ARM64=envbuild-e2e/base-arm64:bookworm
E2E_ARM64=${E2E_ARM64:-1}
IMAGE_DIR=${E2E_IMAGE_DIR:-images/torch-slim}
CA_CERT=${E2E_CA_CERT:-/etc/ssl/certs/ca-certificates.crt}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
E2E_PODMAN=${E2E_PODMAN:-1}
WHEELS=${E2E_WHEELS:-/opt/wheels}  # the torch CPU wheel images/torch-cpu and torch-project lock
WORK=$PWD/.e2e
TAG_OK=envbuild-e2e/torch-slim:ok
TAG_NOGPU=envbuild-e2e/torch-slim:nogpu
TAG_TIMEOUT=envbuild-e2e/torch-slim:timeout
TAG_BUILDKIT=envbuild-e2e/torch-slim:buildkit
TAG_PODMAN=localhost/envbuild-e2e/torch-cpu:podman
PINNED=$WORK/torch-slim-pinned
PINNED_CPU=$WORK/torch-cpu-pinned
mkdir -p "$WORK"

say() { printf '\n== %s\n' "$*" >&2; }
fail() { printf 'e2e FAILED: %s\n' "$*" >&2; exit 1; }
run() { printf '+ %s\n' "$*" >&2; "$@"; }
started=$(date +%s)
lap() { printf '   (%s s so far)\n' "$(($(date +%s) - started))" >&2; }

apt_install() {
    [ "$(id -u)" = 0 ] || fail "need $* (run as root, or install: sudo apt-get install $*)"
    command -v apt-get >/dev/null || fail "need $* and apt-get is missing; install them by hand"
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

ensure_engine() {
    if docker info >/dev/null 2>&1; then return; fi
    command -v dockerd >/dev/null && command -v docker >/dev/null || apt_install docker.io
    [ "$(id -u)" = 0 ] || fail "no Docker engine answers; start it (sudo systemctl start docker)"
    say "starting dockerd (log: $WORK/dockerd.log)"
    nohup dockerd >"$WORK/dockerd.log" 2>&1 &
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && return
        sleep 1
    done
    tail -20 "$WORK/dockerd.log" >&2 || true
    fail "dockerd did not answer within 60 s"
}

ensure_base() {
    if docker image inspect "$BASE" >/dev/null 2>&1; then return; fi
    command -v debootstrap >/dev/null || apt_install debootstrap
    local root="$WORK/rootfs"
    say "making $BASE with debootstrap (no registry needed)"
    rm -rf "$root"
    run debootstrap --variant=minbase bookworm "$root" "$DEBIAN_MIRROR"
    run chroot "$root" apt-get install -y -q --no-install-recommends \
        python3 python3-venv ca-certificates
    chroot "$root" apt-get clean
    tar -C "$root" -c . | docker import - "$BASE"
    rm -rf "$root"
}

# The same base for linux/arm64 (step 5c): debootstrap runs the arm64 packages' maintainer
# scripts under qemu-aarch64 (tools/enable-arm64-emulation first). Measured here: 3 to 7 min.
ensure_base_arm64() {
    if docker image inspect "$BASE_ARM64" >/dev/null 2>&1; then return; fi
    command -v debootstrap >/dev/null || apt_install debootstrap
    local root="$WORK/rootfs-arm64"
    say "making $BASE_ARM64 with debootstrap --arch=arm64 under emulation (no registry needed)"
    rm -rf "$root"
    run debootstrap --arch=arm64 --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$root" "$DEBIAN_MIRROR"
    chroot "$root" apt-get clean
    # Not `docker import --platform linux/arm64`: Docker 20.10 records amd64 whatever it is
    # told (tools/rootfs-image says more), so the archive is written with arm64 in its config.
    tar -C "$root" -c . >"$WORK/rootfs-arm64.tar"
    run tools/rootfs-image "$WORK/rootfs-arm64.tar" "$WORK/base-arm64.tar" "$BASE_ARM64" arm64 v8
    run docker load -i "$WORK/base-arm64.tar"
    rm -rf "$root" "$WORK/rootfs-arm64.tar" "$WORK/base-arm64.tar"
    [ "$(docker image inspect --format '{{.Os}}/{{.Architecture}}' "$BASE_ARM64")" = linux/arm64 ] ||
        fail "$BASE_ARM64 is not linux/arm64"
}

# Background services this script starts (registry, Podman's API) stop with it, by their ids.
PIDS=()
SLURM_UP=  # the folder of a Slurm cluster tests/slurm/up.sh started, until down.sh stops it
cleanup() {
    local pid
    [ -z "$SLURM_UP" ] || bash tests/slurm/down.sh "$SLURM_UP"
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# PORT if nothing listens there, else any free port. A fixed port keeps the pinned lock's
# bytes (its base ref names the port) and so every builder's cache the same from run to run.
free_port() {
    "$PY" - "$1" <<'EOF'
import socket, sys
s = socket.socket()
# As the registry (Go) binds: a port whose last connections are in TIME_WAIT is free.
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
EOF
}

wait_for() {  # wait_for WHAT COMMAND...
    local what=$1; shift
    for _ in $(seq 100); do
        "$@" >/dev/null 2>&1 && return
        sleep 0.2
    done
    fail "$what did not answer within 20 s"
}

# A registry on 127.0.0.1: plain HTTP, which Docker and Podman allow there without configuration
# (Docker's insecure-registries default is 127.0.0.0/8).
start_registry() {
    command -v docker-registry >/dev/null || apt_install docker-registry
    REG=127.0.0.1:$(free_port "${E2E_REGISTRY_PORT:-5955}")
    mkdir -p "$WORK/registry"
    cat >"$WORK/registry/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $WORK/registry/data
http:
  addr: $REG
EOF
    say "a registry on $REG (log: $WORK/registry/log)"
    printf '+ docker-registry serve %s &\n' "$WORK/registry/config.yml" >&2
    # 9>&-: a service must not hold the run's lock (below) should it outlive the script.
    docker-registry serve "$WORK/registry/config.yml" >"$WORK/registry/log" 2>&1 9>&- &
    PIDS+=($!)
    wait_for "the registry on $REG" curl -sf "http://$REG/v2/"
}

# The manifest's digest, recomputed from its bytes (what `pinned = true` must equal).
manifest_digest() {  # manifest_digest REPO REFERENCE
    curl -sf -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
        "http://$REG/v2/$1/manifests/$2" | sha256sum | sed 's/ .*//; s/^/sha256:/'
}

# Smoke containers of one lock only (envbuild labels them envbuild.role=smoke and with the
# lock's sha256), so other users of the same engine do not disturb the count. The role label
# matters: every container made from a candidate carries the lock's label too (the classic
# builder's intermediate containers, `docker run` of the tag), and those of a concurrent build
# of the same lock exist for a moment while it runs.
smoke_containers() {
    docker ps -aq --filter "label=envbuild.lock.sha256=$LOCK_SHA" --filter label=envbuild.role=smoke | wc -l
}

expect_untagged_and_clean() {
    if docker image inspect "$1" >/dev/null 2>&1; then fail "$1 was tagged after a failure"; fi
    [ "$(smoke_containers)" = 0 ] || fail "smoke containers left behind: $(docker ps -a --filter "label=envbuild.lock.sha256=$LOCK_SHA")"
}

# check_json FILE KEY=VALUE...: keys of `envbuild image --json` (dotted paths into the object).
check_json() {
    local file=$1; shift
    "$PY" - "$file" "$@" <<'EOF' || fail "unexpected JSON in $file"
import json, sys
doc = json.load(open(sys.argv[1]))
for pair in sys.argv[2:]:
    path, _, want = pair.partition("=")
    value = doc
    for key in path.split("."):
        value = value[key] if isinstance(value, dict) else None
    if want.endswith("*") and str(value).startswith(want[:-1]) or str(value) == want:
        continue
    sys.exit(f"{path} = {value!r}, expected {want!r}")
print(f"json ok: {', '.join(sys.argv[2:])}", file=sys.stderr)
EOF
}

make_key() {  # the signing key pair of steps 1b, 5 and 5c
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$WORK/envbuild.key" 2>/dev/null
    openssl pkey -in "$WORK/envbuild.key" -pubout -out "$WORK/envbuild.pub"
}

# Step 5c: one image for two architectures. Both halves go to one repository (an index names
# manifests of its own repository only), and each needs its own passing signed attestation.
multiarch() {
    say "5c. two architectures: images/jax-cpu natively, images/jax-cpu-arm64 under qemu-aarch64, one index"
    local multi=envbuild-e2e/multi arm=images/jax-cpu-arm64 amd=images/jax-cpu code
    run tools/enable-arm64-emulation
    ensure_base_arm64
    run tools/enable-arm64-emulation "$BASE_ARM64"
    run env -u ENVBUILD_MATRIX_OVERLAY "$ENVBUILD" lock --check "$arm"
    run env -u ENVBUILD_MATRIX_OVERLAY "$ENVBUILD" lock --check "$amd"
    docker image rm --no-prune envbuild-e2e/jax-cpu-arm64:ok envbuild-e2e/jax-cpu:ok >/dev/null 2>&1 || true
    # The registry's data stays in $WORK between runs: an earlier run's images, attestations
    # and index in this repository go first, so the refusal below is about this run's image.
    # (distribution's filesystem driver keeps a repository under docker/registry/v2/repositories;
    # this registry has no cache configured, so nothing remembers it.)
    rm -rf "$WORK/registry/data/docker/registry/v2/repositories/$multi"
    # The arm64 half first, pushed without --sign-key: in the registry, no evidence yet.
    # --resmoke: its smoke test runs under emulation on every run, not only on the first.
    run env -u ENVBUILD_MATRIX_OVERLAY "$ENVBUILD" image "$arm" --allow-cpu --base-image "$BASE_ARM64" \
        --ca-cert "$CA_CERT" --resmoke --tag envbuild-e2e/jax-cpu-arm64:ok --push "$REG/$multi:arm64" \
        --json >"$WORK/arm64.json"
    ARM_DIGEST=$(manifest_digest "$multi" arm64)
    check_json "$WORK/arm64.json" ok=True device=cpu smoke_reused=None "pushed.digest=$ARM_DIGEST"
    [ "$(docker image inspect --format '{{.Os}}/{{.Architecture}}' envbuild-e2e/jax-cpu-arm64:ok)" = linux/arm64 ] ||
        fail "envbuild-e2e/jax-cpu-arm64:ok is not a linux/arm64 image"
    run env -u ENVBUILD_MATRIX_OVERLAY "$ENVBUILD" image "$amd" --allow-cpu --base-image "$BASE" \
        --ca-cert "$CA_CERT" --resmoke --tag envbuild-e2e/jax-cpu:ok --push "$REG/$multi:amd64" \
        --sign-key "$WORK/envbuild.key" --json >"$WORK/amd64.json"
    AMD_DIGEST=$(manifest_digest "$multi" amd64)
    check_json "$WORK/amd64.json" ok=True device=cpu "pushed.digest=$AMD_DIGEST"
    set +e
    run "$ENVBUILD" promote "$REG/$multi:1" "$AMD_DIGEST" "$ARM_DIGEST" --key "$WORK/envbuild.pub" \
        --json >"$WORK/multi-refused.json"
    code=$?
    set -e
    [ "$code" = 9 ] || fail "promote of an arm64 image without an attestation exited $code, not 9"
    ARM_DIGEST=$ARM_DIGEST "$PY" - "$WORK/multi-refused.json" <<'EOF' || fail "promote refused the wrong digests (see $WORK/multi-refused.json)"
import json, os, sys
refused = json.load(open(sys.argv[1]))["fields"]["refused"]
assert [r["digest"] for r in refused] == [os.environ["ARM_DIGEST"]], refused
print(f"refused ok: {refused}", file=sys.stderr)
EOF
    run curl -s -o /dev/null -w '%{http_code}\n' "http://$REG/v2/$multi/manifests/1" >"$WORK/multi.http"
    [ "$(cat "$WORK/multi.http")" = 404 ] || fail "a refused promote pushed an index ($REG answered $(cat "$WORK/multi.http"))"
    # Signed now: the same image id passed above, so the pass stands and is attested.
    run env -u ENVBUILD_MATRIX_OVERLAY "$ENVBUILD" image "$arm" --allow-cpu --base-image "$BASE_ARM64" \
        --ca-cert "$CA_CERT" --tag envbuild-e2e/jax-cpu-arm64:ok --push "$REG/$multi:arm64" \
        --sign-key "$WORK/envbuild.key" --json >"$WORK/arm64-signed.json"
    check_json "$WORK/arm64-signed.json" ok=True "pushed.digest=$ARM_DIGEST"
    # (The lock is read as it was made: without step 4's matrix overlay.)
    run env -u ENVBUILD_MATRIX_OVERLAY "$ENVBUILD" verify "$REG/$multi@$ARM_DIGEST" \
        --key "$WORK/envbuild.pub" --lock "$arm" --json >"$WORK/arm64-verified.json"
    check_json "$WORK/arm64-verified.json" ok=True "digest=$ARM_DIGEST"
    run "$ENVBUILD" promote "$REG/$multi:1" "$AMD_DIGEST" "$ARM_DIGEST" --key "$WORK/envbuild.pub" \
        --json >"$WORK/multi.json"
    check_json "$WORK/multi.json" ok=True "ref=$REG/$multi:1"
    curl -sf -H 'Accept: application/vnd.oci.image.index.v1+json' \
        "http://$REG/v2/$multi/manifests/1" >"$WORK/multi.index.json"
    AMD_DIGEST=$AMD_DIGEST ARM_DIGEST=$ARM_DIGEST "$PY" - "$WORK/multi.index.json" <<'EOF' || fail "the two-architecture index is wrong (see $WORK/multi.index.json)"
import json, os, sys
index = json.load(open(sys.argv[1]))
assert index["mediaType"] == "application/vnd.oci.image.index.v1+json", index
got = [(m["digest"], m["platform"]) for m in index["manifests"]]
want = [(os.environ["AMD_DIGEST"], {"architecture": "amd64", "os": "linux"}),
        (os.environ["ARM_DIGEST"], {"architecture": "arm64", "os": "linux", "variant": "v8"})]
assert got == want, got
print(f"index ok: {got}", file=sys.stderr)
EOF
    # The push left registry-named references: only names, the images keep their
    # envbuild-e2e/* tags (the next run's cache).
    run docker image rm --no-prune "$REG/$multi:arm64" "$REG/$multi:amd64" >/dev/null
}

ensure_engine
ensure_base
[ "${1:-}" = prepare ] && exit 0

# One run at a time on this machine: the tags (envbuild-e2e/*), the registry's port, the
# smoke-pass store and the smoke containers counted above are engine-wide, so a second run (a
# clean clone beside the working tree) would remove the first's tags and see its containers.
exec 9>"${TMPDIR:-/tmp}/envbuild-e2e.lock"
if ! flock -n 9; then
    say "another e2e run holds ${TMPDIR:-/tmp}/envbuild-e2e.lock; waiting for it (up to 1 h)"
    flock -w 3600 9 || fail "another e2e run kept ${TMPDIR:-/tmp}/envbuild-e2e.lock for an hour"
fi

[ -f "$IMAGE_DIR/envbuild.lock" ] || fail "$IMAGE_DIR/envbuild.lock is missing (envbuild lock $IMAGE_DIR)"
LOCK_SHA=$(sha256sum "$IMAGE_DIR/envbuild.lock" | cut -d' ' -f1)
[ "$(smoke_containers)" = 0 ] || fail "smoke containers exist before the test; remove them first"
# --no-prune: the untagged parents are the build cache of the next run.
for t in "$TAG_OK" "$TAG_NOGPU" "$TAG_TIMEOUT" "$TAG_BUILDKIT"; do docker image rm --no-prune "$t" >/dev/null 2>&1 || true; done
common=("$IMAGE_DIR" --base-image "$BASE" --ca-cert "$CA_CERT")

start_registry

if [ "${E2E_ONLY:-}" = 5c ]; then
    make_key
    multiarch
    lap
    say "e2e step 5c passed: $REG/envbuild-e2e/multi:1 names $AMD_DIGEST (linux/amd64) and $ARM_DIGEST (linux/arm64)"
    exit 0
fi
[ -z "${E2E_ONLY:-}" ] || fail "E2E_ONLY=$E2E_ONLY is not a step this script runs alone (only 5c is)"

say "1. classic builder: build, smoke on the CPU path, tag"
run "$ENVBUILD" image "${common[@]}" --allow-cpu --tag "$TAG_OK" --json >"$WORK/ok.json"
check_json "$WORK/ok.json" ok=True "builder=classic builder (Docker *" pushed=None
docker image inspect "$TAG_OK" >/dev/null || fail "$TAG_OK does not exist"
docker image inspect --format '{{json .Config.Labels}}' "$TAG_OK" >"$WORK/labels.json"
LABELS="$WORK/labels.json" LOCK="$IMAGE_DIR/envbuild.lock" BASE="$BASE" "$PY" - <<'EOF' ||
import hashlib, json, os, sys
labels = json.load(open(os.environ["LABELS"]))
lock = open(os.environ["LOCK"], "rb").read()
assert labels.get("envbuild.lock", "").encode() == lock, "envbuild.lock label != the lock file"
want = hashlib.sha256(lock).hexdigest()
assert labels.get("envbuild.lock.sha256") == want, (labels.get("envbuild.lock.sha256"), want)
report = json.loads(labels["envbuild.smoke.report"])
assert report["ok"] is True, report
assert report["device"] == "cpu", report.get("device")
assert report["envbuild"]["base_image"] == os.environ["BASE"], report["envbuild"]
print(f"labels ok: envbuild.lock.sha256 = {want} | envbuild.smoke.report ok on cpu", file=sys.stderr)
EOF
    fail "the labels of $TAG_OK are wrong (see $WORK/labels.json)"
[ "$(smoke_containers)" = 0 ] || fail "smoke container left behind after a pass"
lap

say "1b. the pass signed: smoke attestation and SBOM verified downstream, a tampered one refused"
make_key
rm -rf "$WORK/evidence"
# The same image id passed in step 1: the pass stands (not run again) and is signed now.
run "$ENVBUILD" image "${common[@]}" --allow-cpu --tag "$TAG_OK" --sign-key "$WORK/envbuild.key" \
    --evidence "$WORK/evidence" --json >"$WORK/signed.json"
check_json "$WORK/signed.json" ok=True "evidence.bundle=$WORK/evidence/torch-slim.intoto.jsonl"
IMAGE_ID=$(docker image inspect --format '{{.Id}}' "$TAG_OK")
run "$ENVBUILD" verify --attestation "$WORK/evidence/torch-slim.intoto.jsonl" --key "$WORK/envbuild.pub" \
    --digest "$IMAGE_ID" --lock "$IMAGE_DIR" --json >"$WORK/verified.json"
check_json "$WORK/verified.json" ok=True attestations=2
BUNDLE="$WORK/evidence/torch-slim.intoto.jsonl" "$PY" - <<'EOF' || fail "could not tamper with the bundle"
import base64, json, os
path = os.environ["BUNDLE"]
first, *rest = open(path, "rb").read().splitlines()
env = json.loads(first)
stmt = json.loads(base64.b64decode(env["payload"]))
stmt["predicate"]["host"]["gpus"] = [{"product": "NVIDIA B200", "cc": "10.0"}]
env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
open(path + ".forged", "wb").write(b"\n".join([json.dumps(env).encode(), *rest]) + b"\n")
EOF
set +e
run "$ENVBUILD" verify --attestation "$WORK/evidence/torch-slim.intoto.jsonl.forged" --key "$WORK/envbuild.pub"
code=$?
set -e
[ "$code" = 22 ] || fail "a tampered attestation was not refused with exit 22 (got $code)"
lap

say "2. the same without --allow-cpu must fail on this GPU-less machine"
set +e
run "$ENVBUILD" image "${common[@]}" --tag "$TAG_NOGPU"
code=$?
set -e
[ "$code" = 7 ] || fail "expected exit 7 (no GPU runtime), got $code"
expect_untagged_and_clean "$TAG_NOGPU"

say "3. --smoke-timeout 1 must kill the smoke container, tag nothing and push nothing"
# --resmoke: this image id passed in step 1, which would otherwise stand for this run.
set +e
run "$ENVBUILD" image "${common[@]}" --allow-cpu --smoke-timeout 1 --resmoke --tag "$TAG_TIMEOUT" \
    --push "$REG/envbuild-e2e/torch-slim:timeout"
code=$?
set -e
[ "$code" = 6 ] || fail "expected exit 6 (smoke failed), got $code"
expect_untagged_and_clean "$TAG_TIMEOUT"
run curl -s -o /dev/null -w '%{http_code}\n' "http://$REG/v2/envbuild-e2e/torch-slim/manifests/timeout" >"$WORK/timeout.http"
[ "$(cat "$WORK/timeout.http")" = 404 ] || fail "a failing image was pushed ($REG answered $(cat "$WORK/timeout.http"))"
lap

say "4. the base from the local registry: lock a copy of $IMAGE_DIR pinned by digest"
run docker tag "$BASE" "$REG/$BASE"
run docker push "$REG/$BASE"
BASE_DIGEST=$(manifest_digest "${BASE%%:*}" "${BASE##*:}")
# A matrix overlay whose debian12 row names the registry's base (same key: it replaces the row).
mkdir -p "$WORK/overlay"
cat >"$WORK/overlay/os_images.toml" <<EOF
schema_version = 1

[[os]]
os = "debian12"
image = "$REG/$BASE"
python = "3.11"
python_packages = ["python3", "python3-venv"]
confidence = "high"
source = "https://packages.debian.org/bookworm/python3 (tests/e2e.sh serves it from a local registry)"
EOF
export ENVBUILD_MATRIX_OVERLAY=$WORK/overlay
rm -rf "$PINNED"
mkdir -p "$PINNED"
cp "$IMAGE_DIR/envbuild.toml" "$IMAGE_DIR/envbuild.lock" "$PINNED/"
run "$ENVBUILD" lock "$PINNED"
run "$ENVBUILD" lock --check "$PINNED"
grep -q '^pinned = true$' "$PINNED/envbuild.lock" || fail "the lock is not pinned: $(grep -A6 '^\[base_image\]' "$PINNED/envbuild.lock")"
grep -q "^digest = \"$BASE_DIGEST\"$" "$PINNED/envbuild.lock" ||
    fail "the locked digest is not the sha256 of the registry's manifest ($BASE_DIGEST)"
run "$ENVBUILD" render "$PINNED" >"$WORK/pinned.Dockerfile"
grep -q "^FROM $REG/$BASE@$BASE_DIGEST$" "$WORK/pinned.Dockerfile" || fail "the Dockerfile does not build FROM the pinned base"
echo "pinned: $REG/$BASE@$BASE_DIGEST" >&2
LOCK_SHA=$(sha256sum "$PINNED/envbuild.lock" | cut -d' ' -f1)
lap

say "5. BuildKit (docker buildx) on the pinned lock, pushed after the pass"
command -v docker >/dev/null && docker buildx version >/dev/null 2>&1 || run tools/install-buildx
run "$ENVBUILD" image "$PINNED" --buildkit --cache-to type=inline --ca-cert "$CA_CERT" \
    --allow-cpu --tag "$TAG_BUILDKIT" --push "$REG/envbuild-e2e/torch-slim:buildkit" \
    --sign-key "$WORK/envbuild.key" --json >"$WORK/buildkit.json"
PUSHED=$(manifest_digest envbuild-e2e/torch-slim buildkit)
check_json "$WORK/buildkit.json" ok=True "builder=BuildKit (docker buildx *" \
    "base_image=$REG/$BASE" "pushed.digest=$PUSHED" \
    "pushed.repo_digest=$REG/envbuild-e2e/torch-slim@$PUSHED"
[ "$(smoke_containers)" = 0 ] || fail "smoke container left behind after a pass"
echo "pushed: $REG/envbuild-e2e/torch-slim@$PUSHED (recomputed from the registry's manifest)" >&2
# What a new host does with it (docs/ci.md): pull by digest; the fleet view needs no GPU.
run docker pull "$REG/envbuild-e2e/torch-slim@$PUSHED"
run "$ENVBUILD" validate --hosts tests/fixtures/hosts/h200-healthy.json --lock "$PINNED"
if [ "${E2E_SLURM:-1}" = 1 ]; then
    say "5a. Slurm (slurm-wlm + munge on 127.0.0.1): the pushed image's smoke on every node, read back"
    # tests/slurm/up.sh starts munged, slurmctld and slurmd (one node, e2e-node1, whose engine
    # is this Docker); the generated script runs the payload through it by digest and leaves
    # one verdict per node in the run folder; sbatch --wait returns the job's exit code.
    command -v slurmctld >/dev/null && command -v munged >/dev/null || apt_install slurm-wlm munge
    SLURM_DIR=$WORK/slurm
    rm -rf "$SLURM_DIR" && mkdir -p "$SLURM_DIR/shared"
    run bash tests/slurm/up.sh "$SLURM_DIR/cluster" >"$SLURM_DIR/env"
    SLURM_UP=$SLURM_DIR/cluster
    eval "$(cat "$SLURM_DIR/env")"
    run "$ENVBUILD" fleet slurm --lock "$PINNED" --image "$REG/envbuild-e2e/torch-slim@$PUSHED" \
        --allow-cpu --partition e2e --shared "$SLURM_DIR/shared" -o "$SLURM_DIR/smoke.sbatch" --json >"$SLURM_DIR/script.json"
    JOB=$(cd "$SLURM_DIR" && run sbatch --wait --parsable smoke.sbatch | cut -d';' -f1) || fail "the Slurm job failed: $(cat "$SLURM_DIR"/shared/*.out)"
    RUN_NAME=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["run_name"])' "$SLURM_DIR/script.json")
    run "$ENVBUILD" fleet results --slurm "$SLURM_DIR/shared/$RUN_NAME-$JOB" --junit "$SLURM_DIR/fleet.xml" --json >"$SLURM_DIR/results.json"
    check_json "$SLURM_DIR/results.json" ok=True source=slurm counts.passed=1 classes.cpu.passed=1
    grep -q 'testcase classname="envbuild.fleet.*" name="e2e-node1"' "$SLURM_DIR/fleet.xml" || fail "no JUnit testcase for e2e-node1"
    # A digest the registry does not hold: the node's engine cannot pull it, the step leaves
    # its exit code and stderr but no verdict, and the read-back says so (exit 1).
    MISSING="$REG/envbuild-e2e/torch-slim@sha256:$(printf '0%.0s' $(seq 64))"
    run "$ENVBUILD" fleet slurm --lock "$PINNED" --image "$MISSING" --allow-cpu --partition e2e \
        --shared "$SLURM_DIR/shared" -o "$SLURM_DIR/missing.sbatch" >/dev/null
    JOB2=$(cd "$SLURM_DIR" && run sbatch --wait --parsable missing.sbatch) && fail "the job of a missing image passed"
    set +e
    run "$ENVBUILD" fleet results --slurm "$SLURM_DIR/shared/$RUN_NAME-${JOB2%%;*}" --json >"$SLURM_DIR/missing.json"
    code=$?
    set -e
    [ "$code" = 1 ] || fail "fleet results of a failed run exited $code, expected 1"
    check_json "$SLURM_DIR/missing.json" ok=False counts.failed=1
    "$PY" -c 'import json, sys; n = json.load(open(sys.argv[1]))["nodes"][0]
assert n["check"] == "no-verdict" and n["exit_code"] != 0 and n["detail"], n
print("missing image:", n["detail"][:160], file=sys.stderr)' "$SLURM_DIR/missing.json" || fail "unexpected read-back of the missing image"
    run bash tests/slurm/down.sh "$SLURM_UP"
    SLURM_UP=
    lap
fi
# The push and the pull left registry-named references on local images: only names, so
# --no-prune keeps the images (each also has an envbuild-e2e/* tag, the next run's cache).
# (The digest first: removing a repository's last tag drops its digest references too.)
run docker image rm --no-prune "$REG/envbuild-e2e/torch-slim@$PUSHED" "$REG/$BASE" \
    "$REG/envbuild-e2e/torch-slim:buildkit" >/dev/null
left=$(docker image ls --digests --format '{{.Repository}}:{{.Tag}}@{{.Digest}}' | grep -F "$REG/" || true)
[ -z "$left" ] || fail "registry-named references left on local images: $left"
lap

say "5b. evidence in the registry: verified from the digest, promoted; a forged pass refused"
run "$ENVBUILD" verify "$REG/envbuild-e2e/torch-slim@$PUSHED" --key "$WORK/envbuild.pub" \
    --lock "$PINNED" --json >"$WORK/verified-registry.json"
check_json "$WORK/verified-registry.json" ok=True attestations=2 "digest=$PUSHED"
set +e
run "$ENVBUILD" promote "$REG/$BASE-promoted" "$BASE_DIGEST" --key "$WORK/envbuild.pub" --json >"$WORK/refused.json"
code=$?
set -e
[ "$code" = 9 ] || fail "promote of a base that never ran a smoke test exited $code, not 9"
check_json "$WORK/refused.json" error=PromoteRefused "fields.refused=*"
# Someone with push rights attaches a genuine envelope re-aimed at the base: its signature no
# longer matches, so verify says 22 and promote refuses it.
REG=$REG BASE=$BASE BASE_DIGEST=$BASE_DIGEST "$PY" - "$WORK/evidence/torch-slim.intoto.jsonl" <<'EOF' || fail "attaching the forged attestation failed"
import base64, json, os, sys
from envbuild.engine import oci, oci_registry
env = json.loads(open(sys.argv[1], "rb").read().splitlines()[0])
stmt = json.loads(base64.b64decode(env["payload"]))
stmt["subject"] = [{"name": "base", "digest": {"sha256": os.environ["BASE_DIGEST"][7:]}}]
env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
client = oci_registry.RegistryClient(os.environ["REG"], os.environ["BASE"].split(":")[0])
smoke = "https://envbuild.dev/smoke/v1"
oci_registry.attach(client, os.environ["BASE_DIGEST"], oci.DSSE,
                    [oci_registry.attestation(json.dumps(env).encode(), smoke)])
EOF
set +e
run "$ENVBUILD" verify "$REG/${BASE%%:*}@$BASE_DIGEST" --key "$WORK/envbuild.pub"
code=$?
set -e
[ "$code" = 22 ] || fail "a forged attestation in the registry was not refused with exit 22 (got $code)"
set +e
run "$ENVBUILD" promote "$REG/$BASE-promoted" "$BASE_DIGEST" --key "$WORK/envbuild.pub" >/dev/null
code=$?
set -e
[ "$code" = 9 ] || fail "promote trusted a forged attestation (exit $code, not 9)"
run "$ENVBUILD" promote "$REG/envbuild-e2e/torch-slim:promoted" "$PUSHED" --key "$WORK/envbuild.pub" --json >"$WORK/promoted.json"
check_json "$WORK/promoted.json" ok=True "ref=$REG/envbuild-e2e/torch-slim:promoted"
curl -sf -H 'Accept: application/vnd.oci.image.index.v1+json' \
    "http://$REG/v2/envbuild-e2e/torch-slim/manifests/promoted" >"$WORK/promoted.index.json"
PUSHED=$PUSHED "$PY" - "$WORK/promoted.index.json" <<'EOF' || fail "the promoted index is wrong (see $WORK/promoted.index.json)"
import json, os, sys
index = json.load(open(sys.argv[1]))
assert index["mediaType"] == "application/vnd.oci.image.index.v1+json", index
got = [(m["digest"], m["platform"]) for m in index["manifests"]]
assert got == [(os.environ["PUSHED"], {"architecture": "amd64", "os": "linux"})], got
print(f"index ok: {got}", file=sys.stderr)
EOF
lap

if [ "$E2E_ARM64" = 1 ]; then
    multiarch
    lap
fi

if [ "$E2E_PODMAN" = 1 ]; then
    say "6. Podman: build -> smoke -> tag through its Docker-compatible API, images/torch-cpu pinned"
    # A 1 GB CPU image: Podman 4.3 once failed committing torch-slim's 5 GB CUDA layer ("io:
    # read/write on closed pipe"), and the path under test is the same for any size.
    [ -d "$WHEELS" ] || fail "$WHEELS is missing (images/torch-cpu locks torch from it); set E2E_WHEELS"
    command -v podman >/dev/null || apt_install podman
    # Locked with step 4's overlay: FROM the local registry's base, pinned by digest.
    rm -rf "$PINNED_CPU"
    mkdir -p "$PINNED_CPU"
    cp images/torch-cpu/envbuild.toml images/torch-cpu/envbuild.lock "$PINNED_CPU/"
    sed -i "s|^find_links = \[\"/opt/wheels\"\]$|find_links = [\"$WHEELS\"]|" "$PINNED_CPU/envbuild.toml"
    run "$ENVBUILD" lock "$PINNED_CPU"
    grep -q "^digest = \"$BASE_DIGEST\"$" "$PINNED_CPU/envbuild.lock" && grep -q '^pinned = true$' "$PINNED_CPU/envbuild.lock" ||
        fail "$PINNED_CPU/envbuild.lock is not pinned to $REG/$BASE@$BASE_DIGEST"
    LOCK_SHA=$(sha256sum "$PINNED_CPU/envbuild.lock" | cut -d' ' -f1)
    mkdir -p "$WORK/podman"
    # Rootful Podman gives containers nofile/nproc limits only a process with CAP_SYS_RESOURCE
    # may set; CI sandboxes lack it ("error setting rlimit type 7"): ask for what we have.
    nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
    [ "$nofile" = unlimited ] || [ "$nofile" -gt 1048576 ] && nofile=1048576
    [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
    printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n' \
        "$nofile" "$nofile" "$nproc" "$nproc" >"$WORK/podman/containers.conf"
    printf '[[registry]]\nlocation = "%s"\ninsecure = true\n' "$REG" >"$WORK/podman/registries.conf"
    sock=unix://$WORK/podman/podman.sock
    rm -f "$WORK/podman/podman.sock"
    printf '+ podman system service --time=0 %s &\n' "$sock" >&2
    # (CONTAINER_HOST is for envbuild below; set for podman itself it would make it a client.)
    # 9>&-: a service must not hold the run's lock should it outlive the script.
    env -u CONTAINER_HOST CONTAINERS_CONF="$WORK/podman/containers.conf" \
        CONTAINERS_REGISTRIES_CONF="$WORK/podman/registries.conf" \
        podman system service --time=0 "$sock" >"$WORK/podman/log" 2>&1 9>&- &
    PIDS+=($!)
    wait_for "podman system service" curl -sf --unix-socket "$WORK/podman/podman.sock" http://d/_ping
    # Earlier runs' tags (torch-slim's: 5 GB, from before this step used torch-cpu). --no-prune:
    # the layers stay the next run's build cache; --resmoke: the smoke test runs even where this
    # image id passed before (as in step 3).
    podman image rm --no-prune "$TAG_PODMAN" localhost/envbuild-e2e/torch-slim:podman >/dev/null 2>&1 || true
    run env CONTAINER_HOST="$sock" "$ENVBUILD" image "$PINNED_CPU" --engine podman --ca-cert "$CA_CERT" \
        --find-links "$WHEELS" --resmoke --tag "$TAG_PODMAN" --json >"$WORK/podman.json"
    check_json "$WORK/podman.json" ok=True smoke_reused=None device=cpu "builder=Buildah (Podman *" "base_image=$REG/$BASE"
    run podman image inspect --format '{{index .Labels "envbuild.lock.sha256"}}' "$TAG_PODMAN" >"$WORK/podman.label"
    [ "$(cat "$WORK/podman.label")" = "$LOCK_SHA" ] || fail "$TAG_PODMAN lacks the lock's label"
    left=$(podman ps -a --filter "label=envbuild.lock.sha256=$LOCK_SHA" --format '{{.Names}} {{.Status}} {{.Labels}}')
    [ -z "$left" ] || fail "Podman smoke container left behind: $left"
    lap
fi

if [ "${E2E_PROJECT:-1}" = 1 ]; then
say "7. a project (images/torch-project): its pyproject.toml locked, its code installed, its own smoke command"
PROJECT_DIR=images/torch-project
TAG_PROJECT=envbuild-e2e/torch-project:ok
TAG_EDITED=envbuild-e2e/torch-project:edited
[ -d "$WHEELS" ] || fail "$WHEELS is missing (images/torch-project locks torch from it); set E2E_WHEELS"
unset ENVBUILD_MATRIX_OVERLAY  # step 4's overlay changes the debian12 row this lock rests on
LOCK_SHA=$(sha256sum "$PROJECT_DIR/envbuild.lock" | cut -d' ' -f1)
# --no-prune: the layers stay the next run's build cache; --resmoke: the smoke test and the
# project's smoke command run even where this image id passed before (as in step 3).
docker image rm --no-prune "$TAG_PROJECT" "$TAG_EDITED" >/dev/null 2>&1 || true
run "$ENVBUILD" lock --check "$PROJECT_DIR"
run "$ENVBUILD" image "$PROJECT_DIR" --base-image "$BASE" --ca-cert "$CA_CERT" --find-links "$WHEELS" \
    --resmoke --tag "$TAG_PROJECT" --json >"$WORK/project.json"
check_json "$WORK/project.json" ok=True smoke_reused=None device=cpu smoke_command.ok=True smoke_command.exit_code=0 \
    "smoke_command.stdout_tail=['torch 2.13.0+cpu on cpu: 5 steps in*"
docker image inspect --format '{{index .Config.Labels "envbuild.smoke.report"}}' "$TAG_PROJECT" |
    grep -q '"smoke_command":{"command":\["python","-m","torch_project.train","--steps","5"\]' ||
    fail "the report label of $TAG_PROJECT does not record the smoke command"
run docker run --rm "$TAG_PROJECT" python -m torch_project.train --steps 3 >"$WORK/project.run"
grep -q '^torch 2.13.0+cpu on cpu: 3 steps' "$WORK/project.run" || fail "the project does not run: $(cat "$WORK/project.run")"
# A code change: the same lock, one source file edited -> only the last layers differ.
rm -rf "$WORK/edited"
mkdir -p "$WORK/edited"
cp -r "$PROJECT_DIR" "$WORK/edited/"
# A line of this run's own: an earlier run on this host built the same edit, and its image id
# passed then (the pass store is the user's), which would stand for this run's whole test.
echo "# edited by tests/e2e.sh, run $(date +%s%N)" >>"$WORK/edited/torch-project/src/torch_project/train.py"
# Without --resmoke: only the project's code changed since the environment passed (just
# above, under --resmoke, which still records its pass), so only its smoke command runs.
run "$ENVBUILD" image "$WORK/edited/torch-project" --base-image "$BASE" --ca-cert "$CA_CERT" \
    --find-links "$WHEELS" --tag "$TAG_EDITED" --json >"$WORK/edited.json"
check_json "$WORK/edited.json" ok=True smoke_reused.scope=environment smoke_payload_s=0.0 smoke_command.ok=True \
    "smoke_command.stdout_tail=['torch 2.13.0+cpu on cpu: 5 steps in*"
docker image inspect --format '{{index .Config.Labels "envbuild.smoke.report"}}' "$TAG_EDITED" |
    grep -q '"environment_pass"' || fail "the report label of $TAG_EDITED does not say whose environment pass it carries"
for t in "$TAG_PROJECT" "$TAG_EDITED"; do
    docker image inspect --format '{{range .RootFS.Layers}}{{println .}}{{end}}' "$t" | sed '/^$/d' >"$WORK/layers.${t##*:}"
done
total=$(wc -l <"$WORK/layers.ok")
shared=$(paste -d' ' "$WORK/layers.ok" "$WORK/layers.edited" | awk '$1 != $2 {exit} {n++} END {print n+0}')
echo "layers: $shared of $total shared after a code change" >&2
[ "$total" = "$(wc -l <"$WORK/layers.edited")" ] && [ "$shared" -lt "$total" ] && [ "$((total - shared))" -le 2 ] ||
    fail "a code change rebuilt $((total - shared)) of $total layers (expected the project's copy and its install: at most 2)"
[ "$(smoke_containers)" = 0 ] || fail "smoke container left behind after a pass"
lap
fi

if [ "${E2E_PROJECT:-1}" = 1 ]; then
say "7b. a folder of scripts that writes where it runs (tests/fixtures/projects/writes-cwd)"
# No pyproject.toml: copied, not installed; its code in data/ is copied; its smoke command
# (exec form, a quote inside an argument) writes checkpoint.pt and train.log into /app,
# which only works when the runtime user (uid 1000) owns /app.
TAG_CWD=envbuild-e2e/writes-cwd:ok
rm -rf "$WORK/writes-cwd" && cp -r tests/fixtures/projects/writes-cwd "$WORK/writes-cwd"
docker image rm --no-prune "$TAG_CWD" >/dev/null 2>&1 || true
run env -u ENVBUILD_MATRIX_OVERLAY "$ENVBUILD" lock "$WORK/writes-cwd"
run env -u ENVBUILD_MATRIX_OVERLAY "$ENVBUILD" image "$WORK/writes-cwd" --base-image "$BASE" \
    --ca-cert "$CA_CERT" --find-links "$WHEELS" --resmoke --tag "$TAG_CWD" --json >"$WORK/writes-cwd.json"
check_json "$WORK/writes-cwd.json" ok=True device=cpu smoke_command.ok=True smoke_command.exit_code=0 \
    "smoke_command.stdout_tail=['wrote /app/checkpoint.pt and /app/train.log*"
run docker run --rm "$TAG_CWD" sh -c 'test "$(stat -c %u /app)" = "$(id -u)" && test -f /app/data/prepare.py' ||
    fail "$TAG_CWD: /app is not the runtime user's, or data/prepare.py was left out"
[ "$(smoke_containers)" = 0 ] || fail "smoke container left behind after a pass"
lap
fi

if [ "${E2E_PROJECT:-1}" = 1 ]; then
say "7d. a project whose version comes from git (tests/fixtures/projects/scm-version, setuptools-scm)"
# Made a git repository tagged v1.2.3 here; .git stays out of the build context, so the
# version goes in as SETUPTOOLS_SCM_PRETEND_VERSION, read on this side by setuptools-scm.
TAG_SCM=envbuild-e2e/scm-version:ok
rm -rf "$WORK/scm-version" && cp -r tests/fixtures/projects/scm-version "$WORK/scm-version"
git -C "$WORK/scm-version" init -q
git -C "$WORK/scm-version" add -A
git -C "$WORK/scm-version" -c user.name=e2e -c user.email=e2e@localhost commit -q -m fixture
git -C "$WORK/scm-version" tag v1.2.3
docker image rm --no-prune "$TAG_SCM" >/dev/null 2>&1 || true
run env -u ENVBUILD_MATRIX_OVERLAY -u SETUPTOOLS_SCM_PRETEND_VERSION "$ENVBUILD" lock "$WORK/scm-version"
run env -u ENVBUILD_MATRIX_OVERLAY -u SETUPTOOLS_SCM_PRETEND_VERSION "$ENVBUILD" image "$WORK/scm-version" \
    --base-image "$BASE" --ca-cert "$CA_CERT" --find-links "$WHEELS" --resmoke --tag "$TAG_SCM" \
    --json >"$WORK/scm-version.json"
check_json "$WORK/scm-version.json" ok=True device=cpu smoke_command.ok=True \
    "smoke_command.stdout_tail=['scmdemo 1.2.3']"
run docker run --rm "$TAG_SCM" python -c 'import scmdemo; assert scmdemo.__version__ == "1.2.3", scmdemo.__version__' ||
    fail "$TAG_SCM does not carry the version of the project's git tag (v1.2.3)"
[ "$(smoke_containers)" = 0 ] || fail "smoke container left behind after a pass"
lap
fi

if [ "${E2E_PROJECT:-1}" = 1 ]; then
say "7c. a pure-Python package that ships only an sdist, built in a plain builder stage"
# tests/fixtures/sdists/puredep packed as tests/sdist.py packs it (members with mtime 0, as a
# reproducible sdist is), beside torch's CPU wheel in one wheel folder; no compile_extensions:
# the builder is the image's own base, and the image holds no compiler.
TAG_PURE=envbuild-e2e/puredep:ok
rm -rf "$WORK/puredep" && mkdir -p "$WORK/puredep/wheels" "$WORK/puredep/img"
cp "$WHEELS"/torch-*.whl "$WORK/puredep/wheels/"
"$PY" -c 'import sys; from pathlib import Path; from tests.sdist import make_sdist
name, data = make_sdist(Path("tests/fixtures/sdists/puredep")); Path(sys.argv[1], name).write_bytes(data)' "$WORK/puredep/wheels"
cat >"$WORK/puredep/img/envbuild.toml" <<EOF2
[image]
python = "3.11"
os = "debian12"
device = "cpu"

[framework]
requirement = "torch"

[packages]
requirements = ["envbuild-puredep==0.6.0"]

[indexes]
find_links = ["$WORK/puredep/wheels"]

[smoke]
tier = 1
command = ["python", "-c", "import envbuild_puredep; print('puredep imports')"]
EOF2
docker image rm --no-prune "$TAG_PURE" >/dev/null 2>&1 || true
run env -u ENVBUILD_MATRIX_OVERLAY "$ENVBUILD" lock "$WORK/puredep/img"
grep -q 'kind = "pure"' "$WORK/puredep/img/envbuild.lock" || fail "the lock does not record envbuild-puredep as pure Python"
run env -u ENVBUILD_MATRIX_OVERLAY "$ENVBUILD" image "$WORK/puredep/img" --base-image "$BASE" \
    --ca-cert "$CA_CERT" --resmoke --tag "$TAG_PURE" --json >"$WORK/puredep.json"
check_json "$WORK/puredep.json" ok=True device=cpu smoke_command.ok=True "smoke_command.stdout_tail=['puredep imports']"
run docker run --rm "$TAG_PURE" sh -c '! command -v gcc && ! command -v cc && ! command -v nvcc' ||
    fail "$TAG_PURE holds a compiler"
lap
fi

if [ "${E2E_TORCH_EXT:-1}" = 1 ]; then
    say "8. images/torch-ext: a CUDA extension compiled from its sdist for the lock's GPUs"
    # nvcc (NVIDIA's toolkit wheels, locked) compiles in the builder without a GPU; the smoke's
    # CPU path reads the archs of the compiled .so (ext-archs:envbuild-vecadd). The plain lock
    # (no matrix overlay, no Podman socket) and the local base as in step 1.
    EXT_DIR=images/torch-ext
    TAG_EXT=envbuild-e2e/torch-ext:ok
    docker image rm "$TAG_EXT" >/dev/null 2>&1 || true
    run env -u ENVBUILD_MATRIX_OVERLAY -u CONTAINER_HOST "$ENVBUILD" lock --check "$EXT_DIR"
    run env -u ENVBUILD_MATRIX_OVERLAY -u CONTAINER_HOST "$ENVBUILD" image "$EXT_DIR" \
        --base-image "$BASE" --ca-cert "$CA_CERT" --find-links "$EXT_DIR/wheels" --allow-cpu \
        --tag "$TAG_EXT" --json >"$WORK/ext.json"
    check_json "$WORK/ext.json" ok=True device=cpu
    docker image inspect --format '{{index .Config.Labels "envbuild.smoke.report"}}' "$TAG_EXT" >"$WORK/ext-report.json"
    REPORT="$WORK/ext-report.json" "$PY" - <<'EOF' || fail "the smoke report of $TAG_EXT lacks a passing ext-archs check (see $WORK/ext-report.json)"
import json, os, sys
report = json.load(open(os.environ["REPORT"]))
check = next(c for c in report["checks"] if c["name"] == "ext-archs:envbuild-vecadd")
assert check["status"] == "pass", check
assert "sm_89 sm_90" in check["figure"], check
print(f"ext-archs: {check['figure']}", file=sys.stderr)
EOF
    # The toolchain stayed in the builder: no nvcc and no toolkit wheels in the image.
    run docker run --rm "$TAG_EXT" bash -c '! ls /opt/envbuild/toolchain 2>/dev/null && ! compgen -G "/opt/venv/lib/python3*/site-packages/nvidia/cu13/bin/nvcc" && python -c "import envbuild_vecadd"' ||
        fail "$TAG_EXT ships the toolchain or cannot import its extension"
    lap
fi

say "e2e passed: classic and BuildKit builds tagged with envbuild.lock.sha256 and envbuild.smoke.report; $REG/envbuild-e2e/torch-slim@$PUSHED pushed after its pass; optional steps run: Slurm=${E2E_SLURM:-1} arm64=$E2E_ARM64 Podman=$E2E_PODMAN project=${E2E_PROJECT:-1} torch-ext=${E2E_TORCH_EXT:-1}"
