"""Train the model for a few steps: `python -m torch_project.train --steps 5`.

Exits 1 when the loss did not fall, so a short run doubles as the image's smoke step
(`[smoke] command` in envbuild.toml).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from tqdm import tqdm

from torch_project.data import batches
from torch_project.model import make_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x, y, _ = batches(
        features=args.features, batch_size=args.batch_size, seed=args.seed, device=device
    )
    model = make_model(args.features).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss_fn = torch.nn.MSELoss()

    started = time.monotonic()
    losses = []
    for _step in tqdm(range(args.steps), disable=not sys.stderr.isatty()):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    seconds = time.monotonic() - started
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"torch {torch.__version__} on {name}: {args.steps} steps in {seconds:.2f} s, "
        f"loss {losses[0]:.4f} -> {losses[-1]:.4f}"
    )
    if not losses[-1] < losses[0]:
        print("the loss did not fall", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
