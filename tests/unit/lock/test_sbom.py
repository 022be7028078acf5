"""The SBOM of a whole stack, from the shipped locks: valid CycloneDX 1.6 (the schema the
library ships, cyclonedx.org/schema/bom-1.6.schema.json), deterministic, and naming the CUDA
stack that Python SBOM tools leave out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from envbuild.lock.format import loads, lock_sha256
from envbuild.lock.sbom import sbom

IMAGES = Path(__file__).resolve().parents[3] / "images"
LOCKED = sorted(p.parent.name for p in IMAGES.glob("*/envbuild.lock"))


def _sbom_of(name: str) -> tuple[dict[str, Any], bytes, str]:
    text = (IMAGES / name / "envbuild.lock").read_text()
    data = sbom(loads(text), lock_sha256(text))
    return json.loads(data), data, text


@pytest.mark.parametrize("name", LOCKED)
def test_every_shipped_lock_gives_a_valid_cyclonedx_1_6_sbom(name: str) -> None:
    doc, data, text = _sbom_of(name)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode()) is None
    lock = loads(text)
    pypi = {c["name"]: c for c in doc["components"] if c["purl"].startswith("pkg:pypi/")}
    assert set(pypi) == {p.name for p in lock.packages}
    for pkg in lock.packages:
        got = {f"sha256:{h['content']}" for h in pypi[pkg.name].get("hashes", [])}
        assert got == set(pkg.hashes), pkg.name
        assert pypi[pkg.name]["version"] == pkg.version
    # The root depends on every component: the dependency graph is complete.
    root = doc["metadata"]["component"]["bom-ref"]
    deps = {d["ref"]: d.get("dependsOn", []) for d in doc["dependencies"]}
    assert set(deps[root]) == {c["bom-ref"] for c in doc["components"]}


def test_torch_slim_lists_its_cuda_stack_floors_and_architectures() -> None:
    doc, _data, text = _sbom_of("torch-slim")
    lock = loads(text)
    nvidia = {c["name"]: c["version"] for c in doc["components"] if c.get("group") == "nvidia"}
    assert nvidia == {"cuda": lock.stack.cuda, "cudnn": lock.stack.cudnn, "nccl": lock.stack.nccl}
    assert nvidia["cuda"] == "13.2"
    props = {p["name"]: p["value"] for p in doc["metadata"]["component"]["properties"]}
    assert props["envbuild:driver_floor_toolkit"] == "595.58.03"
    assert props["envbuild:driver_floor_minor_compat"] == "580"
    assert props["envbuild:target_archs"] == "sm_90"
    assert props["envbuild:archs"].split() == list(lock.stack.archs)
    assert props["envbuild:lock_sha256"] == lock_sha256(text)
    base = [c for c in doc["components"] if c["type"] == "container"]
    assert [c["name"] for c in base] == ["debian:bookworm-slim"]


def test_a_base_carries_its_digest_only_when_pinned() -> None:
    from dataclasses import replace

    text = (IMAGES / "torch-cpu" / "envbuild.lock").read_text()
    lock = loads(text)
    assert lock.base_digest is None  # the shipped lock is unpinned (no registry here)
    (base,) = [
        c
        for c in json.loads(sbom(lock, lock_sha256(text)))["components"]
        if c["type"] == "container"
    ]
    assert {"name": "envbuild:pinned", "value": "false"} in base["properties"]
    assert "version" not in base and "hashes" not in base
    digest = "sha256:" + "ab" * 32
    pinned = json.loads(sbom(replace(lock, base_digest=digest), lock_sha256(text)))
    (base,) = [c for c in pinned["components"] if c["type"] == "container"]
    assert base["version"] == digest
    assert base["hashes"][0]["content"] == "ab" * 32
    assert {"name": "envbuild:pinned", "value": "true"} in base["properties"]


def test_the_same_lock_gives_the_same_bytes() -> None:
    _doc, first, text = _sbom_of("torch-train")
    assert sbom(loads(text), lock_sha256(text)) == first
    assert "timestamp" not in json.loads(first)["metadata"]
