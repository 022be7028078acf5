"""Container registries (thin I/O): the verified manifest digest of an image reference,
through the Registry HTTP API v2 (https://distribution.github.io/distribution/spec/api/), and
what a refused push means. Pushing itself is the engine's (`ContainerEngine.push`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from envbuild.core.httpbody import read_body, remaining

_MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


MAX_MANIFEST_BYTES = 4 << 20
"""The distribution spec lets registries refuse manifests over 4 MiB; a bigger answer is not a
manifest worth pinning."""


def split_ref(ref: str) -> tuple[str, str, str]:
    """ "nvidia/cuda:12.8.1-base-ubuntu24.04" -> (registry, repository, tag); Docker Hub rules.
    A digest (`name@sha256:...`) is not part of the name: it is dropped here (tag "latest")."""
    ref = ref.split("@", 1)[0]
    name, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "latest")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest, tag
    repo = name if "/" in name else f"library/{name}"
    return "registry-1.docker.io", repo, tag


def host_unknown(registry: str, environ: Mapping[str, str] | None = None) -> bool:
    """True when the registry's host name does not resolve here and no proxy would reach it
    for us: there is no registry to ask, and the HTTP stack need not even be imported (an
    air-gapped build host locks unpinned at once; requests and urllib3 are most of a
    lock's own start-up). Any other doubt is left to the request itself."""
    import os
    import socket
    import sys

    env = os.environ if environ is None else environ
    # requests finds proxies as urllib.request.getproxies does: any *_proxy variable, in
    # any case, and on macOS and Windows the system's settings, which are not read here.
    if sys.platform in ("darwin", "win32") or any(
        k.lower().endswith("_proxy") and k.lower() != "no_proxy" and v for k, v in env.items()
    ):
        return False
    try:
        socket.getaddrinfo(_host(registry), 443, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return True
    except (OSError, UnicodeError):
        return False
    return False


def _host(registry: str) -> str:
    """ "[::1]:5000" -> "::1", "localhost:5000" -> "localhost", "ghcr.io" -> "ghcr.io"."""
    if registry.startswith("["):
        return registry[1:].partition("]")[0]
    return registry.partition(":")[0]


def is_loopback(registry: str) -> bool:
    """A registry on this machine (`localhost`, 127.0.0.0/8, ::1), which Docker and Podman
    may reach over plain HTTP without configuration (Docker's insecure-registries default)."""
    host = _host(registry)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def retrying_session(retries: int = 2) -> Any:
    """A requests session whose retries are urllib3's: a dropped read or a 5xx answer is
    asked again with backoff. Not retried: a refused connection or unknown host (no registry
    here: `lock` goes on unpinned at once), TLS errors, and 429 (a rate limit outlasts any
    wait worth making)."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    retry = Retry(
        total=retries,
        connect=0,
        other=0,
        read=retries,
        status=retries,
        backoff_factor=0.5,
        status_forcelist=(500, 502, 503, 504),
        allowed_methods=frozenset({"GET", "HEAD"}),
        raise_on_status=False,
    )
    session = requests.Session()
    session.mount("https://", HTTPAdapter(max_retries=retry))
    session.mount("http://", HTTPAdapter(max_retries=retry))
    return session


def verified_digest(ref: str, body: bytes, claimed: str) -> str:
    """The manifest's digest recomputed from its bytes (the registry spec's content
    addressing); RegistryError when the registry's `Docker-Content-Digest` claims another."""
    computed = "sha256:" + hashlib.sha256(body).hexdigest()
    if claimed and claimed != computed:
        from envbuild.core.errors import RegistryError

        raise RegistryError(
            f"the registry's manifest of {ref} does not match its digest: it says {claimed}, "
            f"its bytes hash to {computed}",
            hint="something between here and the registry changed the manifest (a proxy or "
            "mirror); lock where the registry is reached directly",
            fields={"ref": ref, "claimed": claimed, "computed": computed, "kind": "digest"},
        )
    return computed


TOTAL_S = 30.0
"""The whole lookup of one base image (token and manifest, every retry): past it `lock`
goes on without the digest. `timeout` alone is per read, which a server sending a byte at a
time never trips."""
MAX_TOKEN_BYTES = 1 << 20


def registry_digest(
    ref: str, *, timeout: float = 5.0, retries: int = 2, total_s: float = TOTAL_S
) -> str | None:
    """The manifest digest of `ref` from its registry (Registry HTTP API v2), verified by
    hashing the manifest bytes; None when no registry answers with it.

    GET /v2/<repo>/manifests/<tag>; an anonymous bearer token comes from the realm in
    `WWW-Authenticate` (distribution spec, "Token authentication"). A registry on this machine
    is tried over HTTPS, then plain HTTP, as the engines do (`is_loopback`).
    """
    if "@" in ref:  # already names its digest: no tag to look up (split_ref would say "latest")
        return None
    registry, repo, tag = split_ref(ref)
    if host_unknown(registry):
        return None
    import requests  # lazy: heavy, and only `lock` needs it

    schemes = ("https", "http") if is_loopback(registry) else ("https",)
    session = retrying_session(retries)
    deadline = time.monotonic() + total_s
    for scheme in schemes:
        url = f"{scheme}://{registry}/v2/{repo}/manifests/{tag}"
        try:
            answer = _get_manifest(session, url, repo, timeout, deadline)
        except requests.exceptions.SSLError:
            continue  # a plain-HTTP registry on this machine: try http
        except (requests.RequestException, ValueError):  # BodyError too: too large or slow
            return None
        if answer is None:
            return None
        resp, body = answer
        if resp.status_code != 200:
            return None
        return verified_digest(ref, body, resp.headers.get("Docker-Content-Digest", ""))
    return None


def lock_digest(
    ref: str,
    previous_ref: str | None,
    previous_digest: str | None,
    *,
    offline: bool,
    lookup: Callable[[str], str | None] | None = None,
) -> str | None:
    """The digest a new lock records for its base `ref`: the previous lock's when it locked the
    same ref (a re-lock does not move the base), else the registry's (`lookup`, default
    registry_digest; not asked with --offline); None when neither gives one."""
    if previous_ref == ref and previous_digest is not None:
        return previous_digest
    if offline:
        return None
    return (lookup or registry_digest)(ref)


def _get(
    session: Any, url: str, timeout: float, deadline: float, limit: int, **kwargs: Any
) -> tuple[Any, bytes]:
    """A GET and its body, bounded in size and in total time (`envbuild.core.httpbody`)."""
    resp = session.get(url, timeout=remaining(deadline, timeout), stream=True, **kwargs)
    return resp, read_body(resp, limit=limit, deadline=deadline, what=f"the answer of {url}")


def _get_manifest(
    session: Any, url: str, repo: str, timeout: float, deadline: float
) -> tuple[Any, bytes] | None:
    """The manifest response and body, with an anonymous token when the registry asks for
    one; None when it wants credentials envbuild does not have."""
    headers = {"Accept": _MANIFEST_TYPES}
    resp, body = _get(session, url, timeout, deadline, MAX_MANIFEST_BYTES, headers=headers)
    if resp.status_code != 401:
        return resp, body
    challenge = resp.headers.get("WWW-Authenticate", "")
    token = bearer_token(session, challenge, f"repository:{repo}:pull", timeout, deadline)
    if token is None:
        return None
    headers["Authorization"] = f"Bearer {token}"
    return _get(session, url, timeout, deadline, MAX_MANIFEST_BYTES, headers=headers)


def bearer_token(
    session: Any, challenge: str, scope: str, timeout: float, deadline: float | None = None
) -> str | None:
    """An anonymous bearer token for `scope` from the realm a 401 answer's
    `WWW-Authenticate` challenge names (distribution spec, "Token authentication"); None when
    the registry asks for another scheme or its token endpoint gives none."""
    params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = params.pop("realm", "")
    if not realm or not challenge.lower().startswith("bearer"):
        return None
    params.setdefault("scope", scope)
    end = deadline if deadline is not None else time.monotonic() + timeout
    _resp, answer = _get(session, realm, timeout, end, MAX_TOKEN_BYTES, params=params)
    return _token(answer)


def _token(body: bytes) -> str | None:
    """The bearer token of a token endpoint's answer: a JSON object with a string `token` or
    `access_token` (distribution spec, "Token Response Fields"); None for anything else."""
    from envbuild.core.documents import DocumentError, json_loads

    try:
        answer = json_loads(body)
    except DocumentError:
        return None
    if not isinstance(answer, dict):
        return None
    token = answer.get("token") or answer.get("access_token")
    return token if isinstance(token, str) and token.isprintable() else None


# --- pushing (the engine pushes; here: names and what its refusals mean) ---------------------


def split_tag(ref: str) -> tuple[str, str]:
    """ "127.0.0.1:5000/team/torch:1" -> ("127.0.0.1:5000/team/torch", "1"); no tag: latest."""
    name, sep, tag = ref.rpartition(":")
    if sep and "/" not in tag:
        return name, tag
    return ref, "latest"


# What registries and engines answer, by cause (Docker 20.10 and Podman 4.3 messages, measured
# against docker-registry 2.8 for auth, plain-HTTP and 429; the rest from the distribution
# spec's error codes: https://distribution.github.io/distribution/spec/api/#errors-2).
_PUSH_FAILURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "quota",
        (
            "toomanyrequests",
            "too many requests",
            "rate limit",
            "quota",
            "429",
            "request entity too large",
            "413",
            "insufficient storage",
            "507",
        ),
    ),
    (
        "auth",
        (
            "unauthorized",
            "authentication required",
            "no basic auth credentials",
            "requested access to the resource is denied",
            "denied:",
            "insufficient_scope",
            "forbidden",
            "403",
        ),
    ),
    ("tls", ("x509:", "tls:", "server gave http response to https client", "certificate")),
    (
        "unreachable",
        (
            "connection refused",
            "no such host",
            "i/o timeout",
            "dial tcp",
            "network is unreachable",
            "context deadline exceeded",
            "no route to host",
        ),
    ),
)


