"""One grammar for the values envbuild passes on: package names, versions, hashes, URLs and
image references (allow-lists: anything else is refused).

The request, render and `image --tag` all decide with these, so a value one stage accepts is
never refused by a later one. The `check_*` functions raise a `UserError` (exit 2) that names
the field and its value; where a place needs more than the grammar (render: a tag or digest,
hadolint DL3006; `docker tag`: no digest), that place adds its rule on top.

Image references follow the distribution reference grammar,
https://github.com/distribution/reference/blob/main/regexp.go and reference.go:
name [":" tag] ["@" digest], a name of at most 255 characters, and a digest whose algorithm
go-digest knows with exactly that algorithm's number of lowercase hex digits. A first
component with capitals is a registry host only when it has a "." or ":" (`Upper/case` is
refused: reference_test.go marks accepting it a FIXME). IPv6 registry
hosts (`[::1]:5000/x`) are left out on purpose: no image envbuild builds needs one, and
keeping brackets out keeps the allow-list for FROM lines smaller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envbuild.core.errors import UserError

FIX_LOCK = "fix the request (envbuild.toml) and run `envbuild lock <image dir>` again"
"""The next step when a value in a lock is refused: it came from the request."""

INVISIBLE_CHARS = "\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
"""Invisible and bidirectional formatting characters, as a regex class body: soft hyphen,
Arabic letter mark, Mongolian vowel separator, zero-width space and joiners, LRM/RLM, the
embeddings and overrides, word joiner and invisible operators, the isolates, BOM. A command
holding one reads one way in a review and runs another ("Trojan Source", CVE-2021-42574)."""
CONTROL_CHARS = r"\x00-\x1f\x7f-\x9f\u2028\u2029" + INVISIBLE_CHARS
"""C0/C1 controls, DEL, the Unicode line and paragraph separators (each breaks a line
somewhere) and INVISIBLE_CHARS: refused in every request value that reaches a command, a RUN
line or a Dockerfile."""
PACKAGE_NAME_RE = re.compile(r"[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]")  # PEP 508
VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")  # then PEP 440 through `packaging`
SHA256_RE = re.compile(r"sha256:[0-9a-f]{64}")
# URLs go unquoted into a RUN shell line: only characters that are neither shell nor
# Dockerfile syntax (no whitespace, quotes, backslash, $, `, ;, &, |, (), <>, globs, #, @).
URL_RE = re.compile(r"(https?)://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~:/%+=,-]*)?")

# --- image references (regexp.go; \w spelled out: Python's \w is Unicode, Go's is ASCII) ---
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_REMOTE_NAME = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"

TAG_RE = re.compile(_TAG)
DIGEST_RE = re.compile(_DIGEST)
REFERENCE_RE = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_REMOTE_NAME})"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?"
)
"""Leftmost-first like Go's regexp: in `foo/bar` the domain is `foo` (reference.go's Parse;
Docker's normalisation to docker.io is the engine's business)."""
NAME_MAX = 255
"""reference.go NameTotalLengthMax: the name (domain and path) without tag or digest."""
DIGEST_HEX = {"sha256": 64, "sha384": 96, "sha512": 128}
"""The algorithms go-digest registers, and the hex length of each (digest.Validate)."""


@dataclass(frozen=True)
class ImageRef:
    """A parsed image reference; `domain`, `tag` and `digest` are None when absent."""

    domain: str | None
    path: str
    tag: str | None
    digest: str | None

    @property
    def name(self) -> str:
        """The repository name: `[domain/]path`."""
        return f"{self.domain}/{self.path}" if self.domain else self.path


def _parsed(value: object) -> tuple[ImageRef | None, str | None]:
    """(the reference, None) or (None, why `value` is not one)."""
    if not isinstance(value, str):
        return None, "not an image reference"
    m = REFERENCE_RE.fullmatch(value)
    if m is None:
        return None, "not an image reference (registry/name:tag[@sha256:...])"
    ref = ImageRef(m.group("domain"), m.group("path"), m.group("tag"), m.group("digest"))
    if ref.domain and ref.domain != ref.domain.lower() and not set(".:") & set(ref.domain):
        # `Upper/case` passes the regexes only because `Upper` fits a host name: the spec's
        # own test table calls that a bug (FIXME in reference_test.go); refuse it as
        # Docker does a capital in a repository path.
        return None, "not an image reference (capitals in the repository path)"
    if len(ref.name) > NAME_MAX:
        return None, f"not an image reference (a name longer than {NAME_MAX} characters)"
    if ref.digest is not None:
        algorithm, _, hex_digits = ref.digest.partition(":")
        if algorithm not in DIGEST_HEX:
            return None, f"not an image reference (unknown digest algorithm {algorithm!r})"
        if len(hex_digits) != DIGEST_HEX[algorithm] or hex_digits != hex_digits.lower():
            return None, (
                f"not an image reference (a {algorithm} digest is "
                f"{DIGEST_HEX[algorithm]} lowercase hex digits)"
            )
    return ref, None


def parse_image_ref(value: object) -> ImageRef | None:
    """`value` as domain, path, tag and digest; None when it is not an image reference."""
    return _parsed(value)[0]


def image_ref_problem(value: object) -> str | None:
    """Why `value` is not an image reference (None: it is one)."""
    return _parsed(value)[1]


# --- checks that raise (render's wording: "<what> <value> cannot go into a Dockerfile") ------


def refuse(what: str, value: object, why: str, hint: str = FIX_LOCK) -> UserError:
    """The error for a refused value: the field, the value (shortened when huge) and why."""
    shown = repr(value)
    if len(shown) > 200:  # name a huge value by its start and length (tests/reliability)
        shown = f"{shown[:120]}... ({len(str(value))} characters)"
    return UserError(
        f"{what} {shown} cannot go into a Dockerfile: {why}",
        hint=hint,
        fields={"field": what, "value": str(value)},
    )


def check_match(
    pattern: re.Pattern[str], value: object, what: str, why: str, hint: str = FIX_LOCK
) -> str:
    """`value` when `pattern` matches all of it; a `refuse` error otherwise."""
    if not isinstance(value, str) or pattern.fullmatch(value) is None:
        raise refuse(what, value, why, hint)
    return value


def check_package_name(value: object, what: str = "package name") -> str:
    return check_match(PACKAGE_NAME_RE, value, what, "not a PEP 508 project name")


def check_version(value: object, what: str = "version") -> str:
    # Imported here: packaging is not needed by every command that imports this module.
    from envbuild.core.versions import try_version

    text = check_match(VERSION_RE, value, what, "not a PEP 440 version")
    if try_version(text) is None:  # also a part past the 4300-digit int limit
        raise refuse(what, value, "not a PEP 440 version")
    return text


def check_hash(value: object, what: str = "hash") -> str:
    return check_match(SHA256_RE, value, what, 'not "sha256:" and 64 lowercase hex digits')


def check_digest(value: object, what: str = "base image digest") -> str:
    """A locked image digest: sha256 only (what registries answer for a manifest)."""
    return check_match(SHA256_RE, value, what, 'not "sha256:" and 64 lowercase hex digits')


def check_url(value: object, what: str = "URL", hint: str = FIX_LOCK) -> str:
    """An http(s) URL of plain characters, without a trailing slash after its host."""
    text = check_match(
        URL_RE,
        value,
        what,
        "not an http(s) URL made only of letters, digits and . - _ ~ : / % + = ,"
        " (no credentials, query, quotes, spaces or shell characters)",
        hint,
    )
    return text.rstrip("/") if text.count("/") > 2 else text


def check_image_ref(value: object, what: str = "base image", hint: str = FIX_LOCK) -> str:
    """`value` when the grammar accepts it as an image reference; a `refuse` error otherwise."""
    problem = image_ref_problem(value)
    if problem is not None:
        raise refuse(what, value, problem, hint)
    assert isinstance(value, str)
    return value


# --- GPU names ---------------------------------------------------------------------------------

GPU_VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla"})
"""Brand words NVIDIA's list, NVML and users put in front of a GPU's name or leave out
("NVIDIA GeForce RTX 3090" from NVML, "GeForce RTX 3090" on https://developer.nvidia.com/cuda-gpus,
"RTX 3090" typed). "Quadro" stays: "Quadro RTX 6000" (7.5) is not "RTX 6000 Ada" (8.9)."""


def gpu_name_words(name: str) -> tuple[str, ...]:
    """THE normal form of a GPU name, for every reader of one (resolver, matrix checks, the memory
    fit): lower-case runs of letters and digits, leading brand words dropped. NVML's spellings
    ("NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB", "NVIDIA RTX 6000 Ada Generation") then
    start with the words of the listed name ("a100", "v100", "rtx 6000 ada")."""
    words = re.findall(r"[a-z0-9]+", name.lower())
    start = 0
    while start < len(words) and words[start] in GPU_VENDOR_WORDS:
        start += 1
    return tuple(words[start:])
