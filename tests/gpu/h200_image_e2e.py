"""The tag gate on a GPU through the real CLI: a base that holds this machine's torch, `envbuild
lock` on it, `envbuild image` (build -> smoke in the container on the GPU -> tag), `envbuild
validate IMAGE`, and the faults that must leave no tag and no container.

The base is a devel framework base, as NGC's PyTorch containers are (make_torch_base.py
--devel: the machine's CUDA toolkit and compiler beside its torch), so two more requests run
on it: a torch extension compiled from its sdist in the build (images/torch-ext's
envbuild-vecadd, with the base's nvcc and torch) whose kernel the smoke's tier 2 calls in the
container on the GPU, and a project (images/torch-project) installed with --no-deps whose own
smoke command trains on the GPU in the container. Both lock with `--offline`: the machine
reaches no index, and what the base holds is not resolved again.

Run by tests/gpu/h200_image_e2e.sh once the engine is up (DOCKER_HOST), with the Python that
holds the machine's torch. Writes into $OUT: h200-image-e2e.json (`image --json` of the pass),
h200-validate-image.json, h200-faults.json, h200-timings.json, h200-engine.json,
h200-torch-ext-image.json, h200-torch-project-image.json. Exit 0 when every step did what it
must. Without a GPU (no nvidia-smi) it runs the CPU path and skips the faults that need one:
a dry run of everything else. BASE_TAG names an existing base to use instead of making one;
E2E_STEPS (comma-separated: main, ext, project) picks the parts to run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("OUT") or REPO / ".e2e" / "h200")
WORK = Path(os.environ.get("E2E_WORK", "/tmp/h200-e2e"))
CDI_SPEC = Path(os.environ.get("CDI_DIR", "/etc/cdi")) / "nvidia.yaml"
BASE_TAG = os.environ.get("BASE_TAG") or "h200-standin/torch-devel:1"
STEPS = set((os.environ.get("E2E_STEPS") or "main,ext,project,real").split(","))
REAL = Path(os.environ.get("E2E_REAL") or REPO / ".cache" / "real" / "minGPT")
"""A checkout of a real training repository (karpathy/minGPT: setup.py only, its adder
project trains a tiny GPT on generated data and saves it to ./out), carried to the machine;
none of its code is in this repository."""
OTHER_TAG = "h200-standin/torch-other:1"
TAG = "envbuild-h200/torch-base"
CLI = "import sys; from envbuild.cli.main import main; sys.argv[0] = 'envbuild'; main()"


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def run(argv: list[str], *, timeout: int = 900, stdin: str | None = None) -> dict[str, Any]:
    started = time.monotonic()
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, input=stdin, check=False
        )
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = 124, str(exc.stdout or ""), f"killed after {timeout} s"
    step: dict[str, Any] = {"rc": rc, "seconds": round(time.monotonic() - started, 2)}
    try:
        step["json"] = json.loads(out) if out.strip().startswith("{") else None
    except json.JSONDecodeError:
        step["json"] = None
    step["stdout_tail"] = out.strip().splitlines()[-5:] if step["json"] is None else []
    step["stderr_tail"] = err.strip().splitlines()[-12:]
    return step


def envbuild(*args: str, timeout: int = 900) -> dict[str, Any]:
    log("envbuild " + " ".join(args))
    step = run([sys.executable, "-c", CLI, *args], timeout=timeout)
    log(f"  -> exit {step['rc']} in {step['seconds']} s")
    return step


def docker(*args: str, stdin: str | None = None, timeout: int = 900) -> dict[str, Any]:
    return run(["docker", *args], stdin=stdin, timeout=timeout)


def tag_exists(tag: str) -> bool:
    return bool(docker("image", "inspect", tag)["rc"] == 0)


def containers(label: str) -> int:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True
    )
    return len(out.stdout.split())


def gpu() -> dict[str, str] | None:
    """The first GPU's name and the driver, from nvidia-smi; None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    )
    lines = [ln.split(",") for ln in out.stdout.strip().splitlines() if "," in ln]
    if out.returncode != 0 or not lines:
        return None
    name = lines[0][0].strip().replace("NVIDIA ", "")
    return {"name": name, "driver": lines[0][1].strip(), "count": str(len(lines))}


