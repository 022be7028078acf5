#!/usr/bin/env bash
# The host-side commands through the real CLI on an H200 (issues 2, 6, 7), as sent to the device
# machine: doctor, resolve --host, validate of lock folders (pre-flight), smoke tier 1 and a
# smoke against a lock whose versions differ from the host's torch (must fail, by design).
#   bash tests/gpu/h200_cli_run.sh   (OUT=folder for the outputs; python3 = the host's torch)
set -u
OUT=${OUT:-/tmp/h200-cli}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
LOG="$OUT/h200-cli.log"
envbuild() { python3 -c 'import sys; sys.argv[0] = "envbuild"; from envbuild.cli.main import main; main()' "$@"; }
step() {  # step NAME CMD...: stdout -> $OUT/NAME, rc + wall time + stderr tail -> log
  local name=$1; shift
  local t0 t1 rc; t0=$(date +%s.%N)
  "$@" >"$OUT/$name" 2>"/tmp/$name.err"; rc=$?
  t1=$(date +%s.%N)
  { echo "=== $name rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,2))") cmd: $*"; tail -n 30 "/tmp/$name.err"; } >>"$LOG"
}
{ date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv; } >"$LOG" 2>&1
step h200-doctor-cli.json envbuild doctor --json
step h200-doctor-cli.txt envbuild doctor
step h200-resolve-host.json envbuild resolve --host --json
step h200-resolve-host.txt envbuild resolve --host
step h200-validate-torch-slim.json envbuild validate images/torch-slim --json --junit "$OUT/h200-validate-torch-slim.xml"
step h200-validate-fleet.txt envbuild validate images/fleet
step h200-validate-tf-train.txt envbuild validate images/tf-train
step h200-smoke-tier1-cli.json envbuild smoke --json --tier 1
step h200-smoke-lock-mismatch.json envbuild smoke --json --tier 1 --lock images/torch-slim
date -u >>"$LOG"
