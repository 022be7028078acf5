"""A folder's `Dockerfile.j2` is code from whoever wrote the folder: it renders in Jinja2's
immutable sandbox (no attribute walk to `os`, no mutation of the values), with limits on the
size of a `range` and of the output, so `render` never runs a command on the host or hangs.
A refusal is exit 2 naming the template; the built-in templates and ordinary user templates
(blocks, `super()`, loops over the values) render as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.helpers import assert_clear_error, copy_example, run
from tests.reliability.hostile import run_child

ESCAPES = {
    "cycler globals": "{{ cycler.__init__.__globals__.os.popen('touch MARK').read() }}",
    "joiner globals": "{{ joiner.__init__.__globals__.os.system('touch MARK') }}",
    "namespace globals": "{{ namespace.__init__.__globals__ }}",
    "lipsum globals": "{{ lipsum.__globals__['os'].system('touch MARK') }}",
    "class walk": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "format string": "{{ '{0.__class__.__init__.__globals__}'.format(cycler) }}",
    "mutate a value": "{{ pip_index_args.append('--index-url http://evil') }}",
    "self reference": "{{ self.__init__.__globals__ }}",
}


def _image_with_template(tmp_path: Path, body: str) -> Path:
    image = copy_example(tmp_path, "torch-cpu")
    (image / "Dockerfile.j2").write_text(
        "{% extends envbuild_template %}\n{% block system %}\n" + body + "\n{% endblock %}\n"
    )
    return image


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_template_cannot_reach_the_host(tmp_path: Path, case: str) -> None:
    mark = tmp_path / "MARK"
    image = _image_with_template(tmp_path, ESCAPES[case].replace("MARK", str(mark)))
    out = run("render", str(image))
    assert_clear_error(out, 2, names="Dockerfile.j2")
    # Refused by the sandbox, or not there at all (lipsum is removed: lipsum(n) has no limit).
    assert any(why in out.err for why in ("sandbox", "unsafe", "is undefined")), out.err
    assert not mark.exists()
    assert "__globals__" not in out.out


LIMITS = {
    "huge range": "{% for i in range(10**9) %}{% endfor %}",
    "nested ranges": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "huge output": "{{ 'x' * 10**9 }}",
    "huge join": "{{ (['RUN true'] * 10**8) | join('\\n') }}",
}


@pytest.mark.parametrize("case", sorted(LIMITS))
def test_template_limits(tmp_path: Path, case: str) -> None:
    image = _image_with_template(tmp_path, LIMITS[case])
    out = run_child("render", str(image), timeout=30)
    assert_clear_error(out, 2, names="Dockerfile.j2")


def test_ordinary_user_template_still_renders(tmp_path: Path) -> None:
    body = (
        "{{ super() }}\n"
        "# {{ name }} {{ python }} {{ pip_index_args | join(' ') }}\n"
        "{% for p in os_packages %}# {{ p | upper }}\n{% endfor %}"
        "{% for i in range(3) %}RUN echo {{ i }}\n{% endfor %}"
    )
    image = _image_with_template(tmp_path, body)
    out = run("render", str(image))
    assert out.code == 0, out.text
    assert "RUN echo 2" in out.out
    assert "# PYTHON3.11-VENV" in out.out
