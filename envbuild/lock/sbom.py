"""The SBOM of a whole stack, from its lock: CycloneDX 1.6 JSON written by
cyclonedx-python-lib (github.com/CycloneDX/cyclonedx-python-lib), not by hand.

Python SBOM tools list the Python packages of an image; what decides whether a GPU image runs
is the CUDA stack under them. So besides every locked package (version, purl, every sha256 pip
may install) the SBOM names the base image (with its digest when the lock pinned one), CUDA,
cuDNN and NCCL, and a managed Python (its python-build-standalone archive, by sha256) as
components, and carries the driver floors and the architectures as
properties of the image itself (`metadata.component`), in the `envbuild:` namespace
(CycloneDX property taxonomy: cyclonedx.org/docs/1.6/json/#metadata_component_properties).

Deterministic: the same lock gives the same bytes. The serial number is a UUID derived from the
lock's sha256, and the timestamp the library stamps is left out (it is optional in the schema;
an SBOM of a lock says what the image is made of, not when it was written).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from envbuild import __version__
from envbuild.core.models import Lock, LockedPackage

if TYPE_CHECKING:
    from cyclonedx.model import HashType
    from cyclonedx.model.component import Component

# cyclonedx is imported where an SBOM is made (~60 ms): verifying an attestation needs only the
# constants here.

MEDIA_TYPE = "application/vnd.cyclonedx+json"
"""The SBOM's media type (CycloneDX: cyclonedx.org/specification/overview, "Media Types")."""

PREDICATE_TYPE = "https://cyclonedx.org/bom"
"""The in-toto predicate type of a CycloneDX SBOM (in-toto/attestation, spec/predicates)."""

PYPI = "https://pypi.org/simple"

_NAMESPACE = uuid.UUID("6f1b3e0c-4a55-5b8e-9d7a-2f0e6c1d9a11")
"""Fixed namespace of the SBOM serial numbers (uuid5 of the lock's sha256 within it)."""


def sbom(lock: Lock, lock_sha256: str) -> bytes:
    """The CycloneDX 1.6 JSON of `lock` (whose text has sha256 `lock_sha256`), sorted keys."""
    from cyclonedx.model.bom import Bom
    from cyclonedx.output.json import JsonV1Dot6

    bom = Bom(serial_number=uuid.uuid5(_NAMESPACE, lock_sha256))
    image = bom.metadata.component = _image(lock, lock_sha256)
    parts = [*_stack_components(lock), *_packages(lock.packages)]
    for component in parts:
        bom.components.add(component)
    # Everything is a direct part of the image: the lock is flat (uv's pins, not their graph).
    bom.register_dependency(image, parts)
    doc = json.loads(JsonV1Dot6(bom).output_as_string())
    doc["metadata"].pop("timestamp", None)
    return (json.dumps(doc, sort_keys=True, indent=2) + "\n").encode()


def _image(lock: Lock, lock_sha256: str) -> Component:
    """The image the lock builds: the SBOM's subject, with the GPU facts as properties."""
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component, ComponentType

    stack = lock.stack
    props: dict[str, str | None] = {
        "envbuild:lock_sha256": lock_sha256,
        "envbuild:envbuild_version": __version__,
        "envbuild:framework": f"{stack.framework.name} {stack.framework.version}",
        "envbuild:framework_variant": stack.framework.variant,
        "envbuild:python": stack.python,
        "envbuild:os": stack.os,
        "envbuild:platform": lock.platform,
        "envbuild:archs": " ".join(stack.archs),
        "envbuild:target_archs": " ".join(stack.target_archs),
        "envbuild:target_gpus": " ".join(lock.targets.gpus),
    }
    if stack.floors is not None:
        props["envbuild:driver_floor_toolkit"] = stack.floors.toolkit
        props["envbuild:driver_floor_minor_compat"] = stack.floors.minor_compat
        props["envbuild:driver_floor_relied_on"] = stack.floors.relied_on
    if lock.targets.driver:
        props["envbuild:target_driver"] = lock.targets.driver
    return Component(
        name=lock.name or "image",
        type=ComponentType.CONTAINER,
        bom_ref=f"envbuild-image:{lock_sha256}",
        properties=[Property(name=k, value=v) for k, v in sorted(props.items()) if v],
    )


def _stack_components(lock: Lock) -> Iterable[Component]:
    """The base image, and CUDA, cuDNN and NCCL as the stack names them."""
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    stack = lock.stack
    base = stack.base_image
    name, _, tag = (
        base.ref.rpartition(":") if ":" in base.ref.split("/")[-1] else (base.ref, "", "")
    )
    qualifiers = {"repository_url": name, "tag": tag} if tag else {"repository_url": name}
    yield Component(
        name=base.ref,
        type=ComponentType.CONTAINER,
        bom_ref=f"base-image:{base.ref}",
        version=lock.base_digest or None,
        purl=PackageURL(
            type="oci",
            name=name.rsplit("/", 1)[-1],
            version=lock.base_digest,
            qualifiers=qualifiers,
        ),
        hashes=_hashes([lock.base_digest] if lock.base_digest else []),
        properties=[
            Property(name="envbuild:pinned", value=str(lock.base_digest is not None).lower()),
            Property(name="envbuild:flavour", value=base.flavour),
        ],
    )
    for part, version in (("cuda", stack.cuda), ("cudnn", stack.cudnn), ("nccl", stack.nccl)):
        if version:
            yield Component(
                name=part,
                group="nvidia",
                version=version,
                type=ComponentType.LIBRARY,
                bom_ref=f"nvidia-{part}:{version}",
                purl=PackageURL(type="generic", namespace="nvidia", name=part, version=version),
            )
    managed = stack.managed_python
    if managed is not None:
        # The image's interpreter when no OS row ships it (docs/request.md, "Python"): the
        # archive the build installs, by its locked sha256 (purl-spec's generic type).
        yield Component(
            name="cpython",
            group="python-build-standalone",
            version=managed.version,
            type=ComponentType.APPLICATION,
            bom_ref=f"managed-python:{managed.uv_key}",
            purl=PackageURL(
                type="generic",
                namespace="python-build-standalone",
                name="cpython",
                version=managed.version,
                qualifiers={"download_url": managed.url, "checksum": f"sha256:{managed.sha256}"},
            ),
            hashes=_hashes([f"sha256:{managed.sha256}"]),
            properties=[
                Property(name="envbuild:uv_key", value=managed.uv_key),
                Property(name="envbuild:release", value=managed.release),
            ],
        )


def _packages(packages: Iterable[LockedPackage]) -> Iterable[Component]:
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    for pkg in sorted(packages, key=lambda p: p.name):
        props = [Property(name="envbuild:source", value=pkg.source)]
        if pkg.sdist:
            props.append(Property(name="envbuild:sdist", value="true"))
        yield Component(
            name=pkg.name,
            version=pkg.version,
            type=ComponentType.LIBRARY,
            bom_ref=f"pkg:pypi/{pkg.name}@{pkg.version}",
            purl=PackageURL(
                type="pypi",
                name=pkg.name,
                version=pkg.version,
                # purl-spec's pypi type: a package from another index names it.
                qualifiers={} if pkg.source == PYPI else {"repository_url": pkg.source},
            ),
            hashes=_hashes(pkg.hashes),
            properties=props,
        )


def _hashes(hashes: Iterable[str]) -> list[HashType]:
    from cyclonedx.model import HashAlgorithm, HashType

    out = []
    for h in hashes:
        alg, _, content = h.partition(":")
        if alg == "sha256" and content:
            out.append(HashType(alg=HashAlgorithm.SHA_256, content=content))
    return out
