"""The `envbuild validate` use cases: one image or folder against this host (pre-flight, then
its smoke payload here), or the locks in reach against a file of recorded hosts (a fleet
view, optionally a Kubernetes Job and JUnit XML). The decisions are `envbuild.preflight.validate`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envbuild import matrix as matrix_data
from envbuild.app import evidence, inputs
from envbuild.app.smoke import run_in_image
from envbuild.build.pipeline import LOCK_LABEL, LOCK_SHA_LABEL
from envbuild.core.collector import cyclic_collector_paused
from envbuild.core.documents import DocumentError, json_loads
from envbuild.core.errors import EnvbuildError, SmokeFailed, UserError
from envbuild.core.fsio import read_input, write_output
from envbuild.core.models import Host, Lock
from envbuild.core.values import image_ref_problem
from envbuild.engine.protocol import ContainerEngine, RunResult, kept_container_note
from envbuild.host.gpu_attach import GpuChoice, unavailable_message
from envbuild.host.probe import host_from_facts, load_facts_file
from envbuild.lock.format import loads
from envbuild.payload.smoke_checks import SmokePlan
from envbuild.preflight import doctor as rules_of_doctor
from envbuild.preflight import reports
from envbuild.preflight import validate as rules_of_validate
from envbuild.preflight.fleet import FleetResult, FleetView, fleet_view
from envbuild.preflight.validate import Check, ValidateResult
from envbuild.smoke import plan as smoke
from envbuild.smoke.attestation import unproven
from envbuild.smoke.container import limits_for, smoke_container
from envbuild.smoke.fit import Peak, peak_of


@dataclass(frozen=True)
class Proof:
    """`--evidence`: the image's signed attestations, and the keys that may have signed them.
    A host whose GPU classes and driver branch a verified pass covers is "proven here before"
    and the smoke is not run again (unless `resmoke`)."""

    bundles: tuple[Path, ...]
    keys: tuple[Path, ...]
    resmoke: bool = False


def validate(
    *,
    target: str,
    facts_file: Path | None = None,
    junit: Path | None = None,
    engine: ContainerEngine | None = None,
    matrix_overlay: Path | None = None,
    gpu_attach: GpuChoice | None = None,
    proof: Proof | None = None,
) -> ValidateResult:
    """`envbuild validate IMAGE_OR_DIR`: pre-flight the lock against this host (pure, nothing
    started); for an image that passes, run its smoke payload here and give one verdict.
    With `junit`, the JUnit XML is written whatever happens: an error becomes a failed case."""
    try:
        result = _validate(target, facts_file, engine, matrix_overlay, gpu_attach, proof)
    except EnvbuildError as err:
        if junit is not None:
            _write_junit_error(junit, f"envbuild.validate.{target}", err)
        raise
    if junit is not None:
        write_output(
            junit,
            reports.junit_xml([(f"envbuild.validate.{result.target}", result.checks)]),
            what="--junit",
        )
    return result


def _write_junit_error(junit: Path, suite: str, err: EnvbuildError) -> None:
    """CI asked for a report: the error that stopped validate, as one failed test case."""
    check = Check("error", "fail", err.message, err.hint)
    write_output(junit, reports.junit_xml([(suite, (check,))]), what="--junit")


def _validate(
    target: str,
    facts_file: Path | None,
    engine: ContainerEngine | None,
    matrix_overlay: Path | None,
    attach: GpuChoice | None = None,
    proof: Proof | None = None,
) -> ValidateResult:
    label, lock, kind, engine = _target_lock(target, engine)
    if proof is not None and kind != "image":
        raise UserError(
            "--evidence proves a built image, not a folder",
            hint="validate the image: envbuild validate IMAGE --evidence FILE --key PUB",
        )
    facts = inputs.host_facts(facts_file)
    matrix = matrix_data.load_matrix_from(matrix_overlay)
    host = host_from_facts(facts, gpu_cc=rules_of_validate.gpu_cc_of(matrix))
    pre = rules_of_validate.preflight(lock, host, facts=facts, lock_label=label, matrix=matrix)
    smoke_part: tuple[Check, ...]
    report: dict[str, Any] | None = None
    if kind == "dir":
        smoke_part = (
            Check(
                "smoke",
                "skip",
                "a folder: pre-flight only",
                "pass the built image (envbuild validate IMAGE) to run its smoke test here",
            ),
        )
    elif not pre.ok:
        smoke_part = (Check("smoke", "skip", "not run: the pre-flight failed"),)
    else:
        assert engine is not None
        proven: tuple[Check, ...] = ()
        if proof is not None:
            proven = _proven(engine, target, host, proof)
        if proven and proven[0].status == "pass":
            smoke_part = proven
        else:
            smoke_part, report = _run_smoke(
                engine, target, lock, matrix_overlay, attach or GpuChoice()
            )
            smoke_part = proven + smoke_part
    return ValidateResult(
        target=label,
        kind=kind,
        host=host.name,
        preflight=pre,
        smoke=smoke_part,
        environment=_environment(facts),
        smoke_report=report,
    )


def _proven(engine: ContainerEngine, image: str, host: Host, proof: Proof) -> tuple[Check, ...]:
    """Was this image proven on this host's GPU classes and driver branch before? Its
    attestations verified (any failure is its own error: a forged one is never trusted)."""
    image_id = engine.image_ids(image, pull=False)[0]
    lock_sha = engine.image_labels(image).get(LOCK_SHA_LABEL)
    verified = evidence.verify(
        bundles=proof.bundles, keys=proof.keys, digest=image_id, lock_sha256=lock_sha
    )
    gpus = [(g.name, g.cc) for g in host.gpus] or [("cpu", "")]
    missing = unproven(verified.proven_on, gpus, host.driver)
    if not missing and not proof.resmoke:
        classes = ", ".join(sorted({f"{n} (cc {c})" for n, c in gpus}))
        return (
            Check("proven", "pass", f"proven here before: {classes}, driver {host.driver}"),
            Check("smoke", "skip", "not run again: a signed pass covers this host", "--resmoke"),
        )
    why = "not yet proven on this GPU class: " + ", ".join(missing) if missing else "--resmoke"
    return (Check("proven", "skip", why + ": running the smoke"),)


def _environment(facts: dict[str, Any]) -> tuple[Check, ...]:
    """doctor's engine and GPU-runtime findings over the same facts, as checks that report
    ("pass" when fine, else "skip" with doctor's next step) without deciding the verdict."""
    return tuple(
        Check(f.name, "pass" if f.status == "ok" else "skip", f.detail, f.next_step)
        for f in rules_of_doctor.check_host(facts)
        if f.name in ("engine", "gpu-runtime", "cdi")
    )


def _is_path(target: str) -> bool:
    """Does the user mean a folder? A path-looking target is never asked of the engine."""
    return (
        target.startswith(("/", "./", "../", "~")) or target.endswith("/") or target in (".", "..")
    )


def _target_lock(
    target: str, engine: ContainerEngine | None
) -> tuple[str, Lock, Literal["image", "dir"], ContainerEngine | None]:
    """(label, lock, kind, engine) of IMAGE_OR_DIR: a folder's envbuild.lock, or the lock an
    image carries. A missing folder says so instead of "no image ... in the engine"."""
    folder = Path(target)
    if folder.is_dir():
        label, lock = inputs.read_lock_dir(folder)
        return label, lock, "dir", engine
    where = "give an image folder (envbuild validate images/<name>) or an image built by envbuild"
    if folder.exists():
        raise UserError(f"{target} is a file, not an image folder or an image", hint=where)
    if _is_path(target):
        raise UserError(f"{target} does not exist", hint=where)
    if engine is None:
        engine = inputs.make_engine(buildkit=False)
    if not engine.image_exists(target) and folder.parent.is_dir() and str(folder.parent) != ".":
        raise UserError(
            f"no folder {target} here, and no image {target} in the engine",
            hint=f"{where}; `ls {folder.parent}` lists what is there",
        )
    return target, _lock_of_image(engine, target), "image", engine


def _lock_of_image(engine: ContainerEngine, image: str) -> Lock:
    """The lock an envbuild image carries in its label (UserError when it has none)."""
    text = engine.image_labels(image).get(LOCK_LABEL)
    if not text:
        raise UserError(
            f"image {image} carries no {LOCK_LABEL} label: it was not built by envbuild",
            hint="validate the image folder instead (envbuild validate images/<name>), or "
            "rebuild the image with `envbuild image images/<name>`",
        )
    return loads(text, path=f"{image} (label {LOCK_LABEL})")


def _run_smoke(
    engine: ContainerEngine,
    image: str,
    lock: Lock,
    matrix_overlay: Path | None,
    attach: GpuChoice,
) -> tuple[tuple[Check, ...], dict[str, Any] | None]:
    """Run the image's smoke payload on this host's GPUs, attached the way `gpu_attach` says
    (as `envbuild image` does); its checks as validate checks, after the way used, and the
    payload's report (None when it printed none)."""
    engine.ping()
    attached: tuple[Check, ...] = ()
    way = None
    if lock.is_gpu:
        way = engine.gpu_attach(want=attach.want, devices=attach.devices)
        if not way.ok:
            message, hint = unavailable_message(way)
            return (Check("engine-gpu", "fail", message, hint),), None
        used = f"{way.way} ({', '.join(way.devices)}): {way.reason}"
        attached = (Check("gpu-attach", "pass", used),)
    plan = smoke.plan(lock, allow_cpu=False, matrix=matrix_data.load_matrix_from(matrix_overlay))
    result = run_in_image(engine, image, lock, attach=way)
    checks, report = _smoke_checks(result, image, lock, plan)
    if result.left_behind:
        # The image may be fine; the engine that keeps its containers is not.
        note = kept_container_note(result.left_behind)
        checks += (Check("smoke-container", "fail", note, "remove it, then validate again"),)
    return attached + checks, report


def _smoke_checks(
    result: RunResult, image: str, lock: Lock, plan: SmokePlan
) -> tuple[tuple[Check, ...], dict[str, Any] | None]:
    """The payload's output as validate checks, and its report."""
    if result.timed_out:
        command = " ".join(smoke.payload_command(allow_cpu=False))
        killed_at = limits_for(lock.smoke).kill_after_s
        return (
            Check(
                "smoke",
                "fail",
                f"the smoke payload did not finish in {killed_at} s",
                f"run it by hand with NCCL_DEBUG=INFO: docker run --rm --gpus all {image} {command}",
            ),
        ), None
    try:
        judgement = smoke.judge(result.stdout, plan)
    except (ValueError, SmokeFailed) as exc:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:])
        return (
            Check(
                "smoke",
                "fail",
                f"the payload printed no report (exit {result.exit_code}): {exc}; {tail}",
                "rebuild the image with `envbuild image`; if it persists, report the stderr",
            ),
        ), None
    checks = rules_of_validate.smoke_checks(
        judgement.report, judgement.ok, judgement.failed, judgement.summary
    )
    return checks, dict(judgement.report)


