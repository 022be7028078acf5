#!/usr/bin/env bash
# Makes the interpreters the payload's CPU-side tests run under (torch, JAX, TensorFlow are not
# envbuild dependencies) and prints the variables that point the tests at them:
#   eval "$(bash tests/payload_envs.sh)"    (.ci/run does this before `make check`)
# Without these variables tests/unit/payload/test_payload_torch.py and test_payload_frameworks.py skip
# with their reason. torch==2.13.0 is the CPU wheel this machine kind keeps in its pip
# find-links (no download); jax and tensorflow-cpu come from PyPI (~0.6 and ~0.3 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=.cache/payload-envs
PY=${PY:-python3}
make_env() {  # make_env NAME MODULE PIP_ARGS...
    local name=$1 module=$2; shift 2
    local env="$ROOT/$name"
    if ! "$env/bin/python" -c "import $module" >/dev/null 2>&1; then
        rm -rf "$env"
        "$PY" -m venv "$env" >&2
        "$env/bin/pip" install -q --disable-pip-version-check "$@" >&2
    fi
    echo "$PWD/$env/bin/python"
}
echo "export ENVBUILD_TEST_TORCH_PYTHON=$(make_env torch torch 'torch==2.13.0')"
echo "export ENVBUILD_TEST_JAX_PYTHON=$(make_env jax jax jax)"
echo "export ENVBUILD_TEST_TF_PYTHON=$(make_env tf tensorflow tensorflow-cpu)"
