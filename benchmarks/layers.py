"""What a built image carries (section 4 of `make bench`): its size beside its base and
/opt/venv, and what its layers hold twice, read from `docker image save`: bytes a later layer
deletes or overwrites, identical large files in two layers, CUDA libraries in two layers,
wheels left in a layer."""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import Row, Section, _checked, _log, _run, row


def _image_size(ref: str) -> int | None:
    res = _run(["docker", "image", "inspect", ref, "--format", "{{.Size}}"])
    return int(res.stdout.strip()) if res.returncode == 0 else None


def _history_ids(ref: str) -> list[tuple[str, str]]:
    """(image id, created-by) of each build step, oldest first (created-by JSON-quoted by
    docker, since a RUN may span lines)."""
    res = _run(["docker", "history", "--no-trunc", "--format", "{{.ID}}\t{{json .CreatedBy}}", ref])
    out = []
    for line in reversed(res.stdout.splitlines()):
        ident, _, created = line.partition("\t")
        try:
            out.append((ident, str(json.loads(created))))
        except ValueError:
            out.append((ident, created))
    return out


def _du(ref: str, path: str) -> int | None:
    res = _run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "du", ref, "-sb", path]
    )
    return int(res.stdout.split()[0]) if res.returncode == 0 and res.stdout.strip() else None


_CUDA_LIB = re.compile(r"lib(cu|nv|cudnn|nccl|cublas|cufft|curand|cusparse|cusolver)\w*\.so")


def layer_report(ref: str, *, min_bytes: int = 1 << 20) -> dict[str, Any]:
    """What the image's layers carry twice: bytes a later layer deletes or overwrites, identical
    large files in two layers, CUDA libraries in two layers, wheels left in a layer."""
    with tempfile.TemporaryDirectory(prefix="envbuild-bench-save-") as tmp:
        archive = Path(tmp) / "image.tar"
        _checked(["docker", "image", "save", "-o", str(archive), ref])
        with tarfile.open(archive) as outer:
            manifest = json.load(_member(outer, "manifest.json"))[0]
            config = json.load(_member(outer, manifest["Config"]))
            steps = [
                str(h.get("created_by", ""))
                for h in config.get("history", [])
                if not h.get("empty_layer")
            ]
            layers: list[dict[str, tuple[int, str]]] = []
            whiteouts: list[list[str]] = []
            sizes: list[int] = []
            for path in manifest["Layers"]:
                files: dict[str, tuple[int, str]] = {}
                wh: list[str] = []
                total = 0
                with tarfile.open(fileobj=_member(outer, path)) as layer:
                    for m in layer:
                        name = "/" + m.name.lstrip("./")
                        base = name.rsplit("/", 1)[-1]
                        if base.startswith(".wh."):
                            parent = name.rsplit("/", 1)[0]
                            wh.append(parent if base == ".wh..wh..opq" else f"{parent}/{base[4:]}")
                            continue
                        if not m.isfile():
                            continue
                        total += m.size
                        digest = ""
                        if m.size >= min_bytes:
                            digest = _sha256(layer.extractfile(m))
                        files[name] = (m.size, digest)
                layers.append(files)
                whiteouts.append(wh)
                sizes.append(total)
    return _analyse_layers(layers, whiteouts, sizes, steps, min_bytes)


def _member(tar: tarfile.TarFile, name: str) -> Any:
    f = tar.extractfile(name)
    if f is None:
        raise RuntimeError(f"{name} missing from the saved image")
    return f


def _sha256(f: Any) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def _step_text(created_by: str) -> str:
    """A history entry as the Dockerfile said it: no build-arg prefix, shell or #(nop)."""
    pattern = r"^(\|\d+ (\S+=\S* )*)?/bin/(ba)?sh( -o pipefail)? -c (#\(nop\) )?"
    return re.sub(pattern, "", created_by).strip()


