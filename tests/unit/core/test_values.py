"""The one grammar for image references (and the other values render takes), and the three
places that decide with it: the request's [image] base, render's base image, `image --tag`.

The reference cases are the distribution spec's own, from
https://github.com/distribution/reference/blob/main/reference_test.go (TestReferenceParse,
TestDomainAndPath), plus the cases where envbuild's three copies of the grammar used to
disagree (`x:1:2`, `a__b/c`).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from envbuild.app.image import check_tag
from envbuild.core import values
from envbuild.core.errors import UserError
from envbuild.core.values import ImageRef, parse_image_ref
from envbuild.render import dockerfile as render
from envbuild.request.parse import request_from_mapping

F64 = "f" * 64
SHA256 = "sha256:" + F64
SHA512 = "sha512:" + "f" * 128

# input -> (domain, path, tag, digest)
VALID: dict[str, tuple[str | None, str, str | None, str | None]] = {
    "test_com": (None, "test_com", None, None),
    "test.com:tag": (None, "test.com", "tag", None),
    "test.com:5000": (None, "test.com", "5000", None),
    "test.com/repo:tag": ("test.com", "repo", "tag", None),
    "test:5000/repo": ("test:5000", "repo", None, None),
    "test:5000/repo:tag": ("test:5000", "repo", "tag", None),
    f"test:5000/repo@{SHA256}": ("test:5000", "repo", None, SHA256),
    f"test:5000/repo:tag@{SHA256}": ("test:5000", "repo", "tag", SHA256),
    "lowercase:Uppercase": (None, "lowercase", "Uppercase", None),
    # The name is 255 characters: at the limit; the tag does not count.
    "a/" * 127 + "a:tag-puts-this-over-max": (
        "a",
        "a/" * 126 + "a",
        "tag-puts-this-over-max",
        None,
    ),
    "sub-dom1.foo.com/bar/baz/quux": ("sub-dom1.foo.com", "bar/baz/quux", None, None),
    "sub-dom1.foo.com/bar/baz/quux:some-long-tag": (
        "sub-dom1.foo.com",
        "bar/baz/quux",
        "some-long-tag",
        None,
    ),
    "b.gcr.io/test.example.com/my-app:test.example.com": (
        "b.gcr.io",
        "test.example.com/my-app",
        "test.example.com",
        None,
    ),
    "xn--n3h.com/myimage:xn--n3h.com": ("xn--n3h.com", "myimage", "xn--n3h.com", None),
    f"xn--7o8h.com/myimage:xn--7o8h.com@{SHA512}": (
        "xn--7o8h.com",
        "myimage",
        "xn--7o8h.com",
        SHA512,
    ),
    "foo_bar.com:8080": (None, "foo_bar.com", "8080", None),
    "foo/foo_bar.com:8080": ("foo", "foo_bar.com", "8080", None),
    "192.168.1.1": (None, "192.168.1.1", None, None),
    "192.168.1.1:tag": (None, "192.168.1.1", "tag", None),
    "192.168.1.1:5000": (None, "192.168.1.1", "5000", None),
    "192.168.1.1/repo": ("192.168.1.1", "repo", None, None),
    "192.168.1.1:5000/repo": ("192.168.1.1:5000", "repo", None, None),
    "192.168.1.1:5000/repo:5050": ("192.168.1.1:5000", "repo", "5050", None),
    "Registry.Example.com/team/x:1": ("Registry.Example.com", "team/x", "1", None),
    # TestDomainAndPath
    "test.com/foo": ("test.com", "foo", None, None),
    "test_com/foo": (None, "test_com/foo", None, None),
    "test:8080/foo": ("test:8080", "foo", None, None),
    "test.com:8080/foo": ("test.com:8080", "foo", None, None),
    "test-com:8080/foo": ("test-com:8080", "foo", None, None),
    "xn--n3h.com:18080/foo": ("xn--n3h.com:18080", "foo", None, None),
    # Separators: one period, one or two underscores, any run of dashes.
    "a__b/c": (None, "a__b/c", None, None),
    "a--b---c/d": ("a--b---c", "d", None, None),
    "localhost/x_y__z:v1.0": ("localhost", "x_y__z", "v1.0", None),
    "localhost:5000/team/x:1.0": ("localhost:5000", "team/x", "1.0", None),
    "nvcr.io/nvidia/pytorch:25.01-py3": ("nvcr.io", "nvidia/pytorch", "25.01-py3", None),
}

INVALID: dict[str, str] = {
    "": "empty",
    ":justtag": "no name",
    f"@{SHA256}": "no name",
    "repo@sha256:" + "f" * 34: "a sha256 digest is 64 hex digits",
    f"validname@invaliddigest:{F64}": "unknown digest algorithm",
    f"repo@sha256:{'F' * 64}": "uppercase hex in a digest",
    "Uppercase:tag": "uppercase in the path",
    # The spec's FIXME: its regexes take "Uppercase" for a host; its test says they should not.
    "Uppercase/lowercase:tag": "uppercase in the path",
    "Upper/case:x": "uppercase in the path",
    "test:5000/Uppercase/lowercase:tag": "uppercase in the path",
    "a/" * 128 + "a:tag": "a name longer than 255 characters",
    "aa/asdf$$^/aa": "characters outside the grammar",
    "x:1:2": "two tags",
    "-foo": "a component starts with a separator",
    "foo/..bar": "two periods in a row",
    "foo/bar.": "a component ends with a separator",
    "a___b/c": "three underscores",
    "foo//bar": "an empty component",
    "x:": "an empty tag",
    "x:-tag": "a tag starts with a dash",
    "x:" + "t" * 129: "a tag longer than 128 characters",
    "x:tag\nRUN rm -rf /": "a newline",
    "x:1\n": "a trailing newline",
    "ubuntu:24.04 AS x": "a space",
    "x:tä": "a tag outside ASCII",
    # IPv6 hosts: valid in the spec, refused here on purpose (envbuild.core.values).
    "[2001:db8::1]/repo": "an IPv6 host",
    "[::1]:5000/repo": "an IPv6 host",
}


@pytest.mark.parametrize("text", sorted(VALID))
def test_the_spec_s_valid_references_parse(text: str) -> None:
    domain, path, tag, digest = VALID[text]
    ref = parse_image_ref(text)
    assert ref == ImageRef(domain, path, tag, digest)
    assert values.image_ref_problem(text) is None
    assert values.check_image_ref(text) == text
    assert ref.name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "") == text


@pytest.mark.parametrize("text", sorted(INVALID))
def test_the_spec_s_invalid_references_are_refused(text: str) -> None:
    assert parse_image_ref(text) is None
    with pytest.raises(UserError) as info:
        values.check_image_ref(text, "--base-image", "correct it")
    assert info.value.exit_code == 2
    assert info.value.hint == "correct it"
    assert info.value.fields == {"field": "--base-image", "value": text}
    assert "not an image reference" in info.value.message


def test_a_value_that_is_not_text_is_no_reference() -> None:
    assert parse_image_ref(None) is None
    assert values.image_ref_problem(5) == "not an image reference"


# --- the three places agree: the grammar decides, each adds only its own rule ---------------


def _request_base(ref: str) -> None:
    doc = {"image": {"base": ref}, "framework": {"requirement": "torch"}}
    request_from_mapping(doc, path="envbuild.toml", default_name="demo")


def _render_base(ref: str) -> None:
    render.check_image_ref(ref, "--base-image", "correct it")


def _image_tag(ref: str) -> None:
    check_tag(ref)


ENTRY_POINTS: dict[str, Callable[[str], None]] = {
    "request [image] base": _request_base,
    "render --base-image": _render_base,
    "image --tag": _image_tag,
}


def _own_rule(entry: str, ref: ImageRef) -> bool:
    """What one place asks beyond the grammar (True: nothing more)."""
    if entry == "render --base-image":  # FROM without a tag pulls today's latest (DL3006)
        return ref.tag is not None or ref.digest is not None
    if entry == "image --tag":  # `docker tag` refuses to create a tag with a digest
        return ref.digest is None
    return True


def _accepts(entry: str, text: str) -> bool:
    try:
        ENTRY_POINTS[entry](text)
    except UserError as err:
        assert err.exit_code == 2 and err.hint
        return False
    return True


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("text", sorted(VALID) + sorted(INVALID))
def test_request_render_and_image_decide_with_the_one_grammar(entry: str, text: str) -> None:
    ref = parse_image_ref(text)
    assert (text in VALID) == (ref is not None)
    expected = ref is not None and _own_rule(entry, ref)
    assert _accepts(entry, text) == expected


@pytest.mark.parametrize("text", ["x:1:2", "a__b/c:1", "a__b/c"])
def test_the_cases_that_used_to_disagree_now_agree(text: str) -> None:
    decisions = {entry: _accepts(entry, text) for entry in ENTRY_POINTS}
    # `a__b/c` without a tag: render still wants one (DL3006), the grammar accepts it.
    if text == "a__b/c":
        decisions.pop("render --base-image")
    assert len(set(decisions.values())) == 1, decisions
    assert set(decisions.values()) == {text != "x:1:2"}


# --- the other values -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (
            values.check_package_name,
            ["torch", "a", "zope.interface", "typing_extensions"],
            ["", "-torch", "torch-", 'torch"', "torch\n", "a b"],
        ),
        (
            values.check_version,
            ["2.7.1+cu128", "1!2.0", "1.0rc1", "2.8.0.post2"],
            ["", "2.7.1\n", "not a version", "1" * 5000],
        ),
        (values.check_hash, [SHA256], ["sha256:" + "f" * 63, "md5:" + "0" * 32, SHA256.upper()]),
        (values.check_digest, [SHA256], ["sha256:abc\nRUN x", SHA512]),
        (
            values.check_url,
            ["https://pypi.org/simple", "http://m.example:8080/a/b"],
            [
                "ftp://x.example",
                "https://u:p@x.example/",
                "https://x.example/?q=1",
                "https://x.example/$(id)",
                "https://x.example/a b",
            ],
        ),
    ],
)
def test_value_checks(check: Callable[[object], str], good: list[str], bad: list[str]) -> None:
    for value in good:
        assert check(value) == value
    for value in bad:
        with pytest.raises(UserError) as info:
            check(value)
        assert "cannot go into a Dockerfile" in info.value.message
        assert info.value.hint == values.FIX_LOCK


def test_url_loses_a_trailing_slash_after_its_path() -> None:
    assert values.check_url("https://pypi.org/simple/") == "https://pypi.org/simple"
    assert values.check_url("https://pypi.org/") == "https://pypi.org"


def test_render_uses_the_same_checks() -> None:
    assert render.check_url is values.check_url
    assert render.check_hash is values.check_hash
    assert render.check_version is values.check_version
    assert render.check_package_name is values.check_package_name
    assert render.check_digest is values.check_digest
