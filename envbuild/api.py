"""Use cases: one keyword-only function per command. Commands call these; these call the pure
core and the I/O edges. Heavy modules are imported inside the functions so the CLI starts fast.

Each section below is owned by one use case; keep edits inside your section.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names for annotations only; runtime imports stay inside the functions
    from collections.abc import Callable
    from pathlib import Path

    from envbuild.build import ImageOutcome
    from envbuild.engine import ContainerEngine
    from envbuild.lockfile import LockOutcome
    from envbuild.render import RenderResult

# --- resolve ---------------------------------------------------------------------------------

if TYPE_CHECKING:
    from collections.abc import Sequence

    from envbuild.matrix import Matrix
    from envbuild.models import Host, Stack, Unsatisfiable


def resolve(
    *,
    framework: str = "torch",
    python: str | None = None,
    gpus: Sequence[str] = (),
    driver: str | None = None,
    cuda: str | None = None,
    host: bool = False,
    os_name: str | None = None,
    flavour: str = "auto",
    cpu: bool = False,
    strict_compat: bool = False,
    compile_extensions: bool = False,
    platform: str = "x86_64",
    hosts: Sequence[Host] = (),
    hosts_files: Sequence[Path] = (),
    matrix: Matrix | None = None,
) -> Stack | Unsatisfiable:
    """`envbuild resolve`: the stack for these targets, or why nothing fits (exit 1 in the CLI).

    `host=True` adds this machine's GPUs and driver (NVML; NoGpuError, exit 2, without a
    driver); `hosts` and `hosts_files` (host facts written by `envbuild doctor --json`) add
    other hosts. Bad input raises UserError (exit 2).
    """
    from envbuild.models import Request, Targets
    from envbuild.resolver import resolve as resolve_stack

    all_hosts = list(hosts)
    if hosts_files:
        from envbuild.hostinfo import host_from_facts, load_facts_file

        for path in hosts_files:
            all_hosts.extend(host_from_facts(f) for f in load_facts_file(path))
    if host:
        from envbuild.errors import NoGpuError
        from envbuild.hostinfo import probe_host

        try:
            all_hosts.append(probe_host())
        except NoGpuError as err:
            raise NoGpuError(
                err.message,
                hint=f"{err.hint}; or resolve for other hosts by naming their GPUs and oldest "
                "driver: --gpu H100 --driver 570.124.06",
                fields=err.fields,
            ) from None
    if matrix is None:
        from envbuild.matrix import load_matrix

        matrix = load_matrix()
    request = Request(
        framework=framework,
        python=python,
        os=os_name,
        flavour=flavour,
        device="cpu" if cpu else "cuda",
        cuda=cuda,
        targets=Targets(gpus=tuple(gpus), driver=driver),
        compat="strict" if strict_compat else "minor",
        platform=platform,
        compile_extensions=compile_extensions,
    )
    return resolve_stack(request, matrix, all_hosts)


# --- lock ------------------------------------------------------------------------------------


def lock(
    *,
    image_dir: Path,
    check: bool = False,
    upgrade: bool = False,
    upgrade_packages: tuple[str, ...] = (),
    offline: bool = False,
    matrix_overlay: Path | None = None,
) -> LockOutcome:
    """`envbuild lock DIR`: write `DIR/envbuild.lock` (only when it changes); with `check`,
    verify it without network (StaleLockError, exit 1, when missing/stale/edited)."""
    from envbuild import lockfile

    if check:
        return lockfile.check_image(image_dir, matrix_overlay=matrix_overlay)
    return lockfile.lock_image(
        image_dir,
        upgrade=upgrade,
        upgrade_packages=upgrade_packages,
        offline=offline,
        matrix_overlay=matrix_overlay,
    )


# --- render ----------------------------------------------------------------------------------


def render(
    *,
    image_dir: Path,
    output: Path | None = None,
    context: Path | None = None,
    base_image: str | None = None,
    buildkit: bool = False,
    ca_cert: Path | None = None,
    index_url: str | None = None,
    find_links: Path | None = None,
) -> RenderResult:
    """`envbuild render`: the fresh lock's Dockerfile (never re-resolves; a stale lock raises
    StaleLockError with the command to run). Writes it to `output` atomically when given, and
    the whole build context to `context` (a folder, or a `.tar` file) when given."""
    from envbuild import render as rendering
    from envbuild.lockfile import load_fresh_text, write_atomic
    from envbuild.matrix import load_matrix

    ca = rendering.read_ca_cert(ca_cert) if ca_cert is not None else None
    options = rendering.check_options(
        rendering.RenderOptions(
            base_image=base_image,
            ca_cert=ca,
            index_url=index_url,
            find_links=find_links,
            buildkit=buildkit,
        )
    )
    _request, lock, lock_text = load_fresh_text(image_dir)
    dockerfile = rendering.render_dockerfile(
        lock, options=options, template_dir=image_dir, lock_text=lock_text
    )
    files = 0
    if context is not None:
        ctx = rendering.build_context(
            lock, lock_text, image_dir=image_dir, options=options, matrix=load_matrix()
        )
        _write_context(context, ctx)
        files = len(ctx)
    if output is not None:
        write_atomic(output, dockerfile)
    return rendering.RenderResult(
        dockerfile=dockerfile, output=output, context=context, context_files=files
    )


def _write_context(dest: Path, files: dict[str, bytes]) -> None:
    """A build context as a reproducible `.tar` file, or as a folder swapped in whole (a
    reader never sees half of it). An existing folder is only replaced when it is empty or an
    earlier context (Dockerfile + envbuild.lock at its root)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from envbuild.errors import UserError
    from envbuild.lockfile import write_atomic
    from envbuild.render import context_tar

    if dest.name.endswith(".tar"):
        write_atomic(dest, context_tar(files))
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        earlier = (dest / "Dockerfile").is_file() and (dest / "envbuild.lock").is_file()
        if not dest.is_dir() or (any(dest.iterdir()) and not earlier):
            raise UserError(
                f"{dest} exists and is not an earlier build context",
                hint="give a new or empty folder, or a path ending in .tar",
            )
    tmp_dir = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    tmp_dir.chmod(0o755)  # mkdtemp makes it private; a context folder is ordinary output
    for rel, data in files.items():
        target = tmp_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.old."))
        os.replace(dest, old / "ctx")
    os.replace(tmp_dir, dest)
    if old is not None:
        shutil.rmtree(old)


