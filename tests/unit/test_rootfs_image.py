"""tools/rootfs-image: a root filesystem tar as the docker-archive `docker load` reads, for
another architecture (e2e step 5c loads the arm64 base it writes)."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "rootfs-image"


def _layer(path: Path) -> bytes:
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("etc/os-release")
        data = b"ID=debian\n"
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path.read_bytes()


def test_the_archive_names_its_layer_and_architecture_by_digest(tmp_path: Path) -> None:
    layer = _layer(tmp_path / "layer.tar")
    out = tmp_path / "image.tar"
    ref = "envbuild-e2e/base-arm64:bookworm"
    args = [str(tmp_path / "layer.tar"), str(out), ref, "arm64", "v8"]
    done = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with tarfile.open(out) as tar:
        (manifest,) = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config_bytes = tar.extractfile(manifest["Config"]).read()  # type: ignore[union-attr]
        (layer_name,) = manifest["Layers"]
        stored = tar.extractfile(layer_name).read()  # type: ignore[union-attr]
    assert manifest["RepoTags"] == [ref]
    assert stored == layer
    # docker load checks both: the config's file name is its sha256, diff_ids the layer's.
    assert manifest["Config"] == hashlib.sha256(config_bytes).hexdigest() + ".json"
    config = json.loads(config_bytes)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert (config["os"], config["architecture"], config["variant"]) == ("linux", "arm64", "v8")
    assert done.stdout.strip() == f"{ref}: sha256:{manifest['Config'][:-5]} (arm64)"


def test_wrong_arguments_are_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(TOOL), "only-one"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "Usage: tools/rootfs-image" in done.stderr