def validate_fleet(
    *,
    hosts_file: Path,
    lock_dirs: Sequence[Path] = (),
    k8s_job: Path | None = None,
    image: str | None = None,
    gpus_per_pod: int | None = None,
    junit: Path | None = None,
    root: Path | None = None,
    matrix_overlay: Path | None = None,
    smoke_report: Path | None = None,
) -> FleetResult:
    """`envbuild validate --hosts FILE`: which locks run on which recorded hosts, and why not;
    nothing is started. With `k8s_job`, also writes one Kubernetes Job per host that passes,
    pinned to it, that smoke-tests `image` there; with `junit`, JUnit XML of the view (one
    suite per lock and host, one testcase per check), written whatever happens. With
    `smoke_report` (a smoke report JSON), hosts whose GPUs cannot hold its peak memory are
    marked and get no Job."""
    try:
        peak = _peak(smoke_report)
        # One result per host stays alive until printed: envbuild/core/collector.py says why.
        with cyclic_collector_paused():
            fleet = _fleet(
                hosts_file, lock_dirs, k8s_job, image, gpus_per_pod, root, matrix_overlay, peak
            )
    except EnvbuildError as err:
        if junit is not None:
            _write_junit_error(junit, f"envbuild.validate.{hosts_file}", err)
        raise
    if junit is not None:
        suites = [(f"envbuild.validate.{r.lock}@{r.host}", r.checks) for r in fleet.view.results]
        write_output(junit, reports.junit_xml(suites), what="--junit")
    return fleet