# --- image -----------------------------------------------------------------------------------


def build_image(
    *,
    image_dir: Path,
    tag: str | None = None,
    base_image: str | None = None,
    allow_cpu: bool = False,
    ca_cert: Path | None = None,
    find_links: Path | None = None,
    index_url: str | None = None,
    smoke_timeout: int | None = None,
    keep_failed: bool = False,
    buildkit: bool = False,
    progress: Callable[[str], None] | None = None,
    engine: ContainerEngine | None = None,
) -> ImageOutcome:
    """`envbuild image`: fresh lock -> render + context -> build -> smoke -> tag only on pass.

    Never re-resolves: a stale lock stops here with the command to run (StaleLockError).
    Raises GpuUnavailableError (7) before building when a GPU image cannot get a GPU,
    BuildError (5) / DiskFullError (3) / EngineError (4) from the engine, SmokeFailed (6).
    """
    from envbuild import image_job

    job, judge = image_job.prepare(
        image_dir=image_dir,
        tag=tag,
        base_image=base_image,
        allow_cpu=allow_cpu,
        ca_cert=ca_cert,
        find_links=find_links,
        index_url=index_url,
        smoke_timeout=smoke_timeout,
        keep_failed=keep_failed,
        buildkit=buildkit,
    )
    if engine is None:
        engine = image_job.make_engine(buildkit=buildkit)
    from envbuild.build import build_and_verify

    return build_and_verify(engine, job, judge=judge, progress=progress or (lambda _: None))


# --- smoke -----------------------------------------------------------------------------------

if TYPE_CHECKING:
    from typing import Any

    from envbuild.smoke import SmokeOutcome