def write_request(folder: Path, device: dict[str, str] | None, base: str = BASE_TAG) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        "# A framework base: the stand-in for an NGC container, made of this machine's torch.",
        "[image]",
        f'base = "{base}"',
    ]
    if device is None:
        lines += ['device = "cpu"']
    lines += ["", "[framework]", 'requirement = "torch"', ""]
    if device is not None:
        name = re.sub(r"\s+\d+GB.*$", "", device["name"])
        lines += ["[targets]", f'gpus = ["{name}"]', f'driver = "{device["driver"]}"', ""]
    lines += ["[smoke]", "tier = 2"]
    (folder / "envbuild.toml").write_text("\n".join(lines) + "\n")


def other_version(version: str) -> str:
    """Another torch version string than the base's (the fault the smoke test must catch)."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)(.*)", version)
    if not m:
        return "0.0.1"
    major, minor, _patch, rest = m.groups()
    return f"{major}.{max(int(minor) - 1, 0)}.9{rest}"


def make_bases(results: dict[str, Any]) -> None:
    log(f"making {BASE_TAG} from {sys.executable}")
    if (os.environ.get("REUSE_BASE") or os.environ.get("BASE_TAG")) and tag_exists(BASE_TAG):
        step: dict[str, Any] = {"rc": 0, "seconds": 0, "json": {"reused": True}, "stderr_tail": []}
    else:
        script = str(REPO / "tests/gpu/make_torch_base.py")
        step = run([sys.executable, script, "--devel", BASE_TAG], timeout=1200)
    results["base"] = {
        "rc": step["rc"],
        "seconds": step["seconds"],
        **({k: v for k, v in (step["json"] or {}).items() if k != "distributions"}),
        "distributions": len((step["json"] or {}).get("distributions") or []),
        "stderr_tail": step["stderr_tail"],
    }
    log(f"  -> {results['base']}")
    # The base's torch, asked in the base (the dry run's base is not this Python's).
    asked = docker(
        "run",
        "--rm",
        BASE_TAG,
        "python3",
        "-c",
        "import torch, os; print(torch.__version__, os.path.dirname(torch.__file__))",
    )
    version, torch_dir = [*(asked["stdout_tail"] or ["0.0.0 /nowhere"])[-1].split(), "/x"][:2]
    results["base"]["nvcc"] = docker(
        "run", "--rm", BASE_TAG, "sh", "-c", "nvcc --version | tail -2"
    )["stdout_tail"]
    version_py = Path(torch_dir) / "version.py"
    other = other_version(version)
    dockerfile = (
        f"FROM {BASE_TAG}\n"
        f"RUN sed -i \"s/^__version__ = .*/__version__ = '{other}'/\" {version_py}\n"
    )
    env_step = subprocess.run(
        ["docker", "build", "-q", "-t", OTHER_TAG, "-"],
        input=dockerfile,
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    results["other_base"] = {
        "rc": env_step.returncode,
        "torch": other,
        "holds_instead_of": version,
        "stderr_tail": env_step.stderr.strip().splitlines()[-5:],
    }


def image(folder: Path, tag: str, *extra: str, expect: int, lock_sha: str) -> dict[str, Any]:
    again = ("--resmoke",) if expect else ()
    # E2E_IMAGE_ARGS: more flags for every build (a dry run behind a proxy: --ca-cert FILE).
    more = tuple(os.environ.get("E2E_IMAGE_ARGS", "").split())
    step = envbuild(
        "image", str(folder), "--tag", tag, "--json", *again, *extra, *more, timeout=1500
    )
    step["expected_rc"] = expect
    step["tag_exists"] = tag_exists(tag)
    step["containers_left"] = containers(f"envbuild.lock.sha256={lock_sha}")
    passed = expect == 0
    step["ok"] = (
        step["rc"] == expect and step["tag_exists"] == passed and step["containers_left"] == 0
    )
    log(f"  {tag}: ok={step['ok']} tag={step['tag_exists']} left={step['containers_left']}")
    return step


def faults(folder: Path, device: dict[str, str] | None, lock_sha: str) -> dict[str, Any]:
    """Each must fail and leave no tag and no container. --resmoke: the same image id passed
    a moment ago, and a recorded pass would otherwise be reused without running anything."""
    out: dict[str, Any] = {}
    if device is not None:
        out["no-gpu-forced-gpus"] = image(
            folder, f"{TAG}:nogpu-forced", "--gpu-attach", "gpus", expect=7, lock_sha=lock_sha
        )
        moved = CDI_SPEC.with_suffix(".off")
        CDI_SPEC.rename(moved)
        try:
            out["no-gpu-no-cdi-spec"] = image(folder, f"{TAG}:nogpu", expect=7, lock_sha=lock_sha)
        finally:
            moved.rename(CDI_SPEC)
    out["other-torch-in-base"] = image(
        folder, f"{TAG}:other-torch", "--base-image", OTHER_TAG, expect=6, lock_sha=lock_sha
    )
    out["smoke-timeout-1"] = image(
        folder, f"{TAG}:timeout", "--smoke-timeout", "1", expect=6, lock_sha=lock_sha
    )
    return out


def targets_lines(device: dict[str, str] | None) -> list[str]:
    if device is None:
        return []
    name = re.sub(r"\s+\d+GB.*$", "", device["name"])
    return ["[targets]", f'gpus = ["{name}"]', f'driver = "{device["driver"]}"', ""]


def stage_timings(step: dict[str, Any]) -> dict[str, Any]:
    """`envbuild image --json`'s own per-stage seconds, and the whole CLI's."""
    doc = step.get("json") or {}
    return {
        "build_s": doc.get("build_s"),
        "smoke_s": doc.get("smoke_s"),
        "tag_s": doc.get("tag_s"),
        "image_cli_s": step.get("seconds"),
    }


def offline(device: dict[str, str] | None) -> tuple[str, ...]:
    """The GPU machine reaches no index: lock from the wheelhouse and the base alone. (The dry
    run without a GPU reads PyPI for what its CPU base lacks.)"""
    return ("--offline",) if device is not None else ()


def ext_checks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The smoke's checks of the compiled extension (tier 1 ext-archs, tier 2 ext-smoke)."""
    checks = (doc.get("smoke") or {}).get("checks") or []
    return [c for c in checks if str(c.get("name", "")).startswith(("ext-archs", "ext-smoke"))]


