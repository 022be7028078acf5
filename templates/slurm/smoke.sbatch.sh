# --- the body of every `envbuild fleet slurm` script (templates/slurm/smoke.sbatch.sh) ---------
# The settings above are written by envbuild; nothing below depends on who wrote the script.
# 1. the image is imported once, by the batch step, into the run folder on shared storage;
# 2. one srun task per node runs the image's smoke payload there, with pyxis (--container-image)
#    where srun has it, else Apptainer (or Singularity), else the node's Docker or Podman;
# 3. each node leaves in the run folder: verdicts/NODE.json (the payload's verdict, <= 4 KiB),
#    logs/NODE.rc (the step's exit code), logs/NODE.out / NODE.err (the whole output).
# `envbuild fleet results --slurm RUN` reads them back. ENVBUILD_WAY=pyxis|apptainer|docker|podman
# in the submitting environment forces one way.
set -uo pipefail
RUN=$ENVBUILD_SHARED/$ENVBUILD_RUN_NAME-${SLURM_JOB_ID:-local}
mkdir -p "$RUN/image" "$RUN/verdicts" "$RUN/logs" || exit 3
scontrol show hostnames "${SLURM_JOB_NODELIST:-$(hostname)}" >"$RUN/nodes.txt" 2>/dev/null ||
    hostname >"$RUN/nodes.txt"

pick_way() {
    if [ "$ENVBUILD_WAY" != auto ]; then echo "$ENVBUILD_WAY"; return; fi
    if srun --help 2>&1 | grep -q -- '--container-image'; then echo pyxis; return; fi
    if command -v apptainer >/dev/null || command -v singularity >/dev/null; then echo apptainer; return; fi
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then echo docker; return; fi
    if command -v podman >/dev/null; then echo podman; return; fi
    echo none
}
WAY=$(pick_way)
printf '{"schema": 1, "run": "%s", "job_id": "%s", "way": "%s", "image": "%s", "lock_sha256": "%s", "gpu_class": "%s"}\n' \
    "$ENVBUILD_RUN_NAME" "${SLURM_JOB_ID:-}" "$WAY" "$ENVBUILD_IMAGE" "$ENVBUILD_LOCK_SHA256" \
    "$ENVBUILD_GPU_CLASS" >"$RUN/run.json"
echo "envbuild: run folder $RUN, way $WAY, nodes: $(tr '\n' ' ' <"$RUN/nodes.txt")"

# enroot names a registry with '#': registry.example.com/ml/x@sha256:... -> registry.example.com#ml/x@sha256:...
enroot_ref() {
    local first=${1%%/*}
    case $first in *.*|*:*|localhost) echo "${first}#${1#*/}" ;; *) echo "$1" ;; esac
}

# --- 1. import once ------------------------------------------------------------------------------
case $WAY in
pyxis)
    IMPORTED=$RUN/image/image.sqsh
    if [ -n "$ENVBUILD_ARCHIVE" ]; then
        # enroot imports from a registry or an engine, not from an archive: load it into Podman.
        podman load -i "$ENVBUILD_ARCHIVE" && enroot import --output "$IMPORTED" "podman://$ENVBUILD_IMAGE"
    else
        enroot import --output "$IMPORTED" "docker://$(enroot_ref "$ENVBUILD_IMAGE")"
    fi || { echo "envbuild: enroot import failed" >&2; exit 3; } ;;
apptainer)
    APPTAINER=$(command -v apptainer || command -v singularity)
    IMPORTED=$RUN/image/image.sif
    src=docker://$ENVBUILD_IMAGE
    [ -n "$ENVBUILD_ARCHIVE" ] && src=docker-archive://$ENVBUILD_ARCHIVE
    "$APPTAINER" build --force "$IMPORTED" "$src" || { echo "envbuild: apptainer build failed" >&2; exit 3; } ;;
docker|podman)
    IMPORTED=$ENVBUILD_IMAGE ;;  # each node's engine loads the archive or pulls by digest itself
*)
    echo "envbuild: no way to run a container here: no pyxis, Apptainer, Docker or Podman" >&2
    exit 3 ;;
