"""What of uv's answer an unsatisfiable lock shows (envbuild.lock.pinfailure `classify_failure`)."""

from __future__ import annotations

from envbuild.core.errors import PinError, UnsatisfiableError
from envbuild.lock import pins as pydeps
from envbuild.lock.pinfailure import classify_failure

REQ = pydeps.PinRequest(requirements=("jax==0.12.0.1",), python="3.12")


def test_the_whole_derivation_is_kept_from_its_start() -> None:
    """maxtext's conflict ran to 19 lines; the last 12 began in the middle of a sentence."""
    steps = [
        f"      And because pkg{i}==1 depends on pkg{i + 1}>=2, we can conclude ..."
        for i in range(18)
    ]
    stderr = "\n".join(
        [
            "Resolved 10 packages in 3ms",
            "  x No solution found when resolving dependencies:",
            "  `-> Because tensorflow>=2.13.0,<=2.13.1 depends on protobuf>=3.20.3,<5 and ...",
            *steps,
        ]
    )
    err = classify_failure("uv", stderr, REQ)
    assert isinstance(err, UnsatisfiableError)
    head, _, said = err.message.partition(":\n")
    assert head == "the Python packages cannot be pinned together for Python 3.12 on linux/x86_64"
    assert said.splitlines()[0] == "x No solution found when resolving dependencies:"
    assert "Because tensorflow>=2.13.0" in said and said.count("And because") == 18
    assert "Resolved 10 packages" not in said  # what came before uv's answer is not it


def test_a_longer_answer_keeps_its_start_and_end_and_counts_the_middle() -> None:
    head = "  x No solution found when resolving dependencies:"
    stderr = "\n".join([head] + [f"l{i}" for i in range(99)])
    err = classify_failure("uv", stderr, REQ)
    assert isinstance(err, UnsatisfiableError)
    said = err.message.partition(":\n")[2].splitlines()
    assert said[0] == head.strip() and said[1] == "l0"  # uv's opening is never lost
    assert said[30] == "(40 lines left out)" and said[-1] == "l98" and len(said) == 61


def test_other_failures_keep_the_last_lines_and_count_the_rest() -> None:
    stderr = "\n".join(f"line {i}" for i in range(20)) + "\nerror: something broke"
    err = classify_failure("uv", stderr, REQ)
    assert isinstance(err, PinError)
    said = err.message.partition(":\n")[2].splitlines()
    assert said[0] == "(9 earlier lines left out)" and said[-1] == "error: something broke"
