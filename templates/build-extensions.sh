#!/usr/bin/env bash
# envbuild's builder stage: compiles the lock's source packages into wheels and installs them
# into /opt/venv (which the final stage copies; the toolchain and build requirements stay in
# the builder). Run by the devel template as
#   build-extensions.sh [pip index options...]
# with, from the Dockerfile: TORCH_CUDA_ARCH_LIST, CMAKE_CUDA_ARCHITECTURES, CUDA_HOME,
# ENVBUILD_TOOLCHAIN (devel|wheels), ENVBUILD_GIB_PER_JOB, optional CPATH and
# ENVBUILD_BUILD_CACHE (a BuildKit cache mount) and ENVBUILD_INSTALL (no: leave the wheels in
# /opt/envbuild/built for the final stage, as templates/framework.Dockerfile.j2 does). One requirements file per package in
# /opt/envbuild/sources/, named <name>-<key>.lock; key = sha256 of the sdist hash, torch and
# the arch list, so a cached wheel is reused only for exactly the same inputs.
set -euo pipefail

SOURCES=/opt/envbuild/sources
OUT=/opt/envbuild/built
LOG=/tmp/envbuild-build.log
mkdir -p "$OUT"

# Parallel jobs from the memory this build may use (MemAvailable, capped by the cgroup's
# memory.max / memory.limit_in_bytes), ENVBUILD_GIB_PER_JOB each, at least 1, at most nproc.
mem_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
limit=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || echo max)
if [ "$limit" != max ] && [ "$((limit / 1024))" -lt "$mem_kib" ]; then mem_kib=$((limit / 1024)); fi
jobs=$((mem_kib / (${ENVBUILD_GIB_PER_JOB:-3} * 1048576)))
cpus=$(nproc)
[ "$jobs" -gt "$cpus" ] && jobs=$cpus
[ "$jobs" -lt 1 ] && jobs=1
export MAX_JOBS=$jobs CMAKE_BUILD_PARALLEL_LEVEL=$jobs
# Many setup.py files build their CUDA code only when they see a GPU, unless told to.
export FORCE_CUDA=1
mem_mib=$((mem_kib / 1024))
# Wheels are zip files, which cannot hold a time before 1980: an sdist packed reproducibly
# (members with mtime 0) unpacks to 1970 files, and flit_core then fails with "ZIP does not
# support timestamps before 1980". Its wheel builder, setuptools' bdist_wheel and hatchling
# take the zip times from SOURCE_DATE_EPOCH when it is set (https://reproducible-builds.org/
# specs/source-date-epoch/), which also makes the built wheels the same bytes on every build.
if [ "${SOURCE_DATE_EPOCH:-0}" -lt 315532800 ] 2>/dev/null; then
    export SOURCE_DATE_EPOCH=315532800
fi

# ENVBUILD_TOOLCHAIN=none: every source package is pure Python; pip only builds its wheel.
pure=no
if [ "${ENVBUILD_TOOLCHAIN:-devel}" = none ]; then pure=yes; fi
TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then nvcc=$CUDA_HOME/bin/nvcc; fi
if [ "$pure" = yes ]; then
    echo "envbuild: the source packages are pure Python: building their wheels, no compiler"
elif [ -z "$nvcc" ]; then
    # A framework base is its own builder: a runtime image (no toolkit) cannot compile.
    names=$(for s in "$SOURCES"/*.lock; do b=$(basename "$s" .lock); printf '%s\n' "${b%-*}"; done | paste -sd, -)
    echo "---- last lines of the build of $names: no CUDA compiler ----"
    echo "envbuild: no nvcc on PATH or in CUDA_HOME=$CUDA_HOME: the builder image is not a CUDA devel image (NGC's framework containers are; nvidia/cuda *-runtime images and slim bases are not)"
    echo "envbuild-compile-failed package=${names:-none} arch_list='$TORCH_CUDA_ARCH_LIST' max_jobs=$MAX_JOBS mem_available_mib=$mem_mib gpu_probe=no out_of_memory=no nvcc=missing"
    exit 1
else
    echo "envbuild: nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') at $nvcc"
fi

if [ "${ENVBUILD_TOOLCHAIN:-devel}" = wheels ]; then
    # The toolkit wheels ship libcudart.so.N only (a wheel holds no symlinks); the linker's
    # -lcudart wants libcudart.so.
    for lib in "$CUDA_HOME"/lib/libcudart.so.*; do
        [ -e "$CUDA_HOME/lib/libcudart.so" ] || ln -s "$(basename "$lib")" "$CUDA_HOME/lib/libcudart.so"
    done
fi

failed() {  # failed NAME: the compiler's last lines and what the build had, then stop
    local name=$1 gpu=no oom=no
    echo "---- last lines of the build of $name ($LOG) ----"
    grep -v '^\s*$' "$LOG" | tail -n 15
    if grep -qiE 'no cuda gpus are available|found no nvidia driver|nvidia-smi: (command )?not found|cudaGetDeviceCount|torch\.cuda\.is_available\(\)|could not find any nvidia gpu' "$LOG"; then gpu=yes; fi
    if grep -qiE 'killed signal terminated|fatal error: killed|out of memory|std::bad_alloc|signal 9|exit status 137' "$LOG"; then oom=yes; fi
    echo "envbuild-compile-failed package=$name arch_list='$TORCH_CUDA_ARCH_LIST' max_jobs=$MAX_JOBS mem_available_mib=$mem_mib gpu_probe=$gpu out_of_memory=$oom"
    exit 1
}

for spec in "$SOURCES"/*.lock; do
    [ -e "$spec" ] || continue
    base=$(basename "$spec" .lock)
    name=${base%-*}
    key=${base##*-}
    cached=${ENVBUILD_BUILD_CACHE:+$ENVBUILD_BUILD_CACHE/$key}
    if [ -n "$cached" ] && compgen -G "$cached/*.whl" >/dev/null; then
        echo "envbuild: $name: reusing the wheel built for the same sdist, torch and archs ($key)"
        cp "$cached"/*.whl "$OUT"/
        continue
    fi
    if [ "$pure" = yes ]; then
        echo "envbuild: building the wheel of $name (pure Python)"
    else
        echo "envbuild: compiling $name for TORCH_CUDA_ARCH_LIST='$TORCH_CUDA_ARCH_LIST' with MAX_JOBS=$MAX_JOBS (${mem_mib} MiB available, ${ENVBUILD_GIB_PER_JOB:-3} GiB per job)"
    fi
    started=$(date +%s)
    mkdir -p "/tmp/envbuild-wheel/$name"
    if ! python -m pip wheel --no-cache-dir --no-deps --no-build-isolation --require-hashes \
        --wheel-dir "/tmp/envbuild-wheel/$name" "$@" -r "$spec" >"$LOG" 2>&1; then
        failed "$name"
    fi
    echo "envbuild: $name built in $(($(date +%s) - started)) s"
    if [ -n "$cached" ]; then mkdir -p "$cached" && cp "/tmp/envbuild-wheel/$name"/*.whl "$cached"/; fi
    cp "/tmp/envbuild-wheel/$name"/*.whl "$OUT"/
done
# The built wheels, into the venv the final stage copies (their dependencies are in the lock).
# On a framework base (ENVBUILD_INSTALL=no) the final stage installs them from $OUT itself.
if [ "${ENVBUILD_INSTALL:-yes}" != no ]; then
    python -m pip install --no-cache-dir --no-deps --no-index "$OUT"/*.whl
fi
