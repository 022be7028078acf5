#!/usr/bin/env bash
# Stop the daemons tests/slurm/up.sh DIR started, by the pids they wrote there (nothing else).
set -uo pipefail
D=$(realpath -m "${1:?usage: down.sh DIR}")
for pidfile in "$D"/slurmd-*.pid "$D/slurmctld.pid" "$D/munge/munged.pid"; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$pidfile"
done
