# The peer of `envbuild image images/torch-slim` in benchmarks/cuda_image.py: the Dockerfile a
# careful engineer writes for the same pins. Same base, the OS's Python 3.11 and a venv, and
# the lock's packages installed hash-checked (`pip install --require-hashes --no-cache-dir`)
# in one RUN layer, apt's lists removed in it too. requirements.txt is written from
# images/torch-slim/envbuild.lock at bench time (name==version --hash=... for every package;
# --no-deps because the file is the whole closure, as envbuild installs it). No smoke test
# inside, no non-root user, no labels: the bench runs its own check with `docker run`.
# Built with the classic builder (DOCKER_BUILDKIT=0), as docker-py builds envbuild's.
ARG BASE
FROM ${BASE}
COPY requirements.txt ca.crt /tmp/bench/
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv \
 && PIP_CERT=/tmp/bench/ca.crt /opt/venv/bin/pip install --require-hashes --no-cache-dir \
      --no-deps --disable-pip-version-check -r /tmp/bench/requirements.txt \
 && rm -rf /tmp/bench
ENV PATH=/opt/venv/bin:$PATH
CMD ["python"]
