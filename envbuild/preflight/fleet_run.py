"""What a fleet smoke run found, read back (pure): per node and GPU class, passed, failed (the
failed check and its fix), never scheduled (no node matched, and which requirement), never
started (image pull, deadline), evicted, or still pending.

Two sources give the same view: the Jobs and Pods of a Kubernetes run (`kubectl get jobs,pods
-l envbuild.run=RUN -o json`, each container's verdict in its termination message), and the run
folder of a Slurm run (one verdict file and one exit code per node, `templates/slurm/`). The
verdict is the payload's (`envbuild.payload.smoke_checks.verdict_of`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envbuild.core.documents import DocumentError, json_loads
from envbuild.payload.smoke_checks import VERDICT_SCHEMA
from envbuild.preflight.validate import Check

STATUSES = ("passed", "failed", "never_scheduled", "never_started", "evicted", "pending")
RUN_LABEL = "envbuild.run"
CLASS_LABEL = "envbuild.gpu-class"
REQUIRES_ANNOTATION = "envbuild.requires"
"""On each Job: the node requirements its selector spells (for "no node matched ...")."""

# Container waiting reasons that mean the smoke never started (kubelet's, pkg/kubelet/images
# and kuberuntime: ErrImagePull, ImagePullBackOff, InvalidImageName, CreateContainerError ...).
_NOT_STARTED = {
    "ErrImagePull": "the node cannot pull the image: check the digest, the registry's "
    "address from the node and imagePullSecrets",
    "ImagePullBackOff": "the node cannot pull the image: check the digest, the registry's "
    "address from the node and imagePullSecrets",
    "InvalidImageName": "the image reference is malformed: use REGISTRY/REPO@sha256:...",
    "CreateContainerConfigError": "a Secret or ConfigMap the pod names is missing",
    "CreateContainerError": "the runtime could not create the container: "
    "`kubectl describe pod` says why",
    "RunContainerError": "the runtime could not start the container (GPU runtime class, "
    "device plugin): `kubectl describe pod`",
}


@dataclass(frozen=True)
class NodeResult:
    node: str
    """The node it ran on; "" when it was never scheduled."""
    gpu_class: str
    status: str
    """One of STATUSES."""
    check: str = ""
    """The failed check, or the reason (Unschedulable, ErrImagePull, Evicted, ...)."""
    detail: str = ""
    fix: str = ""
    job: str = ""
    """The Kubernetes Job (or Pod), or the Slurm job id."""
    exit_code: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node": self.node,
            "gpu_class": self.gpu_class,
            "status": self.status,
        }
        for key in ("check", "detail", "fix", "job"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.exit_code is not None:
            out["exit_code"] = self.exit_code
        return out


@dataclass(frozen=True)
class FleetRun:
    """The fleet view of one run."""

    run: str
    source: str
    """"kubernetes" or "slurm"."""
    nodes: tuple[NodeResult, ...]

    @property
    def ok(self) -> bool:
        return bool(self.nodes) and all(n.status == "passed" for n in self.nodes)

    def classes(self) -> dict[str, Counter[str]]:
        """GPU class -> how many nodes ended in each status (sorted by class)."""
        out: dict[str, Counter[str]] = {}
        for n in self.nodes:
            out.setdefault(n.gpu_class, Counter())[n.status] += 1
        return dict(sorted(out.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "run": self.run,
            "source": self.source,
            "counts": dict(sorted(Counter(n.status for n in self.nodes).items())),
            "classes": {c: dict(sorted(k.items())) for c, k in self.classes().items()},
            "nodes": [n.to_json() for n in self.nodes],
        }

    def junit_suites(self) -> list[tuple[str, list[Check]]]:
        """One suite per GPU class, one testcase per node (`reports.junit_xml`)."""
        suites: dict[str, list[Check]] = {}
        for n in self.nodes:
            name = n.node or n.job or "unscheduled"
            if n.status == "passed":
                check = Check(name, "pass", n.detail or "passed")
            elif n.status == "pending":
                check = Check(name, "skip", n.detail or "pending", n.fix)
            else:
                what = f"{n.status}: {n.check}" + (f": {n.detail}" if n.detail else "")
                check = Check(name, "fail", what, n.fix)
            suites.setdefault(f"envbuild.fleet.{self.run}.{n.gpu_class}", []).append(check)
        return sorted(suites.items())


# --- a node's verdict ----------------------------------------------------------------------------


def gpu_class_of(verdict: Mapping[str, Any]) -> str:
    """The GPU class a verdict saw: its GPUs' name ("NVIDIA H100 80GB HBM3"), "cpu" when none."""
    names = sorted(
        {str(g.get("name")) for g in verdict.get("gpus") or [] if isinstance(g, Mapping)}
    )
    return ", ".join(names) if names else "cpu"


