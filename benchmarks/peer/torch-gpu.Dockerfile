# The peer of `envbuild image` for the GPU example in the H200 build bench
# (tests/gpu/h200_build_bench.py): a typical hand-written Dockerfile on the same framework base
# that adds a small training script; the bench builds it with the classic builder
# (DOCKER_BUILDKIT=0, as docker-py builds envbuild's Dockerfile) and then runs the script with
# the GPU (`docker run --device nvidia.com/gpu=all`, CDI, as envbuild's smoke container gets it):
# the hand-rolled check a user would run before trusting the image.
ARG BASE
FROM ${BASE}
COPY gpu_train_check.py gpu_full_check.py /opt/check/
CMD ["python3", "/opt/check/gpu_train_check.py"]
