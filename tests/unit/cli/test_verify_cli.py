"""`envbuild image --sign-key` writes the evidence of a pass; `envbuild verify` checks it
downstream, with one exit code per failure (README's table, docs/evidence.md)."""

from __future__ import annotations

import base64
import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envbuild.app import evidence, image
from envbuild.cli.main import cli
from envbuild.lock.format import lock_sha256
from tests.signing import key_pair
from tests.unit.cli.test_build_cli import _outcome

IMAGES = Path(__file__).resolve().parents[3] / "images"


def _keys(folder: Path, name: str) -> tuple[Path, Path]:
    return key_pair(folder, name)


@pytest.fixture
def signed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A pass of torch-slim's lock, attested into tmp_path/evidence by `image.attest`; the
    registry part (tests/integration/test_oci_registry.py) only recorded."""
    attached: list[tuple[str, str]] = []

    def record(_docs: object, ref: str, digest: str) -> list[str]:
        attached.append((ref, digest))
        return ["sha256:" + "f" * 64]

    monkeypatch.setattr(evidence, "attach", record)
    text = (IMAGES / "torch-slim" / "envbuild.lock").read_text()
    outcome = _outcome()
    outcome = replace(
        outcome,
        job=replace(outcome.job, lock_text=text, lock_sha256=lock_sha256(text), name="torch-slim"),
        report={
            **outcome.report,
            "host": {"driver": "580.159.04", "gpus": [{"name": "NVIDIA H200", "cc": "9.0"}]},
        },
        pushed={
            "ref": "127.0.0.1:5000/ml/torch:1",
            "digest": "sha256:" + "e" * 64,
            "repo_digest": "",
        },
    )
    private, public = _keys(tmp_path, "envbuild")
    request = image.ImageRequest(sign_key=private, evidence=tmp_path / "evidence")
    done = image.attest(
        outcome,
        request,
        signer=evidence.load_signer(private),
        engine="docker",
        progress=lambda _: None,
    )
    assert done.evidence is not None
    return {
        "outcome": done,
        "public": public,
        "bundle": Path(done.evidence["bundle"]),
        "dir": tmp_path,
    }


def _verify(*args: str) -> Any:
    return CliRunner().invoke(cli, ["verify", *args])


def test_a_pass_is_verified_and_says_where_it_was_proven(signed: dict[str, Any]) -> None:
    outcome = signed["outcome"]
    bundle = signed["bundle"]
    assert bundle.name == "torch-slim.intoto.jsonl"
    assert len(bundle.read_bytes().splitlines()) == 2  # the smoke attestation, the SBOM's
    assert outcome.evidence["subjects"] == [outcome.image_id, "sha256:" + "e" * 64]
    args = ["--attestation", str(bundle), "--key", str(signed["public"])]
    for digest in outcome.evidence["subjects"]:
        result = _verify(*args, "--digest", digest, "--lock", str(IMAGES / "torch-slim"), "--json")
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["proven_on"] == [{"product": "NVIDIA H200", "cc": "9.0", "driver_branch": "580"}]
        assert doc["attestations"] == 2 and doc["sbom_components"] > 10
    human = _verify(*args)
    assert "NVIDIA H200 (cc 9.0), driver branch 580" in human.stdout


def _code(result: Any) -> tuple[int, str]:
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_each_failure_has_its_own_exit_code(signed: dict[str, Any]) -> None:
    bundle, public, folder = signed["bundle"], str(signed["public"]), signed["dir"]
    _other_private, other_public = _keys(folder, "other")
    assert _code(_verify("--attestation", str(folder / "none.jsonl"), "--key", public))[0] == 20
    assert _code(_verify("--attestation", str(bundle), "--key", str(other_public)))[0] == 21
    # Rotation: any one of the keys given may have signed.
    assert (
        _code(_verify("--attestation", str(bundle), "--key", str(other_public), "--key", public))[0]
        == 0
    )
    first, second = bundle.read_bytes().splitlines()
    doc = json.loads(first)
    stmt = json.loads(base64.b64decode(doc["payload"]))
    stmt["predicate"]["verdict"] = "passed"
    stmt["predicate"]["host"]["gpus"] = [{"product": "NVIDIA B200", "cc": "10.0"}]
    doc["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    forged = folder / "forged.intoto.jsonl"
    forged.write_bytes(json.dumps(doc).encode() + b"\n" + second + b"\n")
    assert _code(_verify("--attestation", str(forged), "--key", public))[0] == 22
    other = "sha256:" + "0" * 64
    assert _code(_verify("--attestation", str(bundle), "--key", public, "--digest", other))[0] == 23
    lock = _verify(
        "--attestation", str(bundle), "--key", public, "--lock", str(IMAGES / "torch-cpu")
    )
    assert _code(lock)[0] == 24
    only_sbom = folder / "sbom-only.intoto.jsonl"
    only_sbom.write_bytes(second + b"\n")
    assert _code(_verify("--attestation", str(only_sbom), "--key", public))[0] == 20
    as_json = _verify("--attestation", str(forged), "--key", public, "--json")
    assert json.loads(as_json.stdout)["error"] == "TamperedError"


def test_an_archive_is_checked_against_its_own_image_id(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """docker save's manifest.json names the config, whose digest is the image id the
    attestation is about; the bundle beside the archive is the default."""
    outcome = signed["outcome"]
    archive = tmp_path / "torch.tar"
    manifest = json.dumps([{"Config": outcome.image_id.split(":")[1] + ".json"}]).encode()
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    beside = tmp_path / "torch.tar.intoto.jsonl"
    beside.write_bytes(signed["bundle"].read_bytes())
    assert _code(_verify(str(archive), "--key", str(signed["public"])))[0] == 0
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"not a tar")
    assert _code(_verify(str(garbage), "--key", str(signed["public"])))[0] == 2


def test_sign_key_needs_a_place_and_a_bad_key_fails_before_the_build(tmp_path: Path) -> None:
    private, _public = _keys(tmp_path, "k")
    result = CliRunner().invoke(cli, ["image", str(tmp_path), "--sign-key", str(private)])
    assert result.exit_code == 2 and "--sign-key needs somewhere" in result.output
    missing = ["image", str(tmp_path), "--sign-key", str(tmp_path / "no.key"), "--evidence", "e"]
    result = CliRunner().invoke(cli, missing)
    assert result.exit_code == 2 and "does not exist" in result.output
    bad = tmp_path / "bad.key"
    bad.write_text("not a key")
    result = CliRunner().invoke(
        cli, ["image", str(tmp_path), "--sign-key", str(bad), "--evidence", str(tmp_path / "e")]
    )
    assert result.exit_code == 2 and "not a PEM private key" in result.output


# --- validate on a new host: proven here before, or not yet -------------------------------


def _proof_case(tmp_path: Path, product: str, driver: str) -> tuple[Any, Any, Path, Path]:
    """An image whose bundle attests a pass on `product` with `driver`, in a fake engine."""
    from envbuild.lock.format import dumps
    from tests.unit.cli.test_validate_cli import report_line
    from tests.unit.fakes import read_only_engine
    from tests.unit.preflight.test_validate import make_lock

    lock_text = dumps(make_lock())
    engine = read_only_engine(
        labels={"envbuild.lock": lock_text, "envbuild.lock.sha256": lock_sha256(lock_text)},
        stdout=report_line(),
    )
    image_id = "sha256:" + "7" * 64
    engine.image_ids = lambda ref, pull=True: (image_id, None)  # type: ignore[method-assign,misc]
    outcome = _outcome()
    outcome = replace(
        outcome,
        image_id=image_id,
        job=replace(outcome.job, lock_text=lock_text, lock_sha256=lock_sha256(lock_text)),
        report={
            **outcome.report,
            "host": {"driver": driver, "gpus": [{"name": product, "cc": "9.0"}]},
        },
    )
    private, public = _keys(tmp_path, "k")
    request = image.ImageRequest(sign_key=private, evidence=tmp_path / "ev")
    done = image.attest(
        outcome,
        request,
        signer=evidence.load_signer(private),
        engine="docker",
        progress=lambda _: None,
    )
    assert done.evidence is not None
    return engine, done, Path(done.evidence["bundle"]), public


def test_a_host_proven_before_is_not_smoke_tested_again(tmp_path: Path) -> None:
    from envbuild.app import validate as use_case
    from tests.unit.preflight.test_validate import HOSTS

    engine, _done, bundle, public = _proof_case(tmp_path, "NVIDIA H200", "580.95.05")
    proof = use_case.Proof(bundles=(bundle,), keys=(public,))
    result = use_case.validate(
        target="img", facts_file=HOSTS / "h200-healthy.json", engine=engine, proof=proof
    )
    assert engine.runs == []  # nothing started
    assert [(c.name, c.status) for c in result.smoke] == [("proven", "pass"), ("smoke", "skip")]
    assert result.smoke[0].detail.startswith("proven here before: NVIDIA H200 (cc 9.0)")
    assert result.exit_code == 0
    again = use_case.validate(
        target="img",
        facts_file=HOSTS / "h200-healthy.json",
        engine=engine,
        proof=use_case.Proof(bundles=(bundle,), keys=(public,), resmoke=True),
    )
    assert len(engine.runs) == 1 and again.smoke[0].status == "skip"


def test_a_new_gpu_class_or_driver_branch_runs_the_smoke(tmp_path: Path) -> None:
    from envbuild.app import validate as use_case
    from tests.unit.preflight.test_validate import HOSTS

    engine, _done, bundle, public = _proof_case(tmp_path, "NVIDIA H200", "570.124.06")
    result = use_case.validate(
        target="img",
        facts_file=HOSTS / "h200-healthy.json",
        engine=engine,
        proof=use_case.Proof(bundles=(bundle,), keys=(public,)),
    )
    assert len(engine.runs) == 1
    assert result.smoke[0].name == "proven"
    assert result.smoke[0].detail == (
        "not yet proven on this GPU class: NVIDIA H200 (cc 9.0, driver branch 580): running the smoke"
    )
    assert result.exit_code == 0


def test_a_forged_proof_is_refused_not_trusted(tmp_path: Path) -> None:
    from envbuild.app import validate as use_case
    from envbuild.core.errors import WrongKeyError
    from tests.unit.preflight.test_validate import HOSTS

    engine, _done, bundle, _public = _proof_case(tmp_path, "NVIDIA H200", "580.95.05")
    _other, other_public = _keys(tmp_path, "other")
    with pytest.raises(WrongKeyError):
        use_case.validate(
            target="img",
            facts_file=HOSTS / "h200-healthy.json",
            engine=engine,
            proof=use_case.Proof(bundles=(bundle,), keys=(other_public,)),
        )
    assert engine.runs == []
