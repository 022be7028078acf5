"""The GPU architectures compiled into a shared library: its `.nv_fatbin` section, read with the
standard library (images carry no CUDA toolkit, so no cuobjdump).

nvcc embeds device code in an ELF section `.nv_fatbin` (`__nv_relfatbin` for relocatable
device code) holding fat binary containers: a 16-byte header (magic 0xBA55ED50, version,
header size, size of the entries), then entries of a header (kind 1 = PTX, 2 or 0x10 = ELF
cubin; header size at +4, payload size at +8, the SM number at +28, flags at +40) and their
payload. Layout: https://github.com/GrigoryEvko/nvopen-tools/blob/main/fatbin/FORMAT_SPECIFICATION.md
(reverse-engineered from cuobjdump); the flag bits of arch-specific (0x100000, "sm_90a") and
family (0x200000, "sm_100f") code were read from nvcc 13.0 output
(tests/fixtures/fatbin/, tests/unit/payload/test_fatbin.py). Read-only and bounded: only the section
is read, and a malformed one yields what was read before it.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

FATBIN_MAGIC = 0xBA55ED50
SECTIONS = (".nv_fatbin", "__nv_relfatbin")
KIND_PTX = 1
KINDS_CUBIN = (2, 0x10)
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY = 0x200000
MAX_SECTION = 2 << 30
"""A fatbin section larger than this is not read (libcublasLt's is ~0.5 GiB)."""


class NotElf(ValueError):
    """The file is not a 64-bit little-endian ELF shared object."""


def _sections(f: BinaryIO) -> dict[str, tuple[int, int]]:
    """name -> (offset, size) of an ELF64 little-endian file's sections."""
    head = f.read(64)
    if len(head) < 64 or head[:4] != b"\x7fELF":
        raise NotElf("not an ELF file")
    if head[4] != 2 or head[5] != 1:
        raise NotElf("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", head, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if shoff == 0 or shnum == 0 or shentsize < 64 or shstrndx >= shnum:
        return {}
    f.seek(shoff)
    table = f.read(shentsize * shnum)
    raw = []
    for i in range(len(table) // shentsize):
        name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", table, i * shentsize)
        raw.append((name, offset, size))
    if shstrndx >= len(raw):
        return {}
    f.seek(raw[shstrndx][1])
    names = f.read(min(raw[shstrndx][2], 1 << 20))
    out = {}
    for name, offset, size in raw:
        end = names.find(b"\0", name)
        if 0 <= name < len(names) and end > name:
            out[names[name:end].decode("ascii", "replace")] = (offset, size)
    return out


def fatbin_archs(blob: bytes) -> list[str]:
    """Every entry of the fat binary containers in `blob`: "sm_90", "sm_90a", "compute_90"."""
    out: list[str] = []
    pos = 0
    while pos + 16 <= len(blob):
        magic, _version, header_size, size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC or header_size < 16:
            pos += 8  # containers are 8-byte aligned; padding may separate them
            continue
        entry = pos + header_size
        end = min(entry + size, len(blob))
        while entry + 64 <= end:
            kind, _, entry_size, payload = struct.unpack_from("<HHIQ", blob, entry)
            arch = struct.unpack_from("<I", blob, entry + 28)[0]
            flags = struct.unpack_from("<Q", blob, entry + 40)[0]
            if entry_size < 64:
                break
            if kind == KIND_PTX or kind in KINDS_CUBIN:
                suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
                out.append(f"{'compute' if kind == KIND_PTX else 'sm'}_{arch}{suffix}")
            entry += entry_size + payload
        pos = max(end, pos + 16)
    return out


def library_archs(path: str) -> list[str]:
    """The architectures of the device code in a shared library, sorted and unique; [] when
    it has none (a CPU-only library). NotElf for a file that is not ELF64 little-endian."""
    found: set[str] = set()
    with open(path, "rb") as f:
        sections = _sections(f)
        for name in SECTIONS:
            if name not in sections:
                continue
            offset, size = sections[name]
            if size > MAX_SECTION:
                continue
            f.seek(offset)
            found.update(fatbin_archs(f.read(size)))
    return sorted(found, key=_arch_key)


def _arch_key(arch: str) -> tuple[int, int, str]:
    kind, _, rest = arch.partition("_")
    digits = "".join(c for c in rest if c.isdigit())
    return (int(digits or 0), 0 if kind == "sm" else 1, rest)
