"""The tag gate on a GPU through the real CLI: a base that holds this machine's torch, `envbuild
lock` on it, `envbuild image` (build -> smoke in the container on the GPU -> tag), `envbuild
validate IMAGE`, and the faults that must leave no tag and no container.

Run by tests/gpu/h200_image_e2e.sh once the engine is up (DOCKER_HOST), with the Python that
holds the machine's torch. Writes into $OUT: h200-image-e2e.json (`image --json` of the pass),
h200-validate-image.json, h200-faults.json, h200-timings.json, h200-engine.json. Exit 0 when
every step did what it must. Without a GPU (no nvidia-smi) it runs the CPU path and skips
the faults that need one: a dry run of everything else.
"""

from __future__ import annotations

import hashlib
import importlib.util
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
BASE_TAG = "h200-standin/torch-base:1"
OTHER_TAG = "h200-standin/torch-other:1"
TAG = "envbuild-h200/torch-base"
CLI = "import sys; from envbuild.cli import main; sys.argv[0] = 'envbuild'; main()"


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


def write_request(folder: Path, device: dict[str, str] | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        "# A framework base: the stand-in for an NGC container, made of this machine's torch.",
        "[image]",
        f'base = "{BASE_TAG}"',
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
    if os.environ.get("REUSE_BASE") and tag_exists(BASE_TAG):
        step: dict[str, Any] = {"rc": 0, "seconds": 0, "json": {"reused": True}, "stderr_tail": []}
    else:
        script = str(REPO / "tests/gpu/make_torch_base.py")
        step = run([sys.executable, script, BASE_TAG], timeout=1200)
    results["base"] = {
        "rc": step["rc"],
        "seconds": step["seconds"],
        **({k: v for k, v in (step["json"] or {}).items() if k != "distributions"}),
        "distributions": len((step["json"] or {}).get("distributions") or []),
        "stderr_tail": step["stderr_tail"],
    }
    log(f"  -> {results['base']}")
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.submodule_search_locations
    version_py = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    import torch  # the version string only; no CUDA call

    other = other_version(torch.__version__)
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
        "holds_instead_of": torch.__version__,
        "stderr_tail": env_step.stderr.strip().splitlines()[-5:],
    }


def image(folder: Path, tag: str, *extra: str, expect: int, lock_sha: str) -> dict[str, Any]:
    again = ("--resmoke",) if expect else ()
    step = envbuild("image", str(folder), "--tag", tag, "--json", *again, *extra, timeout=1500)
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
    files = {
        "h200-image-e2e.json": passing.get("json") or passing,
        "h200-validate-image.json": validate.get("json") or validate,
        "h200-faults.json": results.get("faults") or {},
        "h200-timings.json": {k: v for k, v in results.items() if k not in ("faults", "image")},
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
        "validate_cli_s": (results.get("validate") or {}).get("seconds"),
        "smoke_on_host_cli_s": host.get("seconds"),
        "container": metrics(doc.get("smoke")),
        "host": metrics((host.get("json") or {}).get("report") or host.get("json")),
    }


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    folder = WORK / "torch-base"
    shutil.rmtree(WORK, ignore_errors=True)
    device = gpu()
    log(f"GPU: {device}")
    results: dict[str, Any] = {"gpu": device}
    make_bases(results)
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
    results["validate"] = envbuild("validate", f"{TAG}:ok", "--json", timeout=900)
    results["host_smoke"] = envbuild("smoke", "--lock", str(folder), "--json", timeout=900)
    summary(results)
    save(results)
    results["faults"] = faults(folder, device, lock_sha)
    checks = {
        "lock": results["lock"]["rc"] == 0,
        "image": results["image"]["ok"],
        "validate": results["validate"]["rc"] == 0,
        "host_smoke": results["host_smoke"]["rc"] == 0,
        **{name: f["ok"] for name, f in results["faults"].items()},
        "no_smoke_containers_left": containers("envbuild.role=smoke") == 0,
    }
    results["checks"] = checks
    save(results)
    log(f"checks: {checks}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