def _fleet(
    hosts_file: Path,
    lock_dirs: Sequence[Path],
    k8s_job: Path | None,
    image: str | None,
    gpus_per_pod: int | None,
    root: Path | None,
    matrix_overlay: Path | None,
    peak: Peak | None = None,
) -> FleetResult:
    matrix = matrix_data.load_matrix_from(matrix_overlay)
    gpu_cc = rules_of_validate.gpu_cc_of(matrix)
    hosts = [(host_from_facts(f, gpu_cc=gpu_cc), f) for f in load_facts_file(hosts_file)]
    if lock_dirs:
        locks = [inputs.read_lock_dir(d) for d in lock_dirs]
    else:
        locks = [
            (label, inputs.read_lock_dir(folder)[1])
            for label, folder in inputs.locks_in_reach(root or Path.cwd())
        ]
        if not locks:
            raise UserError(
                "no locks to check: no images/*/envbuild.lock here",
                hint="pass one or more --lock DIR (an image folder with an envbuild.lock)",
            )
    view = fleet_view(locks, hosts, matrix=matrix, peak=peak)
    if k8s_job is None:
        return FleetResult(view=view)
    jobs = _jobs(view, locks, hosts_file, image, gpus_per_pod)
    manifest = reports.to_yaml_documents(jobs)
    write_output(k8s_job, manifest, what="--k8s-job")
    nodes = tuple(
        (j["metadata"]["name"], j["metadata"]["annotations"]["envbuild.node"]) for j in jobs
    )
    return FleetResult(view=view, manifest_path=k8s_job, manifest=manifest, jobs=nodes)


