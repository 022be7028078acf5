"""THE reproducible tar of a build context (the engine sends it, `envbuild render --context
x.tar` writes it): members sorted by name, mtime 0, owned by root (uid/gid 0), mode 0644, PAX
format, so the same files always give the same bytes."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping


def context_tar(files: Mapping[str, bytes]) -> bytes:
    """The tar of `files` (relative path -> bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            data = files[name]
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
