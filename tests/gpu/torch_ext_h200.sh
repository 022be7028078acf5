#!/usr/bin/env bash
# The example extension of images/torch-ext on a real GPU (the H200 machine: nvcc and torch on
# the host). Writes $OUT/torch-ext-report.json (and prints it):
#   1. builds envbuild-vecadd from its committed sdist against the host's torch, for the GPU's
#      own arch only (TORCH_CUDA_ARCH_LIST from the GPU), as the image's builder stage does
#      (--no-build-isolation, MAX_JOBS);
#   2. runs the payload's extension checks on it: ext-archs (the .so's fatbin read without a
#      toolkit, against the GPU) and ext-smoke (the package's entry point: the kernel's a + b
#      compared with torch's on the GPU);
#   3. where an engine with GPU access answers (E2E_ENGINE=1), builds the image itself and
#      runs its smoke on the GPU: `envbuild image images/torch-ext --find-links ...`.
# Usage: OUT=/tmp/out bash tests/gpu/torch_ext_h200.sh
# (GPU_CC, not CC: torch.utils.cpp_extension hands an exported CC to nvcc as -ccbin.)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/torch-ext-h200}
PY=${PY:-python3}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

GPU_CC=$("$PY" -c 'import torch; m, n = torch.cuda.get_device_capability(0); print(f"{m}.{n}")')
echo "GPU compute capability $GPU_CC; torch $("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda)')"
"$PY" -m venv --system-site-packages "$WORK/venv"
# When $PY is itself a venv (the H200 machine's /opt/torch/.venv), --system-site-packages shows
# the base interpreter's packages, not that venv's torch: point the new venv at torch's folder.
TORCH_SITE=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
VENV_SITE=$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$TORCH_SITE" > "$VENV_SITE/host-torch.pth"
started=$(date +%s)
TORCH_CUDA_ARCH_LIST=$GPU_CC MAX_JOBS=${MAX_JOBS:-8} FORCE_CUDA=1 \
    "$WORK/venv/bin/python" -m pip wheel --no-deps --no-build-isolation \
    --wheel-dir "$WORK/wheels" images/torch-ext/wheels/envbuild_vecadd-0.1.0.tar.gz
echo "compiled in $(($(date +%s) - started)) s"
"$WORK/venv/bin/python" -m pip install --no-deps "$WORK/wheels"/*.whl

PYTHONPATH=$PWD "$WORK/venv/bin/python" - "$GPU_CC" "$OUT/torch-ext-report.json" <<'EOF'
import json, sys, torch
from envbuild.payload import smoke_ext
from envbuild.payload import smoke_checks as ck

cc, out = sys.argv[1], sys.argv[2]
report = {"checks": [], "metrics": {"framework_gpus": [{"index": 0, "cc": cc, "name": torch.cuda.get_device_name(0)}]},
          "device": "cuda", "framework": "torch"}
plan = {"extensions": [{"name": "envbuild-vecadd", "version": "0.1.0"}], "target_ccs": [cc], "tier": 2}
smoke_ext.run(plan, report)
report["ok"] = ck.report_ok(report["checks"]) and len(report["checks"]) == 2
json.dump(report, open(out, "w"), indent=2, sort_keys=True)
print(json.dumps(report, indent=2, sort_keys=True))
sys.exit(0 if report["ok"] else 1)
EOF

if [ "${E2E_ENGINE:-0}" = 1 ]; then
    .venv/bin/envbuild image images/torch-ext --find-links images/torch-ext/wheels \
        --tag envbuild-gpu/torch-ext:h200 --json | tee "$OUT/torch-ext-image.json"
fi