def ext_request(device: dict[str, str] | None) -> dict[str, Any]:
    """images/torch-ext's extension on the devel base: its sdist from the example's wheelhouse,
    compiled in the build with the base's nvcc and torch; the smoke calls its kernel."""
    folder = WORK / "torch-ext"
    shutil.copytree(REPO / "images/torch-ext/wheels", folder / "wheels")
    lines = ["[image]", f'base = "{BASE_TAG}"', "compile_extensions = true"]
    lines += ['device = "cpu"', ""] if device is None else [""]
    lines += ["[framework]", 'requirement = "torch"', ""]
    lines += ["[packages]", 'requirements = ["envbuild-vecadd==0.1.0"]', ""]
    lines += ["[indexes]", 'find_links = ["wheels"]', ""]
    lines += [*targets_lines(device), "[smoke]", "tier = 2"]
    (folder / "envbuild.toml").write_text("\n".join(lines) + "\n")
    out: dict[str, Any] = {"lock": envbuild("lock", str(folder), *offline(device))}
    lock_path = folder / "envbuild.lock"
    out["lock_text"] = lock_path.read_text() if lock_path.exists() else None
    if out["lock"]["rc"] != 0:
        out["ok"] = device is None and out["lock"]["rc"] == 2  # CPU: no target GPUs to build for
        return out
    sha = hashlib.sha256(lock_path.read_bytes()).hexdigest()
    wheels = str(folder / "wheels")
    step = image(folder, f"{TAG}:ext", "--find-links", wheels, expect=0, lock_sha=sha)
    doc = step.get("json") or {}
    out["image"] = step
    out["timings"] = stage_timings(step)
    out["ext_checks"] = ext_checks(doc)
    passed = [c for c in out["ext_checks"] if c.get("status") == "pass"]
    out["ok"] = bool(step["ok"]) and len(passed) == len(out["ext_checks"]) >= 2
    return out


PROJECT_BUILD = """[build-system]
# setuptools, which the base holds (the machine reaches no index for hatchling)
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
"""


