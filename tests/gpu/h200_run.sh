#!/usr/bin/env bash
# The H200 proof run of the smoke payload, as sent to the device machine:
#   bash tests/gpu/h200_run.sh  (OUT=folder for the reports; python3 = the host's torch/JAX)
# Writes h200-smoke-tier1.json, h200-smoke-full.json, h200-smoke-jax.json, h200-faults.json
# and h200-run.log (tables, timings) into $OUT.
set -u
OUT=${OUT:-/tmp/h200-out}
mkdir -p "$OUT" /tmp/eb
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LOG="$OUT/h200-run.log"
PAYLOAD=envbuild/payload
BASE=${BASELINES:-'[{"gpu":"H200","bf16_tflops":801.7,"mem_bw_tbs":4.25,"source":"reference B1 (one run, 2026-11)","confidence":"high"}]'}
plan() {  # plan FILE FRAMEWORK TIER EXPECT_JSON [MIN_FREE_MIB]
  cat > "$1" <<JSON
{"schema":1,"framework":"$2","tier":$3,"allow_cpu":false,"steps":30,"timeout_s":300,
 "min_shm_mib":1024,"min_free_mib":${5:-4096},"driver_floor":"580.65.06","floor_ratio":0.75,
 "collective_timeout_s":60,"multi_gpu":true,"expect":$4,"baselines":$BASE}
JSON
}
TORCH_EXPECT='{"framework":"2.11.0","cuda":"13.0","cudnn":"9.19.0","nccl":"2.28.9"}'
run() {  # run NAME PLAN [ENV...]: payload -> /tmp/eb/NAME.json, table + wall time -> log
  local name=$1 p=$2; shift 2
  local t0; t0=$(date +%s.%N)
  env "$@" python3 "$PAYLOAD" --plan "$p" >/tmp/eb/$name.out 2>/tmp/eb/$name.err
  local rc=$?
  local t1; t1=$(date +%s.%N)
  { echo "=== $name rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,2))") env: $*"; tail -n 40 /tmp/eb/$name.err; } >>"$LOG"
  tail -n 1 /tmp/eb/$name.out | sed 's/^ENVBUILD-SMOKE-REPORT //' >/tmp/eb/$name.json
}
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c 'import torch;print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.nccl.version())'; } >"$LOG" 2>&1
plan /tmp/eb/t1.json torch 1 "$TORCH_EXPECT"
plan /tmp/eb/t2.json torch 2 "$TORCH_EXPECT"
run tier1 /tmp/eb/t1.json
run full /tmp/eb/t2.json
cp /tmp/eb/tier1.json "$OUT/h200-smoke-tier1.json"; cp /tmp/eb/full.json "$OUT/h200-smoke-full.json"
if [ "${SKIP_FAULTS:-0}" != 1 ]; then
  run novis /tmp/eb/t2.json CUDA_VISIBLE_DEVICES=
  plan /tmp/eb/ver.json torch 1 '{"framework":"2.7.1","cuda":"12.8","cudnn":"9.19.0","nccl":"2.28.9"}'
  run version /tmp/eb/ver.json
  # Another process holds all but ~1 GiB of the GPU: tier 1 must refuse (free-memory), and with
  # the free-memory floor at 0 the training must report the OOM with the free memory seen.
  python3 -c "
import torch,time
f,t=torch.cuda.mem_get_info(); x=torch.empty(f-1024*2**20,dtype=torch.uint8,device='cuda')
open('/tmp/eb/held','w').write(str(f)); time.sleep(200)" & HOLD=$!
for _ in $(seq 60); do [ -f /tmp/eb/held ] && break; sleep 1; done
run lowmem /tmp/eb/t2.json
plan /tmp/eb/oom.json torch 2 "$TORCH_EXPECT" 0
run oom /tmp/eb/oom.json
kill $HOLD; wait $HOLD 2>/dev/null
python3 - <<PY >"$OUT/h200-faults.json"
import json
print(json.dumps({n: json.load(open(f"/tmp/eb/{n}.json")) for n in ("novis","version","lowmem","oom")}, indent=1, sort_keys=True))
PY
fi
if [ "${SKIP_JAX:-0}" != 1 ]; then
  plan /tmp/eb/jax.json jax 2 '{"framework":"0.11.2"}'
  run jax /tmp/eb/jax.json XLA_PYTHON_CLIENT_PREALLOCATE=false
  cp /tmp/eb/jax.json "$OUT/h200-smoke-jax.json"
fi
date -u >>"$LOG"
