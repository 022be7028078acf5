#!/usr/bin/env bash
# A one-node Slurm cluster on 127.0.0.1 for `make e2e`: munged, slurmctld and slurmd (Debian's
# munge and slurm-wlm packages) started as plain daemons with every file under one folder, no
# systemd and nothing in /etc. Usage: tests/slurm/up.sh DIR  (prints `export SLURM_CONF=...`).
# tests/slurm/down.sh DIR stops exactly the daemons this started (by the pids they wrote).
#
# The node is this machine, named e2e-node1 (slurmd -N), with the local container engine as its
# engine; accounting is off (no slurmdbd), so sacct has nothing to say and the read-back uses
# the exit code each step writes beside its verdict.
set -euo pipefail
D=$(realpath -m "${1:?usage: up.sh DIR}")
NODE=${SLURM_E2E_NODE:-e2e-node1}
for tool in munged slurmctld slurmd sbatch squeue scontrol; do
    command -v "$tool" >/dev/null || { echo "up.sh: $tool is missing (apt-get install slurm-wlm munge)" >&2; exit 3; }
done
[ "$(id -u)" = 0 ] || { echo "up.sh: run as root (slurmd starts job steps as their users)" >&2; exit 3; }
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
mkdir -p "$D"/{munge,state,spool,log}
chmod 0700 "$D/munge"

# munge: its own key and socket (munged refuses a key others can read).
if [ ! -f "$D/munge/munge.key" ]; then
    mungekey --create --keyfile="$D/munge/munge.key" --force
    chmod 0400 "$D/munge/munge.key"
fi
SOCK=$D/munge/munge.socket.2
munged --key-file="$D/munge/munge.key" --socket="$SOCK" --pid-file="$D/munge/munged.pid" \
    --log-file="$D/log/munged.log" --seed-file="$D/munge/munge.seed" --force 9>&-

CPUS=$(nproc)
MEM=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
cat >"$D/slurm.conf" <<CONF
ClusterName=envbuild-e2e
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$NODE NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=e2e Nodes=$NODE Default=YES MaxTime=30 State=UP
CONF
export SLURM_CONF=$D/slurm.conf
# -c: a clean start (no jobs of an earlier run); -i: ignore state files of an earlier run.
slurmctld -c -i 9>&-
slurmd -N "$NODE" 9>&-
for _ in $(seq 60); do
    state=$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)
    case $state in idle*|mix*|alloc*) echo "export SLURM_CONF=$SLURM_CONF"; exit 0 ;; esac
    sleep 0.5
done
echo "up.sh: node $NODE is not idle after 30 s (state: ${state:-none}); logs in $D/log" >&2
tail -5 "$D"/log/*.log >&2 || true
exit 1
