"""The Jinja2 sandbox every Dockerfile renders in, with its limits (pure).

A folder's `Dockerfile.j2` is code from whoever wrote the folder: it runs in Jinja2's
`ImmutableSandboxedEnvironment` (https://jinja.palletsprojects.com/en/stable/sandbox/: no
attribute walk to Python internals such as `os`, no mutation of the values) and within the
bounds below, so `render` never runs a command on the host, never hangs and never fills memory.
A refusal is `jinja2.exceptions.SecurityError`; render.py turns it into a UserError (exit 2).
"""

from __future__ import annotations

import functools
import re
from typing import Any

MAX_OUTPUT = 1 << 20
"""Characters a render may produce (the shipped Dockerfiles are about 5 kB)."""
MAX_LOOP_STEPS = 100_000
"""range() steps one render may take, all loops together."""
_BIG_WIDTH = re.compile(r"[0-9]{7,}")  # a format width of a million characters or more


@functools.cache
def environment_class() -> Any:
    """The sandboxed environment class, with the limits above (jinja2 imported lazily)."""
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Sandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "%"})

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.steps = 0
            self.globals.pop("lipsum", None)  # lipsum(n) writes n paragraphs
            self.globals["range"] = self.range

        def range(self, *args: int) -> Any:
            for step in range(*args):
                self.steps += 1
                if self.steps > MAX_LOOP_STEPS:
                    raise SecurityError(f"more than {MAX_LOOP_STEPS} range() steps")
                yield step

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            problem = binop_problem(operator, left, right)
            if problem:
                raise SecurityError(problem)
            return super().call_binop(context, operator, left, right)

        def call(self, context: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
            values = [*args, *kwargs.values()]
            if any(isinstance(v, int) and abs(v) > MAX_OUTPUT for v in values):
                raise SecurityError("a call with a number larger than the output limit")
            if getattr(obj, "__name__", "") in ("format", "format_map") and any(
                isinstance(s, str) and _BIG_WIDTH.search(s)
                for s in (getattr(obj, "__self__", None), *values)
            ):
                raise SecurityError("a format width of a million characters or more")
            return super().call(context, obj, *args, **kwargs)

    return Sandbox


def binop_problem(operator: str, left: Any, right: Any) -> str:
    """Why `left OPERATOR right` would blow the limits in a template ("" when it would not)."""
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            sized = isinstance(seq, str | list | tuple) and isinstance(n, int)
            if sized and len(seq) * n > MAX_OUTPUT:
                return f"a sequence repeated {n} times"
    ints = isinstance(left, int) and isinstance(right, int)
    if operator == "**" and ints and abs(left) > 1 and right * abs(left).bit_length() > 4096:
        return f"{left} ** {right} is too large"
    if operator == "%" and isinstance(left, str) and _BIG_WIDTH.search(left):
        return "a format width of a million characters or more"
    return ""


def generate(template: Any, values: dict[str, Any]) -> str:
    """The rendered text, stopped past MAX_OUTPUT characters."""
    from jinja2.exceptions import SecurityError

    parts: list[str] = []
    size = 0
    template.environment.steps = 0
    for chunk in template.generate(values):
        size += len(chunk)
        if size > MAX_OUTPUT:
            raise SecurityError(f"the output passed {MAX_OUTPUT} characters")
        parts.append(chunk)
    return "".join(parts)