SMOKE_GRACE_S = 60
"""Beyond the plan's timeout_s before the payload is killed: its own watchdog reports first."""


def smoke(
    *,
    allow_cpu: bool = False,
    plan_file: Path | None = None,
    lock_dir: Path | None = None,
    tier: int | None = None,
    python: str | None = None,
) -> SmokeOutcome:
    """`envbuild smoke`: run the smoke payload on this host and judge its report.

    The plan comes from `plan_file` (JSON, as written into images), from the lock in
    `lock_dir` (StaleLockError when stale), or, with neither, a bare plan (framework detected,
    no version expectations, the matrix's GPU baselines). The payload runs as a subprocess of
    `python` (default: this interpreter, which must import the framework). SmokeFailed (exit 6)
    when it gives no report; a report that says no is a verdict, not an error.
    """
    import sys

    from envbuild import smoke as smoke_mod
    from envbuild.errors import UserError

    if plan_file is not None and lock_dir is not None:
        raise UserError("--plan and --lock both name a plan", hint="pass one of them, not both")
    if tier is not None and tier not in (1, 2):
        raise UserError(f"--tier must be 1 or 2, not {tier}", hint="use --tier 1 or --tier 2")
    if plan_file is not None:
        plan = _read_plan(plan_file)
        if allow_cpu:
            plan["allow_cpu"] = True
        if tier is not None:
            plan["tier"] = tier
            plan["min_free_mib"] = smoke_mod.MIN_FREE_MIB[tier]
    else:
        from envbuild.matrix import load_matrix

        lock = None
        if lock_dir is not None:
            from envbuild.lockfile import load_fresh

            _, lock = load_fresh(lock_dir)
        plan = smoke_mod.plan(lock, allow_cpu=allow_cpu, matrix=load_matrix(), tier=tier)
    stdout, returncode = _run_payload(plan, python=python or sys.executable)
    report = smoke_mod.parse_report(stdout)
    verdict = smoke_mod.evaluate(report, plan)
    return smoke_mod.SmokeOutcome(plan=plan, report=report, verdict=verdict, returncode=returncode)


def _read_plan(path: Path) -> dict[str, Any]:
    import json

    from envbuild.errors import UserError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(
            f"cannot read the smoke plan {path}: {exc}",
            hint="pass --plan with a plan JSON (an image has it at /opt/envbuild/plan.json)",
        ) from None
    except json.JSONDecodeError as exc:
        raise UserError(
            f"the smoke plan {path} is not JSON: {exc}",
            hint="pass the plan.json envbuild wrote, or use --lock DIR instead",
        ) from None
    if not isinstance(data, dict):
        raise UserError(
            f"the smoke plan {path} is not a JSON object", hint="pass the plan.json envbuild wrote"
        )
    return data


def _run_payload(plan: dict[str, Any], *, python: str) -> tuple[str, int]:
    """Run `python <payload dir> --plan <tmp>`; (stdout, returncode). Its stderr table is
    captured and shown only when it gives no report (the CLI prints the verdict's table)."""
    import json
    import subprocess
    import tempfile
    from pathlib import Path

    from envbuild.errors import SmokeFailed
    from envbuild.resources import payload_dir

    timeout_s = int(plan.get("timeout_s", 600)) + SMOKE_GRACE_S
    with tempfile.TemporaryDirectory(prefix="envbuild-smoke-") as tmp:
        plan_path = Path(tmp) / "plan.json"
        plan_path.write_text(json.dumps(plan, sort_keys=True, indent=2) + "\n", encoding="utf-8")
        cmd = [python, str(payload_dir()), "--plan", str(plan_path)]
        if plan.get("allow_cpu"):
            cmd.append("--allow-cpu")
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise SmokeFailed(
                f"the smoke payload gave no verdict in {timeout_s} s and was killed",
                hint="a GPU call or collective hung: check `nvidia-smi` for stuck processes",
            ) from None
        except OSError as exc:
            raise SmokeFailed(
                f"cannot start {python}: {exc.strerror}",
                hint="run envbuild from the Python environment that has the framework",
            ) from None
    if "ENVBUILD-SMOKE-REPORT " not in proc.stdout:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        raise SmokeFailed(
            f"the smoke payload exited {proc.returncode} without a report",
            hint=f"its last output:\n{tail}" if tail else "run it by hand to see why",
            fields={"returncode": proc.returncode},
        )
    return proc.stdout, proc.returncode