def project_request(device: dict[str, str] | None) -> dict[str, Any]:
    """images/torch-project on the devel base: its pyproject.toml dependencies (all held by
    the base), installed with --no-deps, its own smoke command run in the container."""
    folder = WORK / "torch-project"
    src = REPO / "images/torch-project"
    shutil.copytree(src / "src", folder / "src")
    text = (src / "pyproject.toml").read_text()
    out: dict[str, Any] = {}
    # Its own hatchling backend is in neither the base nor a wheelhouse: refused at lock.
    (folder / "pyproject.toml").write_text(text)
    lines = ["[image]", f'base = "{BASE_TAG}"']
    lines += ['device = "cpu"', ""] if device is None else [""]
    lines += ["[framework]", 'requirement = "torch"', ""]
    lines += ["[packages]", 'files = ["pyproject.toml"]', 'extras = ["train"]', ""]
    lines += ["[project]", 'path = "."', 'command = ["python", "-m", "torch_project.train"]', ""]
    lines += [*targets_lines(device), "[smoke]", "tier = 1"]
    lines += ['command = "python -m torch_project.train --steps 50"']
    (folder / "envbuild.toml").write_text("\n".join(lines) + "\n")
    out["lock_hatchling"] = envbuild("lock", str(folder), *offline(device))
    body = text[text.index("[project]") :].split("[tool.hatch", 1)[0]
    (folder / "pyproject.toml").write_text(PROJECT_BUILD + "\n" + body)
    out["lock"] = envbuild("lock", str(folder), *offline(device))
    lock_path = folder / "envbuild.lock"
    out["lock_text"] = lock_path.read_text() if lock_path.exists() else None
    if out["lock"]["rc"] != 0:
        out["ok"] = False
        return out
    sha = hashlib.sha256(lock_path.read_bytes()).hexdigest()
    step = image(folder, f"{TAG}:project", expect=0, lock_sha=sha)
    out["image"] = step
    out["timings"] = stage_timings(step)
    command = (step.get("json") or {}).get("smoke_command") or {}
    out["smoke_command"] = command
    refused = device is None or out["lock_hatchling"]["rc"] != 0  # offline on the GPU machine
    out["ok"] = bool(step["ok"]) and refused and bool(command.get("ok"))
    return out


def real_request(device: dict[str, str] | None) -> dict[str, Any]:
    """A real repository as a new user writes its request: its setup.py read for its
    dependencies (numpy named too: its code imports it), code installed, its own training
    step as the smoke command; targets an H100 + L4 fleet (the memory-fit table) on this
    machine's driver; tier 2, so both the payload and the project's step are watched; the
    HTML report written beside the results."""
    out: dict[str, Any] = {"source": str(REAL)}
    if not (REAL / "setup.py").is_file():
        out["ok"] = False
        out["error"] = f"no checkout at {REAL} (carry .cache/real/minGPT)"
        return out
    folder = WORK / "minGPT"
    shutil.copytree(REAL, folder, ignore=shutil.ignore_patterns(".git"))
    lines = ["[image]", f'base = "{BASE_TAG}"']
    lines += ['device = "cpu"', ""] if device is None else [""]
    lines += ["[framework]", 'requirement = "torch"', ""]
    lines += ["[packages]", 'files = ["setup.py"]', 'requirements = ["numpy"]', ""]
    lines += ["[project]", 'path = "."', 'command = ["python", "projects/adder/adder.py"]', ""]
    if device is not None:
        lines += ["[targets]", 'gpus = ["H100", "L4"]', f'driver = "{device["driver"]}"', ""]
    lines += ["[smoke]", "tier = 2"]
    lines += ['command = ["python", "projects/adder/adder.py", "--trainer.max_iters=300"]']
    (folder / "envbuild.toml").write_text("\n".join(lines) + "\n")
    out["request"] = "\n".join(lines)
    out["lock"] = envbuild("lock", str(folder), *offline(device))
    lock_path = folder / "envbuild.lock"
    if out["lock"]["rc"] != 0:
        out["ok"] = False
        return out
    sha = hashlib.sha256(lock_path.read_bytes()).hexdigest()
    report = OUT / "h200-real-mingpt-report.html"
    step = image(folder, f"{TAG}:mingpt", "--report", str(report), expect=0, lock_sha=sha)
    doc = step.get("json") or {}
    command = doc.get("smoke_command") or {}
    watch = command.get("watch") or {}
    out["image"] = step
    out["timings"] = stage_timings(step)
    out["smoke_command"] = {k: v for k, v in command.items() if k != "watch"}
    out["project_watch_peaks"] = watch.get("peaks")
    out["project_readings"] = watch.get("readings")
    out["payload_peaks"] = ((doc.get("smoke") or {}).get("metrics") or {}).get("nvml")
    out["memory_fit"] = doc.get("memory_fit")
    out["report_written"] = report.is_file()
    samples = (watch.get("peaks") or {}).get("samples") or 0
    out["ok"] = bool(step["ok"]) and bool(command.get("ok")) and (device is None or samples > 0)
    return out