def parse_verdict(text: str) -> dict[str, Any] | None:
    """A verdict's JSON object, or None when `text` is not one (a log tail, a cut message)."""
    try:
        doc = json_loads(text.strip())
    except DocumentError:
        return None
    if not isinstance(doc, dict) or doc.get("schema") != VERDICT_SCHEMA or "ok" not in doc:
        return None
    return doc


def from_verdict(
    verdict: Mapping[str, Any],
    *,
    node: str,
    gpu_class: str = "",
    job: str = "",
    exit_code: int | None = None,
) -> NodeResult:
    """A node's result from its verdict: passed, or failed with the first failed check."""
    cls = gpu_class or gpu_class_of(verdict)
    node = node or str(verdict.get("node") or "")
    if verdict.get("ok") is True:
        took = verdict.get("total_s")
        detail = f"{verdict.get('checks', 0)} checks on {verdict.get('device')}" + (
            f" in {float(took):.1f} s" if isinstance(took, (int, float)) else ""
        )
        return NodeResult(node, cls, "passed", detail=detail, job=job, exit_code=exit_code)
    failed = [f for f in verdict.get("failed") or [] if isinstance(f, Mapping)]
    first = failed[0] if failed else {"name": "smoke", "figure": "failed", "hint": ""}
    more = len(failed) - 1 + int(verdict.get("more_failed") or 0)
    detail = str(first.get("figure", "")) + (f" (+{more} more failed)" if more > 0 else "")
    return NodeResult(
        node,
        cls,
        "failed",
        check=str(first.get("name", "smoke")),
        detail=detail,
        fix=str(first.get("hint", "")),
        job=job,
        exit_code=exit_code,
    )


def no_verdict(
    node: str,
    gpu_class: str,
    exit_code: int | None,
    tail: str,
    *,
    job: str = "",
    timeout_s: int | None = None,
) -> NodeResult:
    """A step that ended without a verdict: killed at its time limit, no engine, or a crash."""
    if exit_code in (124, 137):
        detail = f"killed at its time limit{f' ({timeout_s} s)' if timeout_s else ''}"
        fix = "a GPU call or the pull hung: run the image by hand on the node with NCCL_DEBUG=INFO"
    elif exit_code == 127:
        detail = "the node has no container engine the script could run"
        fix = "install Apptainer, or Docker/Podman with the NVIDIA Container Toolkit, on the node"
    else:
        detail = f"exit {exit_code}" if exit_code is not None else "no exit code"
        fix = (
            "the payload printed no verdict: read the node's log; rebuild the image with "
            "`envbuild image` if it predates the verdict"
        )
    if tail:
        detail += f": {tail}"
    return NodeResult(node, gpu_class, "failed", "no-verdict", detail, fix, job, exit_code)


def ordered(results: Iterable[NodeResult]) -> tuple[NodeResult, ...]:
    """Sorted by class, then status in STATUSES order, then node: failures group together."""
    rank = {s: i for i, s in enumerate(STATUSES)}
    return tuple(
        sorted(results, key=lambda n: (n.gpu_class, rank.get(n.status, 99), n.node, n.job))
    )


