#!/usr/bin/env bash
# The `envbuild smoke --json` proof on H200s, as sent to the device machine
# (nvidia-h200-x2): both GPUs (DDP), then GPU 0 alone (bare plan and the pinned plan
# tests/gpu/h200-plan.json), then the baseline readings. Reports into $OUT.
set -u
OUT=${OUT:-/tmp/h200x2-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
LOG="$OUT/h200x2-run.log"
envbuild() { python3 -c 'import sys; sys.argv[0] = "envbuild"; from envbuild.cli.main import main; main()' "$@"; }
timed() {  # timed NAME CMD...: stdout -> $OUT/NAME.json, stderr + rc + wall time -> log
  local name=$1; shift
  local t0 t1 rc; t0=$(date +%s.%N)
  "$@" >"$OUT/$name.json" 2>>"$LOG"; rc=$?
  t1=$(date +%s.%N)
  echo "=== $name rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,2))") cmd: $*" >>"$LOG"
}
{ date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv; nvidia-smi topo -m; } >"$LOG" 2>&1
timed h200x2-smoke-full envbuild smoke --json
CUDA_VISIBLE_DEVICES=0 timed h200-smoke-cli envbuild smoke --json
CUDA_VISIBLE_DEVICES=0 timed h200-smoke-cli-pinned envbuild smoke --json --plan tests/gpu/h200-plan.json
timed h200-baseline python3 tests/gpu/measure_baseline.py 5
date -u >>"$LOG"
