"""Where the seconds of the torch payload's tier-2 training part go (the shape of
envbuild/payload/smoke_torch.py `_train`: the same model, data and loop), with a mark after
each stage: import, CUDA context, DataLoader, model, `.to(cuda)`, optimizer, first batch, the
first step's forward / backward / clip / optimizer step, the other steps. One JSON line.

    python tests/gpu/train_probe.py [MODE]     # with the Python that holds the machine's torch

MODE: base (2 workers, pinned memory), w0 (no workers), nopin, early_iter (the workers started
before the model is made), early_iter_w0. Results: benchmarks/results/h100-train-probe.md.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

T0 = time.perf_counter()
MARKS: dict[str, float] = {}


def mark(name: str, torch: Any = None) -> None:
    if torch is not None:
        torch.cuda.synchronize()
    MARKS[name] = round(time.perf_counter() - T0, 3)


def main(mode: str) -> dict[str, Any]:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    mark("import")
    dev = torch.device("cuda", 0)
    torch.cuda.mem_get_info(0)
    mark("context")
    vocab, d, layers, heads, seq, batch, steps = 256, 512, 4, 8, 256, 32, 30
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(vocab, generator=g)
    x = torch.randint(0, vocab, (steps * batch, seq), generator=g)
    workers = 0 if "w0" in mode else 2
    data = TensorDataset(x, perm[x])
    loader = DataLoader(data, batch_size=batch, num_workers=workers, pin_memory="nopin" not in mode)
    mark("loader_made")
    it = iter(loader) if "early_iter" in mode else None
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(
        d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True
    )
    model = nn.Sequential(
        nn.Embedding(vocab, d),
        nn.TransformerEncoder(layer, layers, enable_nested_tensor=False),
        nn.LayerNorm(d),
        nn.Linear(d, vocab),
    )
    mark("model_cpu")
    model = model.to(dev)
    mark("model_to_dev", torch)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    mark("opt")
    it = it or iter(loader)
    losses = []
    for step in range(steps):
        xb, yb = next(it)
        if step == 0:
            mark("first_batch")
        xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(xb)
            loss = nn.functional.cross_entropy(logits.float().reshape(-1, vocab), yb.reshape(-1))
        if step == 0:
            mark("s0_fwd", torch)
        loss.backward()
        if step == 0:
            mark("s0_bwd", torch)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
        if step == 0:
            mark("s0_clip", torch)
        opt.step()
        if step == 0:
            mark("s0_opt", torch)
        losses.append(loss.item())
    mark("steps_done", torch)
    return {"mode": mode, "marks": MARKS, "loss": [round(losses[0], 3), round(losses[-1], 3)]}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "base")))
