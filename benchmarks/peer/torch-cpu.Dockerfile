# The peer of `envbuild image images/torch-cpu` in `make bench`: a typical hand-written
# Dockerfile for the same thing (same base, the OS's python3-venv, torch at the locked version
# from the same wheel folder, deps from PyPI), without hashes, constraints, smoke test or
# non-root user. benchmarks/build.py fills BASE and TORCH_VERSION and builds it with the classic
# builder (DOCKER_BUILDKIT=0), as docker-py builds envbuild's Dockerfile.
ARG BASE
FROM ${BASE}
ARG TORCH_VERSION
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-venv \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# The same proxy CA bundle envbuild's build gets with --ca-cert.
COPY ca.crt /etc/ssl/certs/bench-ca.crt
ENV PIP_CERT=/etc/ssl/certs/bench-ca.crt
COPY wheels/ /wheels/
RUN pip install --no-cache-dir --find-links /wheels "torch==${TORCH_VERSION}"
CMD ["python"]