# --- doctor / validate -----------------------------------------------------------------------

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Literal

    from envbuild.doctor import DoctorReport
    from envbuild.models import Lock
    from envbuild.validate import Check, FleetResult, ValidateResult


def _host_facts(facts_file: Path | None) -> dict[str, Any]:
    """This host's facts: from a recorded file (ENVBUILD_HOST_FACTS, one host) when given,
    else probed through NVML."""
    from envbuild import hostinfo
    from envbuild.errors import UserError

    if facts_file is None:
        return hostinfo.probe_facts()
    hosts = hostinfo.load_facts_file(facts_file)
    if len(hosts) != 1:
        raise UserError(
            f"{facts_file} holds {len(hosts)} hosts; this command checks one",
            hint="give a file with one host's facts, or check a fleet with "
            f"`envbuild validate --hosts {facts_file}`",
        )
    return hosts[0]


def _read_lock_dir(image_dir: Path) -> tuple[str, Lock]:
    """(label, lock) of an image folder's envbuild.lock; UserError when there is none."""
    from envbuild.errors import UserError
    from envbuild.lockfile import loads, lock_path, read_lock_text

    text = read_lock_text(image_dir)
    if text is None:
        raise UserError(
            f"{image_dir} has no envbuild.lock",
            hint=f"lock it first: envbuild lock {image_dir}",
        )
    return str(image_dir), loads(text, path=str(lock_path(image_dir)))


def locks_in_reach(root: Path) -> list[tuple[str, Path]]:
    """`./envbuild.lock` and `images/*/envbuild.lock` under `root`, sorted (doctor, fleet)."""
    found = []
    if (root / "envbuild.lock").is_file():
        found.append((".", root))
    for path in sorted((root / "images").glob("*/envbuild.lock")):
        found.append((f"images/{path.parent.name}", path.parent))
    return found


def doctor(*, facts_file: Path | None = None, root: Path | None = None) -> DoctorReport:
    """`envbuild doctor`: probe this host (or read recorded facts), check it, and tell which
    locks in reach would run here. NoGpuError (exit 2) when there is no NVIDIA driver."""
    from pathlib import Path as _Path

    from envbuild import doctor as doc
    from envbuild.errors import EnvbuildError

    facts = _host_facts(facts_file)
    locks: list[tuple[str, Lock]] = []
    unreadable: list[doc.Finding] = []
    for label, folder in locks_in_reach(root or _Path.cwd()):
        try:
            locks.append((label, _read_lock_dir(folder)[1]))
        except EnvbuildError as err:
            unreadable.append(
                doc.Finding(f"lock {label}", "info", f"cannot read: {err.message}", err.hint)
            )
    rules = None
    if locks:
        from envbuild.archs import ArchRules
        from envbuild.matrix import load_matrix

        rules = ArchRules.from_archs(load_matrix().archs)
    findings = doc.check_host(facts, locks=locks, rules=rules) + unreadable
    return doc.DoctorReport(facts=facts, findings=tuple(findings))


