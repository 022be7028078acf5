"""Measure a healthy GPU's baseline with the payload's own benchmark (matrix/baselines.toml).

python3 tests/gpu/measure_baseline.py [REPEATS]   -> JSON on stdout: every reading per GPU
and the median, which is what goes into matrix/baselines.toml as bf16_tflops/mem_bw_tbs.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    import torch

    from envbuild.payload import smoke_torch

    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    gpus = []
    for i in range(torch.cuda.device_count()):
        dev = torch.device("cuda", i)
        with torch.cuda.device(dev):
            runs = [smoke_torch._measure(torch, dev) for _ in range(repeats)]
        gpus.append(
            {
                "index": i,
                "name": torch.cuda.get_device_name(i),
                "bf16_tflops": [r["bf16_tflops"] for r in runs],
                "mem_bw_tbs": [r["mem_bw_tbs"] for r in runs],
                "bf16_tflops_median": statistics.median(r["bf16_tflops"] for r in runs),
                "mem_bw_tbs_median": statistics.median(r["mem_bw_tbs"] for r in runs),
            }
        )
    print(json.dumps({"torch": torch.__version__, "gpus": gpus}, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
