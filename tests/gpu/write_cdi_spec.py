"""Write a CDI spec for this machine's NVIDIA GPUs, as `nvidia-ctk cdi generate` would, where
the NVIDIA Container Toolkit cannot be installed (the H200 device machine reaches no registry).

Devices: one per /dev/nvidiaN, named by index and by UUID (from `nvidia-smi -L`), and `all`.
Common edits: the control nodes, the driver's library folder mounted read-only and put on
LD_LIBRARY_PATH, nvidia-smi. Shape: CDI SPEC.md
(https://github.com/cncf-tags/container-device-interface/blob/main/SPEC.md).

    python3 tests/gpu/write_cdi_spec.py /etc/cdi/nvidia.yaml
    python3 tests/gpu/write_cdi_spec.py - --libdir /usr/lib64 --gpu /dev/nvidia0=GPU-abc
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys

CONTROL_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)
SMI_PLACES = ("/usr/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi")


def find_libdir() -> str:
    """The folder of libcuda.so.1: ldconfig's cache first, then the usual places."""
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False)
        m = re.search(r"libcuda\.so\.1 \(.*\) => (\S+)", cache.stdout)
        if m:
            return os.path.dirname(os.path.realpath(m.group(1)))
    except OSError:
        pass
    for root in ("/usr/local/nvidia", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):
        for path in glob.glob(os.path.join(root, "**", "libcuda.so.1"), recursive=True):
            return os.path.dirname(os.path.realpath(path))
    raise SystemExit("no libcuda.so.1 on this machine: is the NVIDIA driver installed?")


def driver_mounts(libdir: str) -> list[str]:
    """What to bind: a folder of its own (/usr/local/nvidia/lib64) whole; from a system
    library folder only the driver's files, never the folder over the image's own."""
    if not libdir.startswith(("/usr/lib", "/lib")):
        return [libdir]
    names = ("libcuda.so*", "libnvidia-*.so*", "libcudadebugger.so*", "libnvcuvid.so*")
    return sorted({p for n in names for p in glob.glob(os.path.join(libdir, n))})


def gpu_uuids() -> dict[int, str]:
    """index -> UUID from `nvidia-smi -L` ("GPU 0: NVIDIA H200 (UUID: GPU-...)")."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    except OSError:
        return {}
    found = re.findall(r"^GPU (\d+):.*\(UUID: (GPU-[0-9a-fA-F-]+)\)", out.stdout, re.M)
    return {int(i): u for i, u in found}


def spec_text(gpus: list[tuple[str, str, str]], nodes: list[str], libdir: str, smi: str) -> str:
    """gpus: (index name, uuid or "", device node)."""
    y = ['cdiVersion: "0.5.0"', "kind: nvidia.com/gpu", "devices:"]
    for index, uuid, node in gpus:
        for name in (index, uuid):
            if name:
                y += [f'- name: "{name}"', "  containerEdits:", "    deviceNodes:"]
                y += [f"    - path: {node}"]
    y += ["- name: all", "  containerEdits:", "    deviceNodes:"]
    y += [f"    - path: {node}" for _, _, node in gpus]
    y += ["containerEdits:", "  env:", f"  - LD_LIBRARY_PATH={libdir}"]
    y += ["  - NVIDIA_VISIBLE_DEVICES=void", "  deviceNodes:"]
    y += [f"  - path: {n}" for n in nodes]
    y += ["  mounts:"]
    mounts = driver_mounts(libdir)
    if not mounts:
        raise SystemExit(f"no driver library (libcuda.so*) in {libdir}")
    for path in mounts:
        y += [f"  - hostPath: {path}", f"    containerPath: {path}"]
        y += ["    options: [ro, nosuid, nodev, bind]"]
    if smi:
        y += [f"  - hostPath: {smi}", "    containerPath: /usr/bin/nvidia-smi"]
        y += ["    options: [ro, nosuid, nodev, bind]"]
    return "\n".join(y) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("output", help="the spec file to write, or - for stdout")
    ap.add_argument("--libdir", help="the driver's library folder [where libcuda.so.1 is]")
    ap.add_argument("--gpu", action="append", default=[], help="NODE=UUID, instead of probing")
    args = ap.parse_args()
    if args.gpu:
        pairs = [g.split("=", 1) for g in args.gpu]
        nodes_found = [(n, u) for n, u in pairs]
        nodes = list(CONTROL_NODES[:3])
        smi = SMI_PLACES[0]
    else:
        uuids = gpu_uuids()
        devs = sorted(glob.glob("/dev/nvidia[0-9]*"), key=lambda p: int(p[len("/dev/nvidia") :]))
        nodes_found = [(d, uuids.get(int(d[len("/dev/nvidia") :]), "")) for d in devs]
        nodes = [n for n in CONTROL_NODES if os.path.exists(n)]
        smi = next((p for p in SMI_PLACES if os.path.exists(p)), "")
    if not nodes_found:
        raise SystemExit("no /dev/nvidiaN device node: no GPU to describe")
    gpus = [(node[len("/dev/nvidia") :], uuid, node) for node, uuid in nodes_found]
    text = spec_text(gpus, nodes, args.libdir or find_libdir(), smi)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