def validate(
    *,
    target: str,
    facts_file: Path | None = None,
    junit: Path | None = None,
    engine: ContainerEngine | None = None,
) -> ValidateResult:
    """`envbuild validate IMAGE_OR_DIR`: pre-flight the lock against this host (pure, nothing
    started); for an image that passes, run its smoke payload here and give one verdict."""
    from pathlib import Path as _Path

    from envbuild import validate as v
    from envbuild.hostinfo import host_from_facts

    folder = _Path(target)
    kind: Literal["image", "dir"]
    if folder.is_dir():
        label, lock = _read_lock_dir(folder)
        kind = "dir"
    else:
        from envbuild import image_job
        from envbuild.build import LOCK_LABEL
        from envbuild.errors import UserError
        from envbuild.lockfile import loads

        if engine is None:
            engine = image_job.make_engine(buildkit=False)
        labels = engine.image_labels(target)
        text = labels.get(LOCK_LABEL)
        if not text:
            raise UserError(
                f"image {target} carries no {LOCK_LABEL} label: it was not built by envbuild",
                hint="validate the image folder instead (envbuild validate images/<name>), or "
                "rebuild the image with `envbuild image images/<name>`",
            )
        label, lock, kind = target, loads(text, path=f"{target} (label {LOCK_LABEL})"), "image"
    facts = _host_facts(facts_file)
    host = host_from_facts(facts)
    from envbuild.archs import ArchRules
    from envbuild.matrix import load_matrix

    # Tegra and renamed archs (Jetson, Thor) come from the matrix, as in the resolver.
    rules = ArchRules.from_archs(load_matrix().archs)
    pre = v.preflight(lock, host, facts=facts, lock_label=label, rules=rules)
    smoke: tuple[v.Check, ...] = ()
    if kind == "dir":
        smoke = (
            v.Check(
                "smoke",
                "skip",
                "a folder: pre-flight only",
                "pass the built image (envbuild validate IMAGE) to run its smoke test here",
            ),
        )
    elif not pre.ok:
        smoke = (v.Check("smoke", "skip", "not run: the pre-flight failed"),)
    else:
        assert engine is not None
        smoke = _run_smoke(engine, target, lock)
    result = v.ValidateResult(target=label, kind=kind, host=host.name, preflight=pre, smoke=smoke)
    if junit is not None:
        from envbuild.lockfile import write_atomic

        write_atomic(junit, v.junit_xml([(f"envbuild.validate.{label}", result.checks)]))
    return result


def _run_smoke(engine: ContainerEngine, image: str, lock: Lock) -> tuple[Check, ...]:
    """Run the image's smoke payload on this host's GPUs; its checks as validate checks."""
    from envbuild import validate as v
    from envbuild.build import ROLE_LABEL, shm_mib_for, smoke_command
    from envbuild.engine import RunSpec, gpu_missing_message
    from envbuild.errors import SmokeFailed
    from envbuild.image_job import make_judge, needs_gpu
    from envbuild.matrix import load_matrix
    from envbuild.smoke import plan as smoke_plan

    engine.ping()
    gpu = needs_gpu(lock)
    if gpu and not engine.has_nvidia_runtime():
        message, hint = gpu_missing_message()
        return (v.Check("engine-gpu", "fail", message, hint),)
    plan = smoke_plan(lock, allow_cpu=False, matrix=load_matrix())
    spec = RunSpec(
        image=image,
        command=smoke_command(allow_cpu=False),
        gpus=gpu,
        shm_size=f"{shm_mib_for(lock.smoke.min_shm_mib)}m",
        timeout_s=lock.smoke.timeout_s,
        labels={ROLE_LABEL: "smoke"},
    )
    result = engine.run(spec)
    if result.timed_out:
        return (
            v.Check(
                "smoke",
                "fail",
                f"the smoke payload did not finish in {lock.smoke.timeout_s} s",
                "run it by hand with NCCL_DEBUG=INFO: docker run --rm --gpus all "
                f"{image} {' '.join(smoke_command(allow_cpu=False))}",
            ),
        )
    try:
        judgement = make_judge(plan)(result)
    except (ValueError, SmokeFailed) as exc:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:])
        return (
            v.Check(
                "smoke",
                "fail",
                f"the payload printed no report (exit {result.exit_code}): {exc}; {tail}",
                "rebuild the image with `envbuild image`; if it persists, report the stderr",
            ),
        )
    return v.smoke_checks(judgement.report, judgement.ok, judgement.failed, judgement.summary)