def _peak(path: Path | None) -> Peak | None:
    """The peak memory of a smoke report file: the report itself, or the `--json` output of
    `envbuild smoke` / `envbuild image` that holds it under "report" / "smoke"."""
    if path is None:
        return None
    try:
        text = read_input(path, what="--smoke-report")
    except FileNotFoundError:
        raise UserError(f"--smoke-report {path} does not exist") from None
    try:
        doc = json_loads(text)
    except DocumentError as exc:
        raise UserError(f"--smoke-report {path} is not JSON: {exc}") from None
    if isinstance(doc, dict):
        for key in ("report", "smoke"):
            if isinstance(doc.get(key), dict) and "metrics" in doc[key]:
                doc = doc[key]
    peak = peak_of(doc if isinstance(doc, dict) else None)
    if peak is None:
        raise UserError(
            f"--smoke-report {path} has no peak device memory (metrics.torch_memory or "
            "metrics.nvml)",
            hint="give the report of a GPU smoke run (envbuild smoke --json, or the image's "
            "envbuild.smoke.report label)",
        )
    return peak


def _jobs(
    view: FleetView,
    locks: Sequence[tuple[str, Lock]],
    hosts_file: Path,
    image: str | None,
    gpus_per_pod: int | None,
) -> list[dict[str, Any]]:
    """One Kubernetes Job per host that passes, pinned to it, that smoke-tests `image`."""
    if image is None or len(locks) != 1:
        raise UserError(
            "--k8s-job needs the image to run (--image REF) and exactly one --lock DIR, "
            "the folder that image was built from",
            hint="envbuild validate --hosts hosts.jsonl --lock images/torch-train "
            "--image registry/team/torch:tag --k8s-job job.yaml",
        )
    problem = image_ref_problem(image)
    if problem is not None:
        shown = (
            repr(image) if len(image) <= 200 else f"{image[:120]!r}... ({len(image)} characters)"
        )
        raise UserError(
            f"--image {shown}: {problem}",
            hint="give the image the Job runs as `docker push` named it, e.g. "
            "registry.example.com/team/torch:1",
            fields={"image": image[:200]},
        )
    label, lock = locks[0]
    fits = view.passing(label)
    if not fits:
        raise UserError(
            f"no host in {hosts_file} passes the pre-flight of {label}: no Job written",
            hint="see the table above for why; fix the hosts or re-lock for them",
        )
    nodes: dict[str, str] = {}  # node name -> the first host entry of that node
    for host in fits:
        nodes.setdefault(_node_of(view, host, hosts_file), host)
    name = lock.name or label
    # The Job's container is the one `validate` runs here, without this shell's NCCL settings
    # (the manifest must not depend on who wrote it).
    container = smoke_container(
        image, limits_for(lock.smoke), allow_cpu=False, attach=None, environ={}
    )
    return [
        reports.k8s_job(
            smoke=container,
            name=name,
            job_name=job_name,
            node=node,
            gpus=gpus_per_pod or max(view.gpu_counts[host], 1),
        )
        for job_name, (node, host) in zip(
            reports.job_names(name, list(nodes)), nodes.items(), strict=True
        )
    ]


def _node_of(view: FleetView, host: str, hosts_file: Path) -> str:
    """The kubernetes.io/hostname value of a host entry: its recorded hostname, lowercased as
    the kubelet sets the label."""
    node = view.nodes.get(host, "").strip().lower()
    if not node:
        raise UserError(
            f"host {host} in {hosts_file} has no name: a Job cannot be pinned to it",
            hint='add "name": "<its Kubernetes node name>" to its facts (`envbuild doctor '
            "--json` records the hostname)",
        )
    if not reports.node_label_ok(node):
        raise UserError(
            f"host name {node!r} in {hosts_file} cannot be a kubernetes.io/hostname value",
            hint="use the node's name as `kubectl get nodes` shows it (at most 63 characters)",
        )
    return node
