#!/usr/bin/env bash
# Makes what tests/gpu/h200_image_e2e.sh needs on a GPU machine that reaches no registry, in
# .cache/h200/ (git-ignored; carry it to the machine):
#   eng.tar.xz  bin/ with dockerd, containerd, containerd-shim-runc-v2, runc and the docker CLI
#               from Debian 13 (trixie): docker.io 26.1.5, the newest Debian ships (CDI since 25)
#   uv.xz       this venv's uv, xz-compressed (`envbuild lock` of extra packages there, --offline)
#   whl/        the wheels envbuild needs there and the H200 image lacks (docker, tomlkit; it
#               has click, jinja2, requests, urllib3, packaging, nvidia-ml-py; the signing and
#               SBOM libraries with their dependencies)
# Run it where Debian's mirror and PyPI answer:  bash tests/gpu/make_engine_bundle.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=.cache/h200
PY=${PY:-.venv/bin/python}
WHEELS=${WHEELS:-docker tomlkit pathspec securesystemslib cryptography cffi pycparser cyclonedx-python-lib packageurl-python py-serializable defusedxml sortedcontainers license-expression boolean.py}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$DEST" "$tmp/debs" "$tmp/x" "$tmp/bin"

bash tools/trixie-debs "$tmp/debs" docker.io docker-cli containerd runc >/dev/null
for deb in "$tmp"/debs/*.deb; do dpkg -x "$deb" "$tmp/x"; done
for b in usr/sbin/dockerd usr/bin/docker usr/bin/containerd usr/bin/containerd-shim-runc-v2 usr/sbin/runc; do
    install -m 0755 "$tmp/x/$b" "$tmp/bin/"
done
# A dictionary as large as dockerd (94 MB) finds the repeats across the binaries: 52 -> 37 MB,
# which keeps the bundle, the checkout and a project under the device's 64 MiB carry limit.
tar -C "$tmp" -cf - bin | xz -9e --lzma2=preset=9e,dict=256MiB -T1 >"$DEST/eng.tar.xz.tmp"
mv "$DEST/eng.tar.xz.tmp" "$DEST/eng.tar.xz"
ls "$tmp"/debs/*.deb | sed 's#.*/##' > "$DEST/eng.versions"

xz -9e -T2 -c "$(dirname "$PY")/uv" > "$DEST/uv.xz.tmp" && mv "$DEST/uv.xz.tmp" "$DEST/uv.xz"

# The versions this checkout was tested with, as wheels for the H200 image's Python (3.12).
rm -rf "$DEST/whl" && mkdir -p "$DEST/whl"
for name in $WHEELS; do
    version=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux2014_x86_64 --platform any \
        -d "$DEST/whl" "$name==$version"
done
du -sh "$DEST/eng.tar.xz" "$DEST/uv.xz" "$DEST/whl"/*
