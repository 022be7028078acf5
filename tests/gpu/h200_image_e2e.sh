#!/usr/bin/env bash
# The tag gate proven on a GPU machine that reaches no registry (the H200 device machine),
# through the real CLI. What it needs beside the checkout: .cache/h200/ from
# tests/gpu/make_engine_bundle.sh (Debian 13's dockerd 26.1.5, containerd, runc, the docker
# CLI; the docker and tomlkit wheels). Run as root with the Python that holds the machine's
# torch first on PATH:
#     OUT=/some/dir bash tests/gpu/h200_image_e2e.sh
# Brings the engine up as measured on the H200 (tests/gpu/h200_engine.sh: CDI on; no iptables,
# bridge or userland proxy),
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
. tests/gpu/h200_engine.sh
h200_engine_up || exit 1

echo "== base, lock, image, validate, faults"
"$PY" tests/gpu/h200_image_e2e.py
rc=$?
echo "== done: exit $rc"
exit $rc