def metrics(report: dict[str, Any] | None) -> dict[str, Any]:
    report = report or {}
    values = report.get("metrics") or {}
    return {
        "device": report.get("device"),
        "bf16_tflops": values.get("bf16_tflops"),
        "mem_bw_tbs": values.get("mem_bw_tbs"),
        "payload_timings": report.get("timings"),
    }


def engine_facts(folder: Path) -> dict[str, Any]:
    data = docker("info", "--format", "{{json .}}")["json"] or {}
    keep = ("ServerVersion", "Runtimes", "DefaultRuntime", "CDISpecDirs", "DiscoveredDevices")
    return {
        "docker_info": {k: data.get(k) for k in keep if k in data},
        "cdi_spec": CDI_SPEC.read_text() if CDI_SPEC.exists() else None,
        "lock": (folder / "envbuild.lock").read_text()
        if (folder / "envbuild.lock").exists()
        else None,
    }


def save(results: dict[str, Any]) -> None:
    """Every output file from what is known so far: a run cut short still leaves its part."""
    passing = results.get("image") or {}
    validate = results.get("validate") or {}
    mine = ("faults", "image", "ext", "project", "real", "evidence")
    files = {
        "h200-image-e2e.json": passing.get("json") or passing,
        "h200-validate-image.json": validate.get("json") or validate,
        "h200-faults.json": results.get("faults") or {},
        "h200-timings.json": {k: v for k, v in results.items() if k not in mine},
        "h200-torch-ext-image.json": results.get("ext") or {},
        "h200-torch-project-image.json": results.get("project") or {},
        "h200-real-mingpt.json": results.get("real") or {},
        "h200-evidence.json": results.get("evidence") or {},
    }
    for name, doc in files.items():
        (OUT / name).write_text(json.dumps(doc, indent=2) + "\n")


def summary(results: dict[str, Any]) -> None:
    doc = (results.get("image") or {}).get("json") or {}
    host = results.get("host_smoke") or {}
    results["timings"] = {
        "base_import_s": results["base"].get("seconds"),
        "lock_s": (results.get("lock") or {}).get("seconds"),
        "image_cli_s": (results.get("image") or {}).get("seconds"),
        "build_s": doc.get("build_s"),
        "smoke_in_container_s": doc.get("smoke_s"),
        "tag_s": doc.get("tag_s"),
        "validate_cli_s": (results.get("validate") or {}).get("seconds"),
        "smoke_on_host_cli_s": host.get("seconds"),
        "container": metrics(doc.get("smoke")),
        "host": metrics((host.get("json") or {}).get("report") or host.get("json")),
    }


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(WORK, ignore_errors=True)
    device = gpu()
    log(f"GPU: {device}")
    results: dict[str, Any] = {"gpu": device}
    make_bases(results)
    checks: dict[str, bool] = {}
    # The new requests first: a run cut short still has them.
    if "ext" in STEPS:
        results["ext"] = ext_request(device)
        checks["ext"] = bool(results["ext"]["ok"])
        save(results)
    if "project" in STEPS:
        results["project"] = project_request(device)
        checks["project"] = bool(results["project"]["ok"])
        save(results)
    if "real" in STEPS:
        results["real"] = real_request(device)
        checks["real_project"] = bool(results["real"]["ok"])
        save(results)
    if "main" in STEPS:
        checks.update(main_request(results, device))
    checks["no_smoke_containers_left"] = containers("envbuild.role=smoke") == 0
    results["checks"] = checks
    save(results)
    log(f"checks: {checks}")
    return 0 if all(checks.values()) else 1


