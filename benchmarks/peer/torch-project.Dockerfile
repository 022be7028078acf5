# The peer of `envbuild image images/torch-project` in benchmarks/code_change.py: the
# Dockerfile a careful engineer writes for a project, dependencies first and the source after
# them, so that a code change rebuilds only the last layers. Same base, the OS's Python 3.11
# and a venv, the lock's packages hash-checked in one RUN (requirements.txt written from
# images/torch-project/envbuild.lock at bench time; torch's CPU wheel from the same wheel
# folder envbuild gets with --find-links), then the project's own source installed without
# its dependencies. Built with the classic builder (DOCKER_BUILDKIT=0).
ARG BASE
FROM ${BASE}
COPY requirements.txt ca.crt /tmp/bench/
COPY wheels/ /tmp/bench/wheels/
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv \
 && PIP_CERT=/tmp/bench/ca.crt /opt/venv/bin/pip install --require-hashes --no-cache-dir \
      --no-deps --disable-pip-version-check --find-links /tmp/bench/wheels \
      -r /tmp/bench/requirements.txt \
 && rm -rf /tmp/bench
ENV PATH=/opt/venv/bin:$PATH
COPY project/ /app/
RUN pip install --no-cache-dir --no-deps --no-build-isolation --no-index /app
WORKDIR /app
CMD ["python", "-m", "torch_project.train"]
