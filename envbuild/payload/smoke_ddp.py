"""The multi-GPU smoke test: one process per GPU (torchrun's environment: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR/PORT), NCCL with a 60 s collective timeout, and an outer kill.

Checks, after NVIDIA's DDP validation and nccl-tests: an all-reduce gives the exact sum, DDP
replicas hold identical weights after a few steps, and the all-reduce bus bandwidth.
Run by `launch()` as `python smoke_ddp.py` (a script in the payload folder).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

try:
    from . import smoke_checks as ck
except ImportError:  # run as a script or a folder: siblings are top-level
    import smoke_checks as ck  # type: ignore[no-redef,import-not-found]

MARKER = "ENVBUILD-DDP"
STARTUP_GRACE_S = 90  # import torch + NCCL init on a cold host, on top of the collective timeout


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(world: int, *, timeout_s: int = 60, steps: int = 10) -> dict[str, Any]:
    """Start `world` ranks, wait at most timeout_s + grace, kill what is left; per-rank results."""
    port = _free_port()
    procs = []
    t0 = time.perf_counter()
    for rank in range(world):
        env = dict(os.environ)
        env.update(
            {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "ENVBUILD_DDP_TIMEOUT_S": str(timeout_s),
                "ENVBUILD_DDP_STEPS": str(steps),
            }
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, os.path.abspath(__file__)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    deadline = t0 + timeout_s + STARTUP_GRACE_S
    ranks: list[dict[str, Any]] = []
    killed = False
    for rank, p in enumerate(procs):
        try:
            stdout, stderr = p.communicate(timeout=max(1.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            killed = True
            for q in procs:
                q.kill()
            stdout, stderr = p.communicate()
        result: dict[str, Any] = {"rank": rank, "returncode": p.returncode}
        for line in reversed(stdout.splitlines()):
            if line.startswith(MARKER + " "):
                result.update(json.loads(line[len(MARKER) + 1 :]))
                break
        else:
            result["error"] = (stderr.strip().splitlines() or ["no output"])[-1][:300]
        ranks.append(result)
    return {
        "world": world,
        "killed": killed,
        "wall_s": round(time.perf_counter() - t0, 2),
        "ranks": ranks,
    }


def checks_from(
    ddp: dict[str, Any],
    world: int,
    *,
    gpu_name: str = "",
    baseline: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The DDP checks of one `launch()` result; the bus bandwidth is set against `baseline`'s
    NVLink figure (matrix/baselines.toml)."""
    ranks = ddp.get("ranks", [])
    ok_ranks = [r for r in ranks if "allreduce" in r]
    expected = float(world * (world + 1) // 2)
    if ddp.get("killed") or len(ok_ranks) < world:
        err = next((r.get("error") for r in ranks if r.get("error")), "timed out")
        return [
            ck.check(
                "ddp",
                2,
                "fail",
                f"{len(ok_ranks)}/{world} ranks finished in {ddp.get('wall_s')} s: {err}",
                "NCCL could not run across the GPUs: check `nvidia-smi topo -m`, /dev/shm, and "
                "rerun with NCCL_DEBUG=INFO",
            )
        ]
    got = [r["allreduce"] for r in ok_ranks]
    out = [ck.check_allreduce(got[0] if len(set(got)) == 1 else None, expected, world=world)]
    out.append(ck.check_weights_equal([str(r["weights"]) for r in ok_ranks], world=world))
    if not all(r.get("gathered_equal") for r in ok_ranks):
        out[-1] = ck.check(
            "ddp-weights",
            2,
            "fail",
            "all_gather of the weights differs between ranks",
            "DDP replicas diverged: NCCL or GPU fault",
        )
    bw = min(float(r.get("busbw_gbs", 0.0)) for r in ok_ranks)
    nvls = "off" if os.environ.get("NCCL_NVLS_ENABLE") == "0" else "default"
    out.append(ck.check_busbw(bw, world=world, gpu_name=gpu_name, baseline=baseline, nvls=nvls))
    return out


def _worker() -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = int(os.environ.get("ENVBUILD_DDP_TIMEOUT_S", "60"))
    steps = int(os.environ.get("ENVBUILD_DDP_STEPS", "10"))
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", timeout=timedelta(seconds=timeout))
    result: dict[str, Any] = {}

    t = torch.full((1024,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    vals = set(t.tolist())
    result["allreduce"] = vals.pop() if len(vals) == 1 else None

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).to(dev)
    ddp = DDP(model, device_ids=[rank])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    g = torch.Generator(device=dev).manual_seed(100 + rank)  # different data on every rank
    for _ in range(steps):
        xb = torch.randn(64, 512, device=dev, generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = (ddp(xb).float() - xb).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    flat = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    result["gathered_equal"] = all(torch.equal(gathered[0], x) for x in gathered)
    result["weights"] = f"{float(flat.double().sum()):.17g}/{float(flat.double().abs().sum()):.17g}"

    buf = torch.ones(64 * 2**20, device=dev, dtype=torch.float32)  # 256 MiB
    for _ in range(3):
        dist.all_reduce(buf)
    torch.cuda.synchronize(dev)
    iters = 10
    ts = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    torch.cuda.synchronize(dev)
    secs = (time.perf_counter() - ts) / iters
    result["busbw_gbs"] = round(ck.bus_bandwidth(buf.numel() * 4, secs, world), 1)
    dist.barrier()
    dist.destroy_process_group()
    print(MARKER + " " + json.dumps(result, sort_keys=True), flush=True)


if __name__ == "__main__":
    _worker()
