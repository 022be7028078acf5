#!/usr/bin/env bash
# The tag gate proven on a GPU machine that reaches no registry (the H200 device machine),
# through the real CLI. What it needs beside the checkout: .cache/h200/ from
# tests/gpu/make_engine_bundle.sh (Debian 13's dockerd 26.1.5, containerd, runc, the docker
# CLI; the docker and tomlkit wheels). Run as root with the Python that holds the machine's
# torch first on PATH:
#     OUT=/some/dir bash tests/gpu/h200_image_e2e.sh
# Brings the engine up as measured on the H200 (CDI on; no iptables, bridge or userland proxy),
# writes a CDI spec for the machine's GPUs (tests/gpu/write_cdi_spec.py: the toolkit cannot be
# installed there), then runs tests/gpu/h200_image_e2e.py (devel base; a torch extension and
# a project on it; lock, image, validate, faults), and stops the engine. Results and logs go
# to $OUT.
# ENG_DIR and CDI_DIR move the engine's state and the CDI spec (a dry run beside another
# engine on a machine without a GPU: NO_GPU=1 ENG_DIR=/tmp/x CDI_DIR=/tmp/x/cdi).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
OUT=${OUT:-$REPO/.e2e/h200}
BUNDLE=${BUNDLE:-$REPO/.cache/h200}
ENG=${ENG_DIR:-/var/lib/h200-e2e}
CDI_DIR=${CDI_DIR:-/etc/cdi}
PY=${TORCH_PYTHON:-python3}
export OUT CDI_DIR
mkdir -p "$OUT" "$ENG" "$CDI_DIR"
exec > >(tee "$OUT/h200-image-e2e.log") 2>&1
# NVLink multicast stays off on shared machines (the device's own rule).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

echo "== python: $(command -v "$PY") $("$PY" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__)' 2>&1)"
# What the devel base takes from this machine (make_torch_base.py --devel).
echo "== toolkit: $(readlink -f /usr/local/cuda) nvcc=$(command -v nvcc) $(nvcc --version 2>&1 | tail -1)"
"$PY" -c 'import setuptools, sysconfig, os; inc = sysconfig.get_paths()["include"]; print("== setuptools", setuptools.__version__, "Python.h", os.path.exists(os.path.join(inc, "Python.h")), inc)' 2>&1
echo "== c++: $(c++ --version 2>&1 | head -1)"
if ls "$BUNDLE"/whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/h200-site "$BUNDLE"/whl/*.whl || exit 1
    export PYTHONPATH=/tmp/h200-site:$REPO${EXTRA_PYTHONPATH:+:$EXTRA_PYTHONPATH}
else
    export PYTHONPATH=$REPO${EXTRA_PYTHONPATH:+:$EXTRA_PYTHONPATH}
fi

# uv, for `envbuild lock` of the requests with extra packages there (xz: the bundle must fit
# the 64 MiB a device call carries).
if [ -f "$BUNDLE/uv.xz" ]; then
    mkdir -p /tmp/h200-uv && xz -dc "$BUNDLE/uv.xz" > /tmp/h200-uv/uv && chmod 0755 /tmp/h200-uv/uv
    export ENVBUILD_UV=/tmp/h200-uv/uv
    echo "== $("$ENVBUILD_UV" --version)"
fi

echo "== engine (state in $ENG)"
mkdir -p "$ENG/bin"
tar -xJf "$BUNDLE/eng.tar.xz" -C "$ENG" || exit 1
# Debian 13's runc needs glibc >= 2.38 (the H200 image has 2.39); elsewhere the machine's own.
if ! "$ENG/bin/runc" --version >/dev/null 2>&1 && command -v runc >/dev/null; then
    echo "bundled runc does not run here; using $(command -v runc)"
    cp "$(command -v runc)" "$ENG/bin/runc"
fi
export PATH=$ENG/bin:$PATH
cat > "$ENG/daemon.json" <<J
{"features": {"cdi": true}, "cdi-spec-dirs": ["$CDI_DIR"], "iptables": false, "ip-masq": false,
 "bridge": "none", "userland-proxy": false, "data-root": "$ENG/data", "exec-root": "$ENG/exec",
 "pidfile": "$ENG/docker.pid", "hosts": ["unix://$ENG/docker.sock"]}
J
setsid containerd --address "$ENG/containerd.sock" --root "$ENG/containerd" \
    --state "$ENG/containerd-state" > "$OUT/containerd.log" 2>&1 < /dev/null &
echo $! > "$ENG/containerd.pid"
for _ in $(seq 40); do [ -S "$ENG/containerd.sock" ] && break; sleep 0.25; done
setsid dockerd --config-file "$ENG/daemon.json" --containerd "$ENG/containerd.sock" \
    > "$OUT/dockerd.log" 2>&1 < /dev/null &
export DOCKER_HOST=unix://$ENG/docker.sock
up=0
for _ in $(seq 120); do docker version >/dev/null 2>&1 && up=1 && break; sleep 0.5; done
stop_engine() {
    [ -f "$ENG/docker.pid" ] && kill "$(cat "$ENG/docker.pid")" 2>/dev/null
    sleep 3
    kill "$(cat "$ENG/containerd.pid")" 2>/dev/null
}
trap stop_engine EXIT
if [ "$up" != 1 ]; then tail -30 "$OUT/dockerd.log"; exit 1; fi
docker version --format 'engine {{.Server.Version}}, API {{.Server.APIVersion}}'

if [ -z "${NO_GPU:-}" ]; then
    echo "== CDI spec $CDI_DIR/nvidia.yaml"
    "$PY" tests/gpu/write_cdi_spec.py "$CDI_DIR/nvidia.yaml" || exit 1
    cat "$CDI_DIR/nvidia.yaml"
fi

echo "== base, lock, image, validate, faults"
"$PY" tests/gpu/h200_image_e2e.py
rc=$?
echo "== done: exit $rc"
exit $rc
