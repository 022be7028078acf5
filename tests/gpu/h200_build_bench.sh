#!/usr/bin/env bash
# `envbuild image` of the GPU example beside a hand-written Dockerfile on the H200 device
# machine (tests/gpu/h200_build_bench.py says what is measured). Needs .cache/h200/ from
# tests/gpu/make_engine_bundle.sh beside the checkout; run as root with the Python that holds
# the machine's torch first on PATH:
#     OUT=/some/dir bash tests/gpu/h200_build_bench.sh
# Brings the engine up as tests/gpu/h200_image_e2e.sh does (tests/gpu/h200_engine.sh), runs the
# bench, stops the engine. $OUT gets h200-build-bench.json and the log. ENG_DIR, CDI_DIR and
# NO_GPU as for tests/gpu/h200_image_e2e.sh; BENCH_COLD, BENCH_WARM, BASE_TAG as for the .py.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
OUT=${OUT:-$REPO/.e2e/h200-bench}
BUNDLE=${BUNDLE:-$REPO/.cache/h200}
ENG=${ENG_DIR:-/var/lib/h200-e2e}
CDI_DIR=${CDI_DIR:-/etc/cdi}
PY=${TORCH_PYTHON:-python3}
export OUT CDI_DIR
mkdir -p "$OUT" "$ENG" "$CDI_DIR"
exec > >(tee "$OUT/h200-build-bench.log") 2>&1
# NVLink multicast stays off on shared machines (the device's own rule).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

echo "== python: $(command -v "$PY") $("$PY" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__)' 2>&1)"
. tests/gpu/h200_engine.sh
h200_engine_up || exit 1
# Measured in the state an installed envbuild runs in: byte-compiled, as pip leaves it. The
# checkout, the bundle's wheels (installed with --no-compile) and the packages of this venv that
# envbuild imports may not be, and PYTHONDONTWRITEBYTECODE (set on the device) would make every
# run compile them again. benchmarks/cli_start.py does the same on the build machine.
"$PY" - <<'PY'
import compileall, os, sys
import envbuild.app.image, envbuild.cli.commands.image, envbuild.engine.docker  # noqa: F401
for top in sorted({m.split(".")[0] for m in sys.modules}):
    path = getattr(sys.modules.get(top), "__file__", None) or ""
    if top != "envbuild" and "site-packages" not in path and "h200-site" not in path:
        continue  # the standard library comes compiled
    if path.endswith("__init__.py"):
        compileall.compile_dir(os.path.dirname(path), quiet=2)
    elif path.endswith(".py"):
        compileall.compile_file(path, quiet=2)
PY
echo "== byte-compiled; PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-}"

echo "== bench: envbuild image vs a hand-written Dockerfile"
"$PY" tests/gpu/h200_build_bench.py
rc=$?
echo "== done: exit $rc"
exit $rc
