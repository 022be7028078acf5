"""Bad input, generated: requests, locks, matrix files and command-line values.

Whatever the bytes, envbuild answers with one `error:` line and its `next:` step and exit 2
(bad input) or 1 where the contract says "no" (stale or edited lock, nothing fits, matrix
problems), never a traceback or exit 70, and a failing run leaves the existing lock byte for
byte as it was. Hand-picked cases live beside each module's unit tests
(tests/unit/request/test_request.py, test_cli_lock.py, test_injection.py, test_matrix_cli.py); these
add the cases nobody thought of.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.request.parse import SCHEMA
from tests.reliability.helpers import (
    FRESH_EXAMPLES,
    IMAGES,
    MATRIX,
    Outcome,
    assert_clear_error,
    copy_example,
    reseal,
    run,
)

# Small example counts keep the whole reliability folder well under a minute on 2 cores; the
# database (.hypothesis/) replays any failure found earlier first.
FAST = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
FEW = settings(FAST, max_examples=20)

EXAMPLE = "torch-cpu"  # the smallest lock; a CPU request exercises the same parser


@pytest.fixture
def image(tmp_path: Path) -> Path:
    return copy_example(tmp_path, EXAMPLE)


def check_request(image: Path, data: bytes) -> Outcome:
    """Write DATA as the request, run `lock --check`; the lock must not change."""
    before = (image / "envbuild.lock").read_bytes()
    (image / "envbuild.toml").write_bytes(data)
    out = run("lock", "--check", str(image))
    assert (image / "envbuild.lock").read_bytes() == before
    assert out.code in (0, 1, 2), out.text
    if out.code == 2:
        assert_clear_error(out, 2, names=f"{image}/envbuild.toml")
    elif out.code == 1:
        assert_clear_error(out, 1, names=f"envbuild lock {image}")
    return out


# --- requests --------------------------------------------------------------------------------


@FAST
@given(data=st.binary(max_size=600))
def test_random_bytes_as_request(image: Path, data: bytes) -> None:
    check_request(image, data)


@FAST
@given(data=st.binary(min_size=1, max_size=300))
def test_random_bytes_after_a_valid_request(image: Path, data: bytes) -> None:
    check_request(image, (IMAGES / EXAMPLE / "envbuild.toml").read_bytes() + b"\n" + data)


@pytest.mark.parametrize("name", sorted(p.name for p in IMAGES.iterdir()))
def test_request_truncated_at_every_length(tmp_path: Path, name: str) -> None:
    """Every prefix of every shipped request: through the parser at every length (cheap), and
    through `envbuild lock --check` wherever the prefix parses, plus every 5th length."""
    from envbuild.core.errors import UserError
    from envbuild.request.parse import parse_request

    data = (IMAGES / name / "envbuild.toml").read_bytes()
    image = copy_example(tmp_path, name)
    parsed = 0
    for n in range(len(data)):
        try:
            parse_request(data[:n], path="envbuild.toml", default_name=name)
        except UserError as exc:
            assert exc.exit_code == 2 and exc.hint and exc.message.startswith("envbuild.toml")
            if n % 5:
                continue
        else:
            parsed += 1
        check_request(image, data[:n])
    assert parsed > 0  # some prefixes (whole tables) are valid requests: those ran too


def _base_request() -> dict[str, Any]:
    return {
        "image": {"python": "3.11", "os": "debian12", "device": "cpu"},
        "framework": {"requirement": "torch==2.13.*"},
    }


def _dumps(doc: dict[str, Any]) -> bytes:
    import tomlkit

    return tomlkit.dumps(doc).encode()


_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "string": st.text(max_size=20),
    "boolean": st.booleans(),
    "integer": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "float": st.floats(allow_nan=False, allow_infinity=False),
    "array of integers": st.lists(st.integers(min_value=-10, max_value=10), min_size=1, max_size=3),
    "array of strings": st.lists(st.text(max_size=8), max_size=3),
    "table": st.dictionaries(
        st.text(string.ascii_lowercase, min_size=1, max_size=5), st.integers(), max_size=2
    ),
}
KEYS = [(t, k, kind) for t, keys in SCHEMA.items() for k, kind in keys.items()]


@st.composite
def wrong_type(draw: st.DrawFn) -> tuple[str, str, Any]:
    table, key, kind = draw(st.sampled_from(KEYS))
    # A boolean is not an integer here even though Python's bool is an int subclass.
    # "string or array of strings" ([project] command, [smoke] command) takes both.
    wrong = [k for k in _SCALARS if k not in kind.split(" or ")]
    value = draw(_SCALARS[draw(st.sampled_from(wrong))])
    if kind == "array of strings" and value == []:
        value = [1]  # an empty array has no element of the wrong type
    return table, key, value


@FAST
@given(case=wrong_type())
def test_wrong_type_per_key(
    image: Path, monkeypatch: pytest.MonkeyPatch, case: tuple[str, str, Any]
) -> None:
    """Exit 2 naming the key, from `lock` (which would write) and `lock --check`."""
    from tests.unit.lock.test_lockfile import install_fakes

    table, key, value = case
    doc = _base_request()
    doc.setdefault(table, {})[key] = value
    before = (image / "envbuild.lock").read_bytes()
    (image / "envbuild.toml").write_bytes(_dumps(doc))
    with monkeypatch.context() as mp:
        install_fakes(mp)  # no network even if a bug let the value through
        for args in (("lock", str(image)), ("lock", "--check", str(image))):
            out = run(*args)
            assert_clear_error(out, 2, names=key)
    assert (image / "envbuild.lock").read_bytes() == before


@FAST
@given(
    table=st.sampled_from([None, *SCHEMA]),
    key=st.text(min_size=1, max_size=12).filter(lambda k: k not in SCHEMA),
)
def test_unknown_key(
    image: Path, monkeypatch: pytest.MonkeyPatch, table: str | None, key: str
) -> None:
    doc = _base_request()
    if table is None:
        doc[key] = 1
    else:
        if key in SCHEMA[table]:
            return
        doc.setdefault(table, {})[key] = "x"
    before = (image / "envbuild.lock").read_bytes()
    (image / "envbuild.toml").write_bytes(_dumps(doc))
    from tests.unit.lock.test_lockfile import install_fakes

    with monkeypatch.context() as mp:
        install_fakes(mp)
        out = run("lock", str(image))
    assert_clear_error(out, 2)
    assert "unknown" in out.err and (repr(key) in out.err or key in out.err), out.err
    assert (image / "envbuild.lock").read_bytes() == before


_HUGE: dict[str, st.SearchStrategy[Any]] = {
    "string": st.sampled_from(["x" * 100_000, "3." + "1" * 5000, "torch" + ">=1" * 2000]),
    "integer": st.sampled_from([2**63 - 1, -(2**63), 0, -1, 10**18]),
    "boolean": st.booleans(),
    "array of strings": st.sampled_from([["numpy"] * 5000, [f"p{i}" for i in range(600)]]),
    "string or array of strings": st.sampled_from(["x" * 100_000, ["python"] * 5000]),
}


@FEW
@given(case=st.sampled_from(KEYS).flatmap(lambda t: st.tuples(st.just(t), _HUGE[t[2]])))
def test_huge_values(image: Path, case: tuple[tuple[str, str, str], Any]) -> None:
    (table, key, _), value = case
    doc = _base_request()
    doc.setdefault(table, {})[key] = value
    check_request(image, _dumps(doc))


def test_deeply_nested_value(image: Path) -> None:
    # tomllib recurses per nesting level: a deep inline array must still be a clean exit 2.
    deep = b'[framework]\nrequirement = "torch"\ncuda = ' + b"[" * 50_000 + b"]" * 50_000 + b"\n"
    out = check_request(image, deep)
    assert out.code == 2


@FAST
@given(
    at=st.integers(min_value=0, max_value=10_000),
    bad=st.sampled_from([b"\x80", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]),
)
def test_non_utf8_request(image: Path, at: int, bad: bytes) -> None:
    data = (IMAGES / EXAMPLE / "envbuild.toml").read_bytes()
    at %= len(data) + 1
    out = check_request(image, data[:at] + bad + data[at:])
    assert_clear_error(out, 2, names="is not UTF-8")


# --- locks -----------------------------------------------------------------------------------


def check_lock(image: Path, text: bytes, tmp_path: Path) -> tuple[Outcome, Outcome]:
    """Write TEXT as the lock; `lock --check` and `render -o` must say no cleanly (or yes)."""
    (image / "envbuild.lock").write_bytes(text)
    check = run("lock", "--check", str(image))
    target = tmp_path / "Dockerfile"
    target.unlink(missing_ok=True)
    render = run("render", str(image), "-o", str(target))
    for out in (check, render):
        assert out.code in (0, 1, 2), out.text
        if out.code:
            assert_clear_error(out, 1, 2)
    if check.code:
        # A lock `--check` refuses is never rendered. (The reverse can happen: `--check` reads
        # freshness and the content hash, render also validates every value it writes.)
        assert render.code == check.code, (check.text, render.text)
    if render.code:
        assert not target.exists()  # no partial Dockerfile
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".Dockerfile")] == []
    assert (image / "envbuild.lock").read_bytes() == text  # neither command writes the lock
    return check, render


@FAST
@given(data=st.binary(max_size=2000))
def test_random_bytes_as_lock(image: Path, tmp_path: Path, data: bytes) -> None:
    check, _ = check_lock(image, data, tmp_path)
    assert check.code in (1, 2)


@FAST
@given(n=st.integers(min_value=0))
def test_truncated_lock(image: Path, tmp_path: Path, n: int) -> None:
    text = (IMAGES / EXAMPLE / "envbuild.lock").read_bytes()
    n %= len(text)
    check, _ = check_lock(image, text[:n], tmp_path)
    assert check.code in (1, 2)


@FAST
@given(at=st.integers(min_value=0), bad=st.sampled_from([b"\x80", b"\xff\xfe", b"\xed\xa0\x80"]))
def test_non_utf8_lock(image: Path, tmp_path: Path, at: int, bad: bytes) -> None:
    text = (IMAGES / EXAMPLE / "envbuild.lock").read_bytes()
    at %= len(text) + 1
    check, _ = check_lock(image, text[:at] + bad + text[at:], tmp_path)
    assert check.code in (1, 2)


_VALUE_LINE = re.compile(r"^([A-Za-z_\"][^=\n]*) = (.+)$", re.MULTILINE)
_LITERALS = st.sampled_from(
    ["1", "-1", "true", '""', '"x"', "[]", "[1]", '["a"]', "{}", "{a = 1}", "1.5", "1979-05-27"]
)


@FAST
@given(which=st.integers(min_value=0), literal=_LITERALS, resealed=st.booleans())
def test_lock_value_of_the_wrong_type(
    image: Path, tmp_path: Path, which: int, literal: str, resealed: bool
) -> None:
    """Any value replaced by a literal of another type. Unsealed: an edit (exit 1). Resealed
    (content_hash recomputed, as a careless tool would): the parser behind the hash must still
    refuse it cleanly, or accept it if it is valid."""
    text = (IMAGES / EXAMPLE / "envbuild.lock").read_text()
    lines = [m for m in _VALUE_LINE.finditer(text) if not m.group(1).startswith("content_hash")]
    m = lines[which % len(lines)]
    edited = text[: m.start(2)] + literal + text[m.end(2) :]
    if edited == text:
        return
    if resealed:
        edited = reseal(edited)
    check, _ = check_lock(image, edited.encode(), tmp_path)
    if m.group(1) == "schema_version":
        assert check.code == 2 and "schema" in check.err, check.text  # not a lock we can read
    elif not resealed:
        assert check.code == 1 and "edited by hand" in check.err, check.text


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        ('python = "3.11"', "python = 311", "stack.python must be str"),
        ("timeout_s = 600", 'timeout_s = "600"', "smoke.timeout_s must be int"),
        ("tier = 1", "tier = true", "smoke.tier must be int"),
        ('compat = "minor"', "compat = []", "targets.compat must be str"),
        ("archs = []", 'archs = "sm_90"', "stack.archs must be list"),
    ],
)
def test_forged_lock_with_a_wrong_type_is_exit_2(
    image: Path, tmp_path: Path, old: str, new: str, names: str
) -> None:
    """A lock edited and resealed (content hash recomputed): refused as malformed, exit 2,
    by `lock --check` and `render` alike, before any value reaches the Dockerfile."""
    text = (IMAGES / EXAMPLE / "envbuild.lock").read_text()
    assert old in text
    check, render = check_lock(image, reseal(text.replace(old, new, 1)).encode(), tmp_path)
    for out in (check, render):
        assert_clear_error(out, 2, names="malformed lock")
        assert names in out.err, out.err


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('name = "torch-cpu"', 'name = "' + "a" * 100_000 + '"'),
        ('ref = "debian:bookworm-slim"', 'ref = "debian:' + "b" * 100_000 + '"'),
        ('version = "4.3.1"', 'version = "4.' + "3" * 5000 + '"'),
        ('python = "3.11"', 'python = "3.' + "1" * 5000 + '"'),
        ("timeout_s = 600", f"timeout_s = {2**63 - 1}"),
    ],
)
def test_forged_lock_with_a_huge_value(image: Path, tmp_path: Path, old: str, new: str) -> None:
    """Huge values behind a recomputed content hash: render refuses what cannot go into a
    Dockerfile with a short message (or renders what is merely absurd); never a crash."""
    text = (IMAGES / EXAMPLE / "envbuild.lock").read_text()
    assert old in text
    check_lock(image, reseal(text.replace(old, new, 1)).encode(), tmp_path)


@FEW
@given(key=st.text(string.ascii_lowercase + "_", min_size=1, max_size=10))
def test_lock_with_an_unknown_key_resealed(image: Path, tmp_path: Path, key: str) -> None:
    text = (IMAGES / EXAMPLE / "envbuild.lock").read_text()
    edited = reseal(text.replace("[stack]\n", f'[stack]\n{key}x = "surprise"\n', 1))
    check_lock(image, edited.encode(), tmp_path)


@pytest.mark.parametrize("name", FRESH_EXAMPLES)
def test_every_example_lock_still_checks_fresh(tmp_path: Path, name: str) -> None:
    # The baseline the tests above start from: unchanged, each shipped lock is fresh.
    image = copy_example(tmp_path, name)
    out = run("lock", "--check", str(image))
    assert out.code == 0, out.text


# --- matrix files ----------------------------------------------------------------------------

MATRIX_FILES = sorted(p.name for p in MATRIX.glob("*.toml"))


@pytest.fixture
def matrix_copy(tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "matrix"
    shutil.copytree(MATRIX, dst)
    return dst


def _mutations() -> st.SearchStrategy[tuple[str, str, Any]]:
    return st.tuples(
        st.sampled_from(MATRIX_FILES),
        st.sampled_from(["bytes", "truncate", "literal", "unknown", "huge", "non-utf8"]),
        st.one_of(st.binary(max_size=200), st.integers(min_value=0), _LITERALS),
    )


def mutate(original: bytes, kind: str, arg: Any) -> bytes:
    if kind == "bytes":
        return arg if isinstance(arg, bytes) else str(arg).encode()
    pos = (arg if isinstance(arg, int) else len(str(arg))) % (len(original) + 1)
    if kind == "truncate":
        return original[:pos]
    if kind == "non-utf8":
        return original[:pos] + b"\xff" + original[pos:]
    text = original.decode()
    values = list(_VALUE_LINE.finditer(text))
    if not values:
        return original + b"\x00"
    m = values[pos % len(values)]
    if kind == "literal":
        new = arg if isinstance(arg, str) else "[1, 2]"
        return (text[: m.start(2)] + new + text[m.end(2) :]).encode()
    if kind == "unknown":
        return (text[: m.start()] + "surprise_key = 1\n" + text[m.start() :]).encode()
    return (text[: m.start(2)] + '"' + "9" * 100_000 + '"' + text[m.end(2) :]).encode()


@FEW
@given(case=_mutations())
def test_mutated_matrix_file(matrix_copy: Path, case: tuple[str, str, Any]) -> None:
    """`envbuild matrix check` on a copy of the matrix with one file mutated: exit 0, 1 with
    "file: row: problem" lines, or 2 naming the file; and `resolve` on it: never a crash."""
    from envbuild.matrix import clear_cache

    name, kind, arg = case
    path = matrix_copy / name
    original = (MATRIX / name).read_bytes()
    path.write_bytes(mutate(original, kind, arg))
    env = {"ENVBUILD_MATRIX_DIR": str(matrix_copy), "ENVBUILD_MATRIX_OVERLAY": ""}
    try:
        out = run("matrix", "check", env=env)
        assert out.code in (0, 1, 2), out.text
        if out.code == 2:
            assert_clear_error(out, 2, names=name)
        if out.code == 1:
            assert name in out.out, out.text
        clear_cache()  # the same tmp path across examples: load the mutated files afresh
        res = run(
            "resolve", "--framework", "torch", "--gpu", "H100", "--driver", "570.124.06", env=env
        )
        assert res.code in (0, 1, 2), res.text
        if res.code == 2:
            assert_clear_error(res, 2)
        if kind in ("non-utf8", "bytes") and out.code == 2:
            assert res.code == 2
    finally:
        path.write_bytes(original)
        clear_cache()


def test_mutated_matrix_through_overlay(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "cuda.toml").write_bytes(b"[[cuda]]\nversion = 12\n\xff")
    out = run("matrix", "check", "--overlay", str(overlay))
    assert_clear_error(out, 2, names="cuda.toml")


# --- command-line values ---------------------------------------------------------------------

_TOKENS = [
    "H100", "RTX 5090", "sm_90", "9.0", "sm_", "10.0", "A100", "L4", "V100", "GTX 1080",
    "570.124.06", "570", "999.99.99", "0", "-1", "12.8", ">=12.6", "<13", "==12.*", "12.8.*",
    "3.12", "3", "3.99", "torch", "torch==2.6.*", "jax[cuda13]", "tensorflow==2.15.*",
    "torch>=99", "numpy", "torch; python_version<'3'", "torch @ https://x", "",
]  # fmt: skip
_VALUES = st.one_of(
    st.sampled_from(_TOKENS),
    st.text(max_size=30),
    st.builds(lambda a, b: a + b, st.sampled_from(_TOKENS), st.text(max_size=8)),
)


@settings(FAST, max_examples=60)
@given(
    gpus=st.lists(_VALUES, max_size=3),
    driver=st.none() | _VALUES,
    cuda=st.none() | _VALUES,
    python=st.none() | _VALUES,
    framework=st.none() | _VALUES,
    as_json=st.booleans(),
)
def test_resolve_with_random_values(
    gpus: list[str],
    driver: str | None,
    cuda: str | None,
    python: str | None,
    framework: str | None,
    as_json: bool,
) -> None:
    args = ["resolve"]
    for g in gpus:
        args += ["--gpu", g]
    for flag, value in (
        ("--driver", driver),
        ("--cuda", cuda),
        ("--python", python),
        ("--framework", framework),
    ):
        if value is not None:
            args += [flag, value]
    if as_json:
        args.append("--json")
    out = run(*[a.replace("\x00", "") for a in args])
    assert out.code in (0, 1, 2), out.text
    if as_json:
        import json

        doc = json.loads(out.out)  # one JSON object whatever happened
        assert doc["ok"] is (out.code == 0)
    elif out.code == 2:
        assert out.err.startswith(("error: ", "Usage:")), out.text
        if out.err.startswith("error: "):
            assert_clear_error(out, 2)


@pytest.mark.parametrize(
    ("text", "says"),
    [("[]", "lists no hosts"), ("{}", "no hostname, driver or GPUs"), ("[{}]", "entry 1")],
)
def test_a_hosts_file_of_no_hosts_is_refused(tmp_path: Path, text: str, says: str) -> None:
    """Valid JSON that names no host (the case hypothesis found below): not a fleet of zero
    hosts that every stack fits."""
    hosts = tmp_path / "host.json"
    hosts.write_text(text)
    out = run("resolve", "--framework", "torch", "--hosts", str(hosts))
    assert_clear_error(out, 2, names=str(hosts))
    assert says in out.text


@FEW
@given(data=st.binary(max_size=400))
def test_random_bytes_as_hosts_file(tmp_path: Path, data: bytes) -> None:
    hosts = tmp_path / "host.json"
    hosts.write_bytes(data)
    out = run("resolve", "--framework", "torch", "--hosts", str(hosts))
    assert_clear_error(out, 2, names=str(hosts))