def _analyse_layers(
    layers: list[dict[str, tuple[int, str]]],
    whiteouts: list[list[str]],
    sizes: list[int],
    steps: list[str],
    min_bytes: int,
) -> dict[str, Any]:
    def covered(path: str, gone: str) -> bool:
        return path == gone or path.startswith(gone.rstrip("/") + "/")

    shadowed: dict[int, int] = {}
    examples: dict[int, tuple[int, str]] = {}
    for i, files in enumerate(layers):
        later_paths = [set(layers[j]) for j in range(i + 1, len(layers))]
        later_wh = [w for j in range(i + 1, len(layers)) for w in whiteouts[j]]
        for path, (size, _) in files.items():
            if any(path in p for p in later_paths) or any(covered(path, w) for w in later_wh):
                shadowed[i] = shadowed.get(i, 0) + size
                if size > examples.get(i, (-1, ""))[0]:
                    examples[i] = (size, path)
    by_digest: dict[str, list[tuple[int, str, int]]] = {}
    for i, files in enumerate(layers):
        for path, (size, digest) in files.items():
            if digest:
                by_digest.setdefault(digest, []).append((i, path, size))
    duplicates: list[dict[str, Any]] = [
        {"size": v[0][2], "copies": [f"layer {i}: {p}" for i, p, _ in v]}
        for v in by_digest.values()
        if len({i for i, _, _ in v}) > 1
    ]
    cuda_by_name: dict[str, set[int]] = {}
    for i, files in enumerate(layers):
        for path in files:
            base = path.rsplit("/", 1)[-1]
            if _CUDA_LIB.match(base):
                cuda_by_name.setdefault(base, set()).add(i)
    wheels = [
        f"layer {i}: {p} ({s / 1e6:.0f} MB)"
        for i, files in enumerate(layers)
        for p, (s, _) in files.items()
        if p.endswith(".whl")
    ]

    def largest(i: int) -> str:
        if not layers[i]:
            return ""
        path, (size, _) = max(layers[i].items(), key=lambda kv: kv[1][0])
        return f"{path} ({size / 1e6:.1f} MB)"

    def step(i: int) -> str:
        text = steps[i] if i < len(steps) else "?"
        text = _short(_step_text(text))
        return text[:90] + ("..." if len(text) > 90 else "")

    return {
        "layers": [
            {"index": i, "bytes": sizes[i], "step": step(i), "largest": largest(i)}
            for i in range(len(layers))
        ],
        "shadowed_bytes": sum(shadowed.values()),
        "shadowed": [
            {"layer": i, "bytes": b, "step": step(i), "example": examples.get(i, (0, ""))[1]}
            for i, b in sorted(shadowed.items())
        ],
        "duplicate_bytes": sum(d["size"] * (len(d["copies"]) - 1) for d in duplicates),
        "duplicates": sorted(duplicates, key=lambda d: -int(d["size"]))[:10],
        "cuda_libs_in_several_layers": sorted(n for n, ls in cuda_by_name.items() if len(ls) > 1),
        "wheels_in_layers": wheels,
        "wheel_bytes": sum(
            s for files in layers for p, (s, _) in files.items() if p.endswith(".whl")
        ),
    }


def _short(text: str) -> str:
    """Build-context digests in history entries ("COPY dir:<64 hex> in /x") say nothing to a
    reader: keep their first 12 characters."""
    return re.sub(r"\b(file|dir|multi):([0-9a-f]{12})[0-9a-f]{13,}", r"\1:\2", text)


def measure_sizes(out: Section, tags: tuple[str, str, str], peer_name: str) -> None:
    """Sizes and layer reports of both images (into `out` as size_envbuild, size_peer) and
    the table rows that compare them (onto out["rows"]); `tags` is (base, envbuild's image,
    the peer's)."""
    bench_base, ours_tag, peer_tag = tags
    rows: list[Row] = out["rows"]
    _log("build: sizes and layers")
    for label, tag in (("envbuild", ours_tag), ("peer", peer_tag)):
        size = _image_size(tag)
        base = _image_size(bench_base)
        venv = _du(tag, "/opt/venv")
        entry: dict[str, Any] = {"image_bytes": size, "base_bytes": base, "venv_bytes": venv}
        if size and base and venv:
            entry["overhead_ratio"] = size / (base + venv)
        entry["layers"] = layer_report(tag)
        out[f"size_{label}"] = entry
    e, p = out["size_envbuild"], out["size_peer"]
    rows.append(
        row(
            "image size",
            e["image_bytes"] / 1e6,
            p["image_bytes"] / 1e6,
            peer_name=peer_name,
            unit="MB",
        )
    )
    if "overhead_ratio" in e and "overhead_ratio" in p:
        rows.append(
            row(
                "overhead: image size / (base + /opt/venv content)",
                e["overhead_ratio"],
                p["overhead_ratio"],
                peer_name=peer_name,
                unit="x",
                note=f"base {e['base_bytes'] / 1e6:.0f} MB; venv {e['venv_bytes'] / 1e6:.0f} MB "
                f"(envbuild) / {p['venv_bytes'] / 1e6:.0f} MB (peer)",
            )
        )
    for what, key in (
        ("bytes in layers a later layer deletes or overwrites", "shadowed_bytes"),
        ("wheel files shipped in the image's layers (deleted later or not)", "wheel_bytes"),
        ("identical files (>= 1 MiB) in two layers, extra copies", "duplicate_bytes"),
    ):
        ours, theirs = e["layers"][key] / 1e6, p["layers"][key] / 1e6
        rows.append(row(what, ours, theirs, peer_name=peer_name, unit="MB"))