def evidence_step(folder: Path, tag: str) -> dict[str, Any]:
    """The pass signed (issue 31): the attestation records this GPU, driver and attachment,
    verify lists it, and validate on this host says it was proven here before."""
    keys = OUT / "evidence"
    shutil.rmtree(keys, ignore_errors=True)
    keys.mkdir(parents=True)
    run(
        [
            "openssl",
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            str(keys / "e2e.key"),
        ]
    )
    run(["openssl", "pkey", "-in", str(keys / "e2e.key"), "-pubout", "-out", str(keys / "e2e.pub")])
    out: dict[str, Any] = {
        "sign": envbuild(
            "image",
            str(folder),
            "--tag",
            tag,
            "--json",
            "--sign-key",
            str(keys / "e2e.key"),
            "--evidence",
            str(keys),
            timeout=1500,
        )
    }
    signed = (out["sign"]["json"] or {}).get("evidence") or {}
    bundle = signed.get("bundle", "")
    image_id = docker("image", "inspect", "--format", "{{.Id}}", tag)["stdout_tail"]
    digest = image_id[-1] if image_id else ""
    out["verify"] = envbuild(
        "verify",
        "--attestation",
        bundle,
        "--key",
        str(keys / "e2e.pub"),
        "--digest",
        digest,
        "--lock",
        str(folder),
        "--json",
    )
    out["validate"] = envbuild(
        "validate", tag, "--evidence", bundle, "--key", str(keys / "e2e.pub"), "--json", timeout=900
    )
    proven = (out["verify"]["json"] or {}).get("proven_on") or []
    checks = (out["validate"]["json"] or {}).get("checks") or []
    out["ok"] = (
        out["sign"]["rc"] == 0
        and out["verify"]["rc"] == 0
        and any(p.get("cc") == "9.0" and "H200" in p.get("product", "") for p in proven)
        and any(c.get("check") == "proven" and c.get("status") == "pass" for c in checks)
    )
    (keys / "e2e.key").unlink()  # the private key never leaves this machine
    log(f"  evidence: ok={out['ok']} proven_on={proven}")
    return out


def main_request(results: dict[str, Any], device: dict[str, str] | None) -> dict[str, bool]:
    """The framework's own request on the base: lock, image, validate, host smoke, faults."""
    folder = WORK / "torch-base"
    write_request(folder, device)
    (OUT / "h200-engine.json").write_text(json.dumps(engine_facts(folder), indent=2) + "\n")
    doctor = envbuild("doctor", "--json")
    findings = (doctor["json"] or {}).get("findings") or []
    results["doctor_gpu_runtime"] = [f for f in findings if f.get("check") == "gpu-runtime"]
    results["doctor_rc"] = doctor["rc"]
    results["lock"] = envbuild("lock", str(folder))
    (OUT / "h200-engine.json").write_text(json.dumps(engine_facts(folder), indent=2) + "\n")
    lock_path = folder / "envbuild.lock"
    lock_sha = hashlib.sha256(lock_path.read_bytes()).hexdigest() if lock_path.exists() else ""
    results["image"] = image(folder, f"{TAG}:ok", expect=0, lock_sha=lock_sha)
    save(results)
    results["evidence"] = evidence_step(folder, f"{TAG}:ok")
    save(results)
    results["validate"] = envbuild("validate", f"{TAG}:ok", "--json", timeout=900)
    results["host_smoke"] = envbuild("smoke", "--lock", str(folder), "--json", timeout=900)
    summary(results)
    save(results)
    results["faults"] = faults(folder, device, lock_sha)
    return {
        "lock": results["lock"]["rc"] == 0,
        "image": results["image"]["ok"],
        "validate": results["validate"]["rc"] == 0,
        "evidence": bool(results["evidence"]["ok"]),
        "host_smoke": results["host_smoke"]["rc"] == 0,
        **{name: f["ok"] for name, f in results["faults"].items()},
    }


if __name__ == "__main__":
    sys.exit(main())
