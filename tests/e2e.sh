#!/usr/bin/env bash
# The real build -> smoke -> tag path on a machine without a GPU (issue 5), run by `make e2e`
# and .ci/run. Where no engine answers it starts one (installing Debian's docker.io when root),
# makes a local base image without any registry (debootstrap + `docker import`), then:
#   1. envbuild image images/torch-slim --allow-cpu ...  -> exit 0, tag with both labels
#   2. the same without --allow-cpu                        -> fails (exit 7), no tag, no container
#   3. the same with --smoke-timeout 1                     -> fails (exit 6), no tag, no container
# `bash tests/e2e.sh prepare` only starts the engine and makes the base image (.ci/run uses it
# so the engine-marked tests of `make check` run too).
set -euo pipefail
cd "$(dirname "$0")/.."

ENVBUILD=${ENVBUILD:-.venv/bin/envbuild}
PY=${PY:-.venv/bin/python}
BASE=envbuild-e2e/base:bookworm
IMAGE_DIR=${E2E_IMAGE_DIR:-images/torch-slim}
CA_CERT=${E2E_CA_CERT:-/etc/ssl/certs/ca-certificates.crt}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
WORK=.e2e
TAG_OK=envbuild-e2e/torch-slim:ok
TAG_NOGPU=envbuild-e2e/torch-slim:nogpu
TAG_TIMEOUT=envbuild-e2e/torch-slim:timeout
mkdir -p "$WORK"

say() { printf '\n== %s\n' "$*" >&2; }
fail() { printf 'e2e FAILED: %s\n' "$*" >&2; exit 1; }
run() { printf '+ %s\n' "$*" >&2; "$@"; }

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

# Smoke containers of this lock only (envbuild labels them with the lock's sha256), so other
# users of the same engine do not disturb the count.
smoke_containers() { docker ps -aq --filter "label=envbuild.lock.sha256=$LOCK_SHA" | wc -l; }

expect_untagged_and_clean() {
    if docker image inspect "$1" >/dev/null 2>&1; then fail "$1 was tagged after a failure"; fi
    [ "$(smoke_containers)" = 0 ] || fail "smoke containers left behind: $(docker ps -a --filter "label=envbuild.lock.sha256=$LOCK_SHA")"
}

ensure_engine
ensure_base
[ "${1:-}" = prepare ] && exit 0

[ -f "$IMAGE_DIR/envbuild.lock" ] || fail "$IMAGE_DIR/envbuild.lock is missing (envbuild lock $IMAGE_DIR)"
LOCK_SHA=$(sha256sum "$IMAGE_DIR/envbuild.lock" | cut -d' ' -f1)
[ "$(smoke_containers)" = 0 ] || fail "smoke containers exist before the test; remove them first"
for t in "$TAG_OK" "$TAG_NOGPU" "$TAG_TIMEOUT"; do docker image rm "$t" >/dev/null 2>&1 || true; done
common=("$IMAGE_DIR" --base-image "$BASE" --ca-cert "$CA_CERT")

say "1. build, smoke on the CPU path, tag"
run "$ENVBUILD" image "${common[@]}" --allow-cpu --tag "$TAG_OK" --json >"$WORK/ok.json"
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

say "2. the same without --allow-cpu must fail on this GPU-less machine"
set +e
run "$ENVBUILD" image "${common[@]}" --tag "$TAG_NOGPU"
code=$?
set -e
[ "$code" = 7 ] || fail "expected exit 7 (no GPU runtime), got $code"
expect_untagged_and_clean "$TAG_NOGPU"

say "3. --smoke-timeout 1 must kill the smoke container and tag nothing"
set +e
run "$ENVBUILD" image "${common[@]}" --allow-cpu --smoke-timeout 1 --tag "$TAG_TIMEOUT"
code=$?
set -e
[ "$code" = 6 ] || fail "expected exit 6 (smoke failed), got $code"
expect_untagged_and_clean "$TAG_TIMEOUT"

say "e2e passed: $TAG_OK tagged with envbuild.lock.sha256 and envbuild.smoke.report"