def validate_fleet(
    *,
    hosts_file: Path,
    lock_dirs: Sequence[Path] = (),
    k8s_job: Path | None = None,
    image: str | None = None,
    gpus_per_pod: int | None = None,
    junit: Path | None = None,
    root: Path | None = None,
) -> FleetResult:
    """`envbuild validate --hosts FILE`: which locks run on which recorded hosts, and why not;
    nothing is started. With `k8s_job`, also writes a Job manifest that smoke-tests `image`
    on every host of the file that passes the pre-flight; with `junit`, JUnit XML of the view
    (one suite per lock and host, one testcase per check)."""
    from pathlib import Path as _Path

    from envbuild import validate as v
    from envbuild.errors import UserError
    from envbuild.hostinfo import host_from_facts, load_facts_file
    from envbuild.lockfile import write_atomic

    facts_list = load_facts_file(hosts_file)
    hosts = [(host_from_facts(f), f) for f in facts_list]
    if lock_dirs:
        locks = [_read_lock_dir(d) for d in lock_dirs]
    else:
        locks = [
            (label, _read_lock_dir(folder)[1])
            for label, folder in locks_in_reach(root or _Path.cwd())
        ]
        if not locks:
            raise UserError(
                "no locks to check: no images/*/envbuild.lock here",
                hint="pass one or more --lock DIR (an image folder with an envbuild.lock)",
            )
    view = v.fleet_view(locks, hosts)
    manifest = None
    if k8s_job is not None:
        if image is None or len(locks) != 1:
            raise UserError(
                "--k8s-job needs the image to run (--image REF) and exactly one --lock DIR, "
                "the folder that image was built from",
                hint="envbuild validate --hosts hosts.jsonl --lock images/torch-train "
                "--image registry/team/torch:tag --k8s-job job.yaml",
            )
        label, lock = locks[0]
        fits = [h for h in view.hosts if view.result(label, h).ok]
        counts = [view.gpu_counts[h] for h in fits if view.gpu_counts[h] > 0]
        if not fits:
            raise UserError(
                f"no host in {hosts_file} passes the pre-flight of {label}: no Job written",
                hint="see the table above for why; fix the hosts or re-lock for them",
            )
        job = v.k8s_job(
            image=image,
            name=lock.name or label,
            gpus_per_pod=gpus_per_pod or (min(counts) if counts else 1),
            pods=len(fits),
            smoke_timeout_s=lock.smoke.timeout_s,
        )
        manifest = v.to_yaml(job)
        write_atomic(k8s_job, manifest)
    if junit is not None:
        suites = [(f"envbuild.validate.{r.lock}@{r.host}", r.checks) for r in view.results]
        write_atomic(junit, v.junit_xml(suites))
    return v.FleetResult(view=view, manifest_path=k8s_job, manifest=manifest)


# --- matrix ----------------------------------------------------------------------------------

# matrix refresh (issue 10): the only command that reads the network for the matrix.

if TYPE_CHECKING:
    from envbuild.pypi import Fetcher
    from envbuild.refresh import RefreshResult


