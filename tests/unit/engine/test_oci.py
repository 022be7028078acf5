"""The OCI documents of the evidence (pure)."""

from __future__ import annotations

import json

import pytest

from envbuild.core.errors import RegistryError
from envbuild.engine import oci

IMAGE = oci.Descriptor(oci.DOCKER_MANIFEST, "sha256:" + "a" * 64, 527)


def test_the_artifact_refers_to_the_image_with_the_empty_config() -> None:
    doc = oci.Document(oci.DSSE, b'{"x": 1}', {"predicateType": "p"})
    body = json.loads(oci.artifact_manifest(IMAGE, oci.DSSE, [doc]))
    assert body["subject"] == {
        "mediaType": oci.DOCKER_MANIFEST,
        "digest": IMAGE.digest,
        "size": 527,
    }
    assert body["config"]["digest"] == oci.sha256_digest(b"{}")
    assert body["layers"] == [
        {
            "mediaType": oci.DSSE,
            "digest": oci.sha256_digest(doc.data),
            "size": 8,
            "annotations": {"predicateType": "p"},
        }
    ]


def test_the_referrers_index_keeps_what_it_holds_and_adds_once() -> None:
    first = oci.Descriptor(oci.OCI_MANIFEST, "sha256:" + "1" * 64, 10, artifact_type=oci.DSSE)
    second = oci.Descriptor(oci.OCI_MANIFEST, "sha256:" + "2" * 64, 10)
    one = oci.referrers_index(None, first)
    assert one is not None
    two = oci.referrers_index(json.loads(one), second)
    assert two is not None
    assert [m["digest"] for m in json.loads(two)["manifests"]] == [first.digest, second.digest]
    assert oci.referrers_index(json.loads(two), first) is None
    assert oci.referrers_tag(IMAGE.digest) == "sha256-" + "a" * 64
    assert oci.attestation_tag(IMAGE.digest) == "sha256-" + "a" * 64 + ".att"


def test_a_descriptor_from_the_registry_is_checked() -> None:
    for bad in (
        {"digest": "sha256:x", "size": 1, "mediaType": "m"},
        {"digest": IMAGE.digest, "size": True, "mediaType": "m"},
        {"digest": IMAGE.digest, "size": 1, "mediaType": "m", "annotations": {"a": 1}},
        "a string",
    ):
        with pytest.raises(RegistryError) as info:
            oci.descriptor(bad, "x", "url")
        assert info.value.fields["kind"] == "invalid"