# --- Slurm ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmFolder:
    """What a Slurm run folder holds (read by the app layer; texts bounded)."""

    run: Mapping[str, Any]
    """run.json: the run's name, job id, way, gpu class."""
    nodes: Sequence[str]
    """nodes.txt: every node of the allocation."""
    verdicts: Mapping[str, str]
    exit_codes: Mapping[str, str]
    err_tails: Mapping[str, str]
    sacct: Mapping[str, tuple[str, str]] | None = None
    """node -> (State, ExitCode) from `sacct --parsable2`, where accounting answers."""


def slurm_results(folder: SlurmFolder) -> FleetRun:
    """Every node of the allocation (and any other that left a verdict), as NodeResults."""
    job = str(folder.run.get("job_id") or "")
    want_class = str(folder.run.get("gpu_class") or "")
    results = []
    for node in sorted({*folder.nodes, *folder.verdicts, *folder.exit_codes}):
        rc_text = folder.exit_codes.get(node, "").strip()
        rc = int(rc_text) if rc_text.lstrip("-").isdigit() else None
        verdict = parse_verdict(folder.verdicts.get(node, ""))
        if verdict is not None:
            results.append(from_verdict(verdict, node=node, job=job, exit_code=rc))
        elif rc is not None or node in folder.verdicts:
            tail = folder.err_tails.get(node, "")
            results.append(no_verdict(node, want_class or "unknown", rc, tail, job=job))
        else:
            results.append(_never_ran(node, want_class or "unknown", job, folder.sacct))
    name = str(folder.run.get("run") or "") + (f"-{job}" if job else "")
    return FleetRun(run=name, source="slurm", nodes=ordered(results))


def _never_ran(
    node: str, gpu_class: str, job: str, sacct: Mapping[str, tuple[str, str]] | None
) -> NodeResult:
    state, code = (sacct or {}).get(node, ("", ""))
    if state.startswith(("PENDING", "RUNNING", "REQUEUED")):
        return NodeResult(
            node,
            gpu_class,
            "pending",
            state,
            "the step has not ended yet",
            "wait for the job (squeue -j JOB), then read back again",
            job,
        )
    detail = f"sacct: {state} {code}".strip() if state else "no exit code, no verdict"
    return NodeResult(
        node,
        gpu_class,
        "never_started",
        state or "no-step",
        detail,
        "the node's step did not run: `sacct -j JOB` and the job's output file say why "
        "(node failure, time limit, cancelled)",
        job,
    )


def parse_sacct(text: str) -> dict[str, tuple[str, str]]:
    """node -> (State, ExitCode) of `sacct -j JOB -n -P -o JobID,NodeList,State,ExitCode`:
    the step lines of one-node steps (the batch and whole-job lines name no single node)."""
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 4 or "." not in parts[0] or parts[0].endswith((".batch", ".extern")):
            continue
        nodes, state, code = parts[1], parts[2], parts[3]
        if nodes and "[" not in nodes and "," not in nodes:
            out[nodes] = (state, code)
    return out


# --- Kubernetes ----------------------------------------------------------------------------------


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _job_of(pod: Mapping[str, Any]) -> str:
    labels = _labels(pod)
    job = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
    if job:
        return str(job)
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((str(o.get("name")) for o in owners if o.get("kind") == "Job"), "")


def matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One node-selector requirement against a node's labels (In, NotIn, Exists,
    DoesNotExist, Gt, Lt: the operators of core/v1 NodeSelectorRequirement)."""
    key, op = str(expr.get("key")), str(expr.get("operator"))
    values = [str(v) for v in expr.get("values") or []]
    have = labels.get(key)
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op == "NotIn":
        return have is None or have not in values
    if have is None:
        return False
    if op == "In":
        return have in values
    try:
        number, bound = int(have), int(values[0])
    except (ValueError, IndexError):
        return False
    return number > bound if op == "Gt" else number < bound if op == "Lt" else False


def _expr_text(expr: Mapping[str, Any]) -> str:
    values = ",".join(str(v) for v in expr.get("values") or [])
    op = {"In": "=", "NotIn": "!=", "Gt": ">", "Lt": "<"}.get(str(expr.get("operator")), "")
    return f"{expr.get('key')}{op}{values}" if op else f"{expr.get('key')} {expr.get('operator')}"


def excluded_by(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(the requirement no node met, how the nodes thinned out) for an unschedulable pod: the
    requirements every selector term shares are applied one by one, then the terms' own
    (the driver floor's alternatives) together; ("", "") when some node meets them all."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = [t.get("matchExpressions") or [] for t in required.get("nodeSelectorTerms") or []]
    if not terms:
        return "", ""
    shared = [e for e in terms[0] if all(e in t for t in terms[1:])]
    rest = [[e for e in t if e not in shared] for t in terms]
    left = [_labels(n) for n in nodes]
    steps = [f"{len(left)} nodes"]
    for expr in shared:
        left = [labels for labels in left if matches(expr, labels)]
        steps.append(f"{len(left)} with {_expr_text(expr)}")
        if not left:
            return str(expr.get("key")), ", ".join(steps)
    if any(rest):
        left = [lab for lab in left if any(all(matches(e, lab) for e in t) for t in rest)]
        keys = sorted({str(e.get("key")).rsplit(".", 1)[0] for t in rest for e in t})
        steps.append(f"{len(left)} with {' | '.join(keys)} high enough")
        if not left:
            return keys[0], ", ".join(steps)
    return "", ", ".join(steps)


def _scheduling(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next(
        (c for c in conditions if c.get("type") == "PodScheduled" and c.get("status") == "False"),
        None,
    )


def _unscheduled(
    pod: Mapping[str, Any], cls: str, requires: str, nodes: Sequence[Mapping[str, Any]] | None
) -> NodeResult:
    name = str((pod.get("metadata") or {}).get("name") or "")
    cond = _scheduling(pod) or {}
    message = str(cond.get("message") or "")
    check = "node-affinity"
    if f"Insufficient {'nvidia.com/gpu'}" in message:
        check = "nvidia.com/gpu"
    fix = (
        f"no node has what the lock needs ({requires}): upgrade the drivers, label the nodes "
        "with GPU Feature Discovery (the GPU Operator deploys it), or re-lock for the GPUs and "
        "driver the fleet has"
    )
    if check == "nvidia.com/gpu":
        fix = "the matching nodes have no free GPUs: drain them, or ask for fewer --gpus-per-node"
    if nodes is not None and check == "node-affinity":
        label, steps = excluded_by(pod, nodes)
        if label:
            check = label
            message = f"{steps}; {message}" if message else steps
    return NodeResult("", cls, "never_scheduled", check, message, fix, name)


def _terminated(pod: Mapping[str, Any], cls: str, term: Mapping[str, Any]) -> NodeResult:
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    name = str((pod.get("metadata") or {}).get("name") or "")
    code = term.get("exitCode")
    message = str(term.get("message") or "")
    verdict = parse_verdict(message)
    if verdict is not None:
        return from_verdict(verdict, node=node, gpu_class=cls, job=name, exit_code=code)
    if term.get("reason") == "OOMKilled":
        return NodeResult(
            node,
            cls,
            "failed",
            "OOMKilled",
            "the container went over its memory limit",
            "raise the pod's memory limit: the memory-backed /dev/shm counts against it",
            name,
            code,
        )
    tail = " | ".join(message.strip().splitlines()[-3:])
    return no_verdict(node, cls, code if isinstance(code, int) else None, tail, job=name)


def pod_result(
    pod: Mapping[str, Any],
    cls: str,
    requires: str,
    nodes: Sequence[Mapping[str, Any]] | None = None,
) -> NodeResult:
    """One pod of a run: what its status says (phase, reason, the smoke container's state)."""
    status = pod.get("status") or {}
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    name = str((pod.get("metadata") or {}).get("name") or "")
    if status.get("reason") == "Evicted":
        return NodeResult(
            node,
            cls,
            "evicted",
            "Evicted",
            str(status.get("message") or ""),
            "the kubelet evicted the pod under node pressure: rerun when the node is drained; "
            "the memory-backed /dev/shm counts as the pod's memory",
            name,
        )
    statuses = status.get("containerStatuses") or []
    smoke: Mapping[str, Any] = next((c for c in statuses if c.get("name") == "smoke"), {})
    state = smoke.get("state") or {}
    if state.get("terminated"):
        return _terminated(pod, cls, state["terminated"])
    waiting = state.get("waiting") or {}
    if waiting.get("reason") in _NOT_STARTED:
        reason = str(waiting["reason"])
        return NodeResult(
            node,
            cls,
            "never_started",
            reason,
            str(waiting.get("message") or ""),
            _NOT_STARTED[reason],
            name,
        )
    if status.get("phase") == "Pending" and _scheduling(pod) is not None:
        return _unscheduled(pod, cls, requires, nodes)
    if status.get("phase") == "Failed":
        reason = str(status.get("reason") or "Failed")
        return NodeResult(
            node,
            cls,
            "never_started",
            reason,
            str(status.get("message") or ""),
            "the pod ended before its smoke container did: `kubectl describe pod " + name + "`",
            name,
        )
    phase = str(status.get("phase") or "Pending")
    return NodeResult(
        node,
        cls,
        "pending",
        phase,
        waiting.get("reason") or "",
        "wait for the Job to finish, then read back again",
        name,
    )


def _job_without_pods(job: Mapping[str, Any], cls: str) -> NodeResult:
    name = str((job.get("metadata") or {}).get("name") or "")
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            reason = str(cond.get("reason") or "Failed")
            return NodeResult(
                "",
                cls,
                "never_started",
                reason,
                str(cond.get("message") or ""),
                "no pod of the Job ran to its end: the deadline covers the smoke time and 600 s "
                "of pull; a slow registry or a full cluster outlasts it",
                name,
            )
    return NodeResult(
        "",
        cls,
        "pending",
        "NoPod",
        "the Job has no pod yet",
        "wait for the Job controller; `kubectl describe job " + name + "`",
        name,
    )


def k8s_results(
    doc: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]] | None = None
) -> FleetRun:
    """`kubectl get jobs,pods -l envbuild.run=RUN -o json` (a v1 List) as the fleet view; with
    `nodes` (`kubectl get nodes -o json` items), an unschedulable pod names the requirement
    that excluded every node."""
    items = [i for i in doc.get("items") or [] if isinstance(i, Mapping)]
    jobs = {str((i.get("metadata") or {}).get("name")): i for i in items if i.get("kind") == "Job"}
    pods_of: dict[str, list[Mapping[str, Any]]] = {}
    for pod in (i for i in items if i.get("kind") == "Pod"):
        pods_of.setdefault(_job_of(pod), []).append(pod)
    results: list[NodeResult] = []
    runs = set()
    for job_name in sorted({*jobs, *pods_of}):
        job = jobs.get(job_name, {})
        source = job or pods_of[job_name][0]
        cls = str(_labels(source).get(CLASS_LABEL) or "unknown")
        runs.add(str(_labels(source).get(RUN_LABEL) or ""))
        requires = str(_annotations(source).get(REQUIRES_ANNOTATION) or "")
        pods = pods_of.get(job_name, [])
        if not pods:
            results.append(_job_without_pods(job, cls))
        results += [pod_result(p, cls, requires, nodes) for p in pods]
    return FleetRun(run=", ".join(sorted(runs - {""})), source="kubernetes", nodes=ordered(results))