esac
export RUN WAY IMPORTED ENVBUILD_IMAGE ENVBUILD_ARCHIVE ENVBUILD_SHM_MIB ENVBUILD_KILL_AFTER \
    ENVBUILD_GPUS ENVBUILD_PAYLOAD ENVBUILD_RUN_NAME ENVBUILD_LOCK_SHA256

# --- 2. one task per node ------------------------------------------------------------------------
# The verdict is the payload's `--verdict -` stdout line, cut out of NODE.out on the node (inside
# the container for pyxis): no engine needs to write into the run folder as the job's user.
STEP='
node=${SLURMD_NODENAME:-$(hostname)}
out=$RUN/logs/$node.out err=$RUN/logs/$node.err
export ENVBUILD_NODE=$node
keep_verdict() {
    echo "$1" >"$RUN/logs/$node.rc"
    sed -n "s/^ENVBUILD-SMOKE-VERDICT //p" "$out" | tail -1 >"$RUN/verdicts/$node.json.part"
    if [ -s "$RUN/verdicts/$node.json.part" ]; then
        mv "$RUN/verdicts/$node.json.part" "$RUN/verdicts/$node.json"
    else
        rm -f "$RUN/verdicts/$node.json.part"
    fi
}
case $WAY in
pyxis)
    timeout -k 30 "$ENVBUILD_KILL_AFTER" $ENVBUILD_PAYLOAD >"$out" 2>"$err"; keep_verdict $? ;;
apptainer)
    nv=; [ "$ENVBUILD_GPUS" = 0 ] || nv=--nv
    timeout -k 30 "$ENVBUILD_KILL_AFTER" "$(command -v apptainer || command -v singularity)" exec $nv \
        --contain --env ENVBUILD_NODE="$node" "$IMPORTED" $ENVBUILD_PAYLOAD >"$out" 2>"$err"
    keep_verdict $? ;;
docker|podman)
    engine=$WAY
    command -v "$engine" >/dev/null || { echo "no $engine on $node" >"$err"; keep_verdict 127; exit 127; }
    if ! "$engine" image inspect "$IMPORTED" >/dev/null 2>&1; then
        if [ -n "$ENVBUILD_ARCHIVE" ]; then "$engine" load -i "$ENVBUILD_ARCHIVE" >>"$err" 2>&1
        else "$engine" pull "$IMPORTED" >>"$err" 2>&1; fi
    fi
    gpus=()
    if [ "$ENVBUILD_GPUS" != 0 ]; then
        if [ "$engine" = docker ]; then gpus=(--gpus all); else gpus=(--device nvidia.com/gpu=all); fi
    fi
    name=envbuild-smoke-${SLURM_JOB_ID:-0}-$node
    timeout -k 30 "$ENVBUILD_KILL_AFTER" "$engine" run --rm --name "$name" "${gpus[@]}" \
        --shm-size "${ENVBUILD_SHM_MIB}m" -e ENVBUILD_NODE="$node" \
        --label envbuild.role=smoke --label "envbuild.run=$ENVBUILD_RUN_NAME" \
        --label "envbuild.lock.sha256=$ENVBUILD_LOCK_SHA256" \
        "$IMPORTED" $ENVBUILD_PAYLOAD >"$out" 2>>"$err"
    rc=$?
    # timeout ends the client, not the container: remove it by its name.
    [ "$rc" -lt 124 ] || "$engine" rm -f "$name" >/dev/null 2>&1
    keep_verdict "$rc" ;;
esac
'
srun_args=(--ntasks-per-node=1 --kill-on-bad-exit=0)
if [ "$WAY" = pyxis ]; then
    srun_args+=(--container-image="$IMPORTED" --container-mounts="$RUN:$RUN"
        --container-env=RUN,WAY,ENVBUILD_KILL_AFTER,ENVBUILD_PAYLOAD)
fi
srun "${srun_args[@]}" bash -c "$STEP"
step=$?
passed=$(grep -l '"ok":true' "$RUN"/verdicts/*.json 2>/dev/null | wc -l)
echo "envbuild: $passed of $(wc -l <"$RUN/nodes.txt") nodes passed (srun exit $step); read back: envbuild fleet results --slurm $RUN"
[ "$passed" = "$(wc -l <"$RUN/nodes.txt")" ]
