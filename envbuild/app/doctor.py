"""The `envbuild doctor` use case: probe this host (or read recorded facts), check it, and
tell which locks in reach would run here. The findings are `envbuild.preflight.doctor`'s.
"""

from __future__ import annotations

from pathlib import Path

from envbuild import matrix as matrix_data
from envbuild.app import inputs
from envbuild.core.errors import EnvbuildError
from envbuild.core.models import Lock
from envbuild.cuda.archs import ArchRules
from envbuild.preflight import doctor as rules_of_doctor


def doctor(
    *,
    facts_file: Path | None = None,
    root: Path | None = None,
    matrix_overlay: Path | None = None,
) -> rules_of_doctor.DoctorReport:
    """The host's findings, each with a next step. Without an NVIDIA driver the report says
    so and still covers the engine, the runtime/CDI specs and /dev/shm (its exit code is 2)."""
    facts = inputs.host_facts(facts_file)
    locks: list[tuple[str, Lock]] = []
    unreadable: list[rules_of_doctor.Finding] = []
    for label, folder in inputs.locks_in_reach(root or Path.cwd()):
        try:
            locks.append((label, inputs.read_lock_dir(folder)[1]))
        except EnvbuildError as err:
            unreadable.append(
                rules_of_doctor.Finding(
                    f"lock {label}", "info", f"cannot read: {err.message}", err.hint
                )
            )
    matrix = matrix_data.load_matrix_from(matrix_overlay) if locks else None
    arch_rules = ArchRules.from_archs(matrix.archs) if matrix else None
    findings = (
        rules_of_doctor.check_host(facts, locks=locks, rules=arch_rules, matrix=matrix) + unreadable
    )
    return rules_of_doctor.DoctorReport(facts=facts, findings=tuple(findings))
