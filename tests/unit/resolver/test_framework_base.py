"""Framework bases without an engine: the probe's facts (one recorded from a real image:
tests/fixtures/bases/), the request keys, the stack and its checks against targets, the
constraints of extra packages, the lock's [base_facts] round trip and the Dockerfile."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from envbuild.core.errors import RequestError, UnsatisfiableError, UserError
from envbuild.core.models import BaseFacts, Lock, LockedPackage, Request, SmokeSettings, Targets
from envbuild.cuda.archs import sort_archs
from envbuild.lock.format import dumps, loads
from envbuild.matrix import load_matrix_from
from envbuild.render.dockerfile import RenderOptions, constraints_text, render_dockerfile
from envbuild.request.parse import parse_request
from envbuild.resolver import base as fb

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "bases"
CPU_PROBE = (RECORDED / "cpu-torch-2.13.0-debian12.txt").read_text()
MATRIX = load_matrix_from(None)
REF = "team/torch-base:1"


def cpu_facts() -> BaseFacts:
    return fb.parse_probe(CPU_PROBE, ref=REF, framework="torch", image_id="sha256:" + "a" * 64)


def gpu_facts(**over: object) -> BaseFacts:
    """The recorded base, as a CUDA 13.0 build for Hopper and Blackwell would report it."""
    facts = dataclasses.replace(
        cpu_facts(),
        framework_version="2.11.0+cu130",
        cuda="13.0",
        cudnn="9.13.0",
        nccl="2.27.7",
        archs=sort_archs(("sm_100", "sm_120", "sm_90", "compute_120")),
    )
    return dataclasses.replace(facts, **over)  # type: ignore[arg-type]


def request(**over: object) -> Request:
    base = Request(framework="torch", base=REF, targets=Targets(gpus=("H100",), driver="580.95.05"))
    return dataclasses.replace(base, **over)  # type: ignore[arg-type]


def test_recorded_probe_reads_every_fact() -> None:
    facts = cpu_facts()
    assert (facts.framework_version, facts.cuda, facts.python, facts.os) == (
        "2.13.0+cpu",
        None,
        "3.11",
        "debian12",
    )
    assert facts.python_path == "/opt/fw/bin/python3"
    assert ("six", "1.16.0") in facts.packages and facts.has_pip


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("nothing here\n", "the probe printed no facts"),
        ("ENVBUILD-BASE-FACTS {not json\n", "the probe's facts are not JSON"),
        (
            'ENVBUILD-BASE-FACTS {"error": "ModuleNotFoundError: No module named \'torch\'"}\n',
            "torch does not import there: ModuleNotFoundError",
        ),
        (
            CPU_PROBE.replace('"python_path": "/opt/fw/bin/python3"', '"python_path": "py; rm"'),
            "the probe reported python_path = 'py; rm'",
        ),
    ],
)
def test_a_probe_that_says_nothing_usable_is_exit_2(stdout: str, message: str) -> None:
    with pytest.raises(fb.ProbeError) as info:
        fb.parse_probe(stdout, ref=REF, framework="torch")
    assert info.value.exit_code == 2
    assert message in info.value.message


def test_gpu_base_stack_records_the_facts_and_the_floors() -> None:
    stack = fb.stack_for_base(request(), gpu_facts(), MATRIX)
    assert (stack.flavour, stack.framework.version, stack.framework.variant) == (
        "framework",
        "2.11.0+cu130",
        "base",
    )
    assert (stack.cuda, stack.cudnn, stack.nccl, stack.python) == (
        "13.0",
        "9.13.0",
        "2.27.7",
        "3.11",
    )
    assert stack.target_archs == ("sm_90",)
    assert stack.base_image.require_cuda == "cuda>=13.0"
    # Driver 580.95.05 meets CUDA 13.0.0's own floor: nothing rests on minor compatibility.
    assert stack.floors is not None and stack.floors.effective == "580.65.06"
    assert stack.rows and stack.rows[0].startswith("cuda:13.0")


@pytest.mark.parametrize(
    ("req", "facts", "reason"),
    [
        (request(framework="torch>=2.12"), gpu_facts(), "holds torch 2.11.0+cu130, outside >=2.12"),
        (request(cuda="12.8"), gpu_facts(), "built with CUDA 13.0, outside 12.8"),
        (request(), cpu_facts(), "holds a CPU build of torch (2.13.0+cpu)"),
        (
            request(targets=Targets(gpus=("V100",))),
            gpu_facts(),
            "carries sm_90, sm_100, sm_120, compute_120: no code for V100 (sm_70)",
        ),
        (
            request(targets=Targets(gpus=("H100",), driver="570.124.06")),
            gpu_facts(),
            "needs driver >= 580 (CUDA 13.0); targets.driver is 570.124.06",
        ),
        (request(framework="jax"), gpu_facts(), "the request asks for jax"),
    ],
)
def test_what_does_not_fit_says_why(req: Request, facts: BaseFacts, reason: str) -> None:
    with pytest.raises(UnsatisfiableError) as info:
        fb.stack_for_base(req, facts, MATRIX)
    assert any(reason in r for r in info.value.fields["reasons"]), info.value.fields


def test_a_cpu_base_for_a_cpu_request() -> None:
    stack = fb.stack_for_base(
        request(device="cpu", targets=Targets(), framework="torch>=2.12"), cpu_facts(), MATRIX
    )
    assert (stack.cuda, stack.floors, stack.framework.variant) == (None, None, "cpu")


def test_constraints_keep_what_the_base_holds() -> None:
    facts = gpu_facts(packages=(("torch", "2.11.0+cu130"), ("six", "1.16.0"), ("odd", "git-main")))
    assert fb.constraints(facts) == ("torch==2.11.0", "six==1.16.0")
    pinned = (
        LockedPackage("six", "1.16.0", ("sha256:" + "1" * 64,), "https://pypi.org/simple"),
        LockedPackage("typing-inspect", "0.9.0", ("sha256:" + "2" * 64,), "x"),
    )
    assert [p.name for p in fb.extras_only(pinned, facts)] == ["typing-inspect"]


def test_extras_need_pip_in_the_base() -> None:
    with pytest.raises(UserError, match="has no pip for /opt/fw/bin/python3"):
        fb.check_extras(request(packages=("tqdm",)), gpu_facts(has_pip=False))


def test_request_base_key_and_what_it_excludes(tmp_path: Path) -> None:
    text = f'[image]\nbase = "{REF}"\n\n[framework]\nrequirement = "torch"\n'

    def parse(text: str) -> Request:
        return parse_request(text.encode(), path="x.toml", default_name="fw")

    assert parse(text).base == REF
    with pytest.raises(RequestError, match="python is set, but base = 'team/torch-base:1'"):
        parse(text.replace("[image]\n", '[image]\npython = "3.12"\n'))
    with pytest.raises(RequestError, match="'Team/Torch' is not an image reference"):
        parse(text.replace(REF, "Team/Torch"))


def lock_of(facts: BaseFacts, packages: tuple[LockedPackage, ...] = ()) -> Lock:
    req = request(device="cpu", targets=Targets(), framework="torch")
    return Lock(
        name="fw",
        input_hash="sha256:" + "0" * 64,
        stack=fb.stack_for_base(req, facts, MATRIX),
        targets=req.targets,
        platform="x86_64",
        indexes=req.indexes,
        smoke=SmokeSettings(tier=1),
        base_digest=None,
        packages=packages,
        base_facts=facts,
    )


def test_lock_round_trip_keeps_the_base_facts() -> None:
    lock = lock_of(cpu_facts())
    text = dumps(lock)
    assert text.startswith("# Generated by envbuild")  # no `package = []` above it
    assert "[base_facts]" in text and "[base_facts.packages]" in text
    again = loads(text)
    assert again.base_facts == lock.base_facts
    assert dumps(again) == text


def test_dockerfile_uses_the_base_python_and_keeps_its_versions() -> None:
    extra = LockedPackage("typing-inspect", "0.9.0", ("sha256:" + "2" * 64,), "x")
    lock = lock_of(cpu_facts(), (extra,))
    text = render_dockerfile(lock, options=RenderOptions())
    assert text.startswith("# Generated by envbuild")
    assert f"FROM {REF}\n" in text
    assert 'exec %s "$@"\\n\' /opt/fw/bin/python3 > /opt/envbuild/bin/python' in text
    assert "python -m pip install --no-cache-dir --require-hashes --no-deps" in text
    assert "apt-get install" not in text and "-m venv" not in text
    constraints = constraints_text(lock).splitlines()
    assert "typing-inspect==0.9.0" in constraints and "torch==2.13.0+cpu" in constraints