def push_kind(message: str) -> str:
    """ "quota", "auth", "tls", "unreachable" or "other" for an engine's push error text."""
    text = message.lower()
    for kind, markers in _PUSH_FAILURES:
        if any(_says(text, marker) for marker in markers):
            return kind
    return "other"


def _says(text: str, marker: str) -> bool:
    """A word marker anywhere; a status code ("429") only as a number of its own, so a port,
    an address or a digest that happens to hold those digits ("10.0.0.5:34291") is not one."""
    if not marker.isdigit():
        return marker in text
    return re.search(rf"(?<![\w.:]){marker}(?![\w.:])", text) is not None


def _push_hint(kind: str, registry: str, repo: str) -> str:
    passed = "the image passed its smoke test and stays tagged here; push it again when fixed"
    hints = {
        "auth": f"log in with an account that may push to {repo}: `docker login {registry}` "
        f"(Podman: `podman login {registry}`); in CI, the registry's token (GitHub Actions: "
        "GITHUB_TOKEN with `packages: write`; GitLab: CI_REGISTRY_USER/CI_REGISTRY_PASSWORD)",
        "tls": f"the engine does not trust {registry}, or it speaks plain HTTP: put its CA in "
        f"/etc/docker/certs.d/{registry}/ca.crt (Podman: /etc/containers/certs.d/), or list a "
        "plain-HTTP registry you trust under insecure-registries in /etc/docker/daemon.json "
        "(127.0.0.0/8 is allowed by default; Podman: `insecure = true` for it in "
        "/etc/containers/registries.conf)",
        "quota": f"{registry} refused for a quota or rate limit: wait and rerun, delete old "
        "tags, or raise the quota",
        "unreachable": f"check the address and that the engine's machine reaches {registry} "
        "(DNS; a proxy is the engine's own setting, not this shell's)",
        "other": "read the registry's message",
    }
    return f"{hints[kind]}; {passed}"


def push_error(ref: str, message: str) -> Exception:
    """The typed error (RegistryError, exit 8) for a refused push, with what to do."""
    from envbuild.core.errors import RegistryError

    registry, path, _ = split_ref(ref)
    kind = push_kind(message)
    return RegistryError(
        f"push of {ref} failed ({kind}): {message.strip()}",
        hint=_push_hint(kind, registry, path),
        fields={"ref": ref, "registry": registry, "kind": kind, "engine_message": message},
    )