def matrix_refresh(
    *,
    sources: tuple[str, ...] = ("pypi", "pytorch-index", "registry"),
    frameworks: tuple[str, ...] = ("torch", "jax", "tensorflow"),
    dry_run: bool = False,
    matrix_dir: Path | None = None,
    today: str | None = None,
    fetcher: Fetcher | None = None,
) -> RefreshResult:
    """Fetch the selected sources, derive rows, append new release rows to
    `<matrix_dir>/<framework>.toml` (unless dry_run), and report the rest. Unreachable sources
    are skipped; SourceUnreachableError (exit 3) when none could be read."""
    import dataclasses
    import datetime

    from envbuild import pypi, refresh
    from envbuild.errors import MatrixError, SourceUnreachableError
    from envbuild.lockfile import write_atomic
    from envbuild.matrix import collect, read_matrix_files
    from envbuild.resources import matrix_dir as default_matrix_dir

    folder = matrix_dir if matrix_dir is not None else default_matrix_dir()
    files = read_matrix_files(folder, label=folder.name) if folder.is_dir() else {}
    matrix, problems_before, _ = collect(files)
    fetcher = fetcher if fetcher is not None else pypi.Fetcher()
    seen = today or datetime.datetime.now(datetime.timezone.utc).date().isoformat()

    derived: list[refresh.Derived] = []
    ok: list[str] = []
    failed: list[tuple[str, str]] = []
    if "pypi" in sources:
        # One project that cannot be read (a 404, a timeout) skips that project, not PyPI.
        channels = []
        for fw in frameworks:
            for ch in refresh.CHANNELS[fw]:
                try:
                    since = refresh.since_for(fw, matrix)
                    channels.append(pypi.gather_channel(fetcher, ch, since=since))
                except SourceUnreachableError as err:
                    failed.append((f"pypi ({ch.project})", err.message))
        if channels:
            try:
                runtime_pins = pypi.gather_runtime_pins(fetcher, channels)
            except SourceUnreachableError as err:
                failed.append((f"pypi ({refresh.TOOLKIT_PROJECT})", err.message))
                runtime_pins = {}
            derived += [
                refresh.derive_channel(c, runtime_pins=runtime_pins, seen=seen) for c in channels
            ]
            ok.append("pypi")
    if "pytorch-index" in sources and "torch" in frameworks:
        try:
            page = pypi.pytorch_index_page(fetcher, None, "torch")
            files_ = refresh.parse_simple_html(page.text(), page.url)
            variants = refresh.index_variants(files_)
            derived.append(
                refresh.Derived(findings=refresh.variant_findings("torch", variants, matrix))
            )
            ok.append("pytorch-index")
        except SourceUnreachableError as err:
            failed.append(("pytorch-index", err.message))
    if "registry" in sources:
        try:
            _url, tags = pypi.docker_hub_tags(fetcher, "nvidia/cuda")
            families = refresh.cuda_tag_families(tags)
            derived.append(refresh.Derived(findings=refresh.image_findings(families, matrix)))
            ok.append("registry")
        except SourceUnreachableError as err:
            failed.append(("registry", err.message))
    if not ok:
        raise SourceUnreachableError(
            "no source could be read: " + "; ".join(f"{s}: {m}" for s, m in failed),
            hint="check the network or proxy (HTTPS_PROXY) and rerun `envbuild matrix refresh`",
            fields={"sources_failed": dict(failed)},
        )
    plan = dataclasses.replace(
        refresh.plan_changes(matrix, derived),
        warnings=tuple(f"{s}: {m}" for s, m in failed),
    )

    # New release rows go to <framework>.toml, appended after the existing text.
    new_texts: dict[str, str] = {}
    for fw in frameworks:
        rows = [r for r in plan.new_releases if r.framework == fw]
        if not rows:
            continue
        name = f"{folder.name}/{fw}.toml"
        old = files.get(name, refresh.new_framework_file(fw))
        new_texts[name] = refresh.append_rows(old, "release", rows)
    if new_texts:
        _, problems_after, _ = collect({**files, **new_texts})
        introduced = sorted(set(problems_after) - set(problems_before))
        if introduced:
            raise MatrixError(
                f"refresh would make the matrix invalid: {introduced[0]}",
                hint="nothing was written; report this with `envbuild matrix refresh --dry-run "
                "--json` output",
                fields={"problems": introduced},
            )
    written: list[str] = []
    if not dry_run:
        for name, text in sorted(new_texts.items()):
            path = folder / name.split("/", 1)[1]
            write_atomic(path, text)
            written.append(str(path))
    return refresh.RefreshResult(plan, tuple(written), dry_run, tuple(ok), tuple(failed))


if TYPE_CHECKING:
    from envbuild.matrix import MatrixReport


def matrix_check(*, overlay: Path | None = None) -> MatrixReport:
    """Validate the built-in matrix merged with the overlay (argument, else
    ENVBUILD_MATRIX_OVERLAY). Problems come back in the report (the command exits 1);
    MatrixError (exit 2) for an unreadable, non-UTF-8 or invalid-TOML file."""
    from envbuild.matrix import check_files, load_sources

    built_in, extra = load_sources(overlay)
    return check_files(built_in, extra)
