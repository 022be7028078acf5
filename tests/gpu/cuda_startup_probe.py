"""Where a fresh process's seconds go before torch computes on the GPU (the H200 build bench
runs it on the host and in a container, tests/gpu/h200_build_bench.py `probes`): import torch,
CUDA's start (torch.cuda.init), the first context use (mem_get_info), the first kernel, the
first cuBLAS bf16 matmul, the first cuDNN convolution, the first SDPA. Prints one JSON line.

`--early`: a thread starts the CUDA driver (cuInit) and retains device 0's primary context
through the driver API (ctypes, libcuda.so.1) while the main thread imports torch; torch then
uses that same primary context (CUDA Runtime API: "the runtime uses the device's primary
context", docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DRIVER.html). It measures what
overlapping the two would save the payload.
"""

import ctypes
import json
import sys
import threading
import time

t0 = time.perf_counter()
marks: dict[str, float] = {}
early: dict[str, object] = {}


def start_driver() -> None:
    began = time.perf_counter()
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        rc = cuda.cuInit(0)
        device = ctypes.c_int()
        ctx = ctypes.c_void_p()
        rc = rc or cuda.cuDeviceGet(ctypes.byref(device), 0)
        rc = rc or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device)
        early.update(rc=rc, seconds=round(time.perf_counter() - began, 3))
    except OSError as err:
        early.update(error=str(err))


thread = None
if "--early" in sys.argv:
    thread = threading.Thread(target=start_driver, daemon=True)
    thread.start()
import torch  # noqa: E402

marks["import"] = time.perf_counter()
if thread is not None:
    thread.join()
    marks["early_join"] = time.perf_counter()
torch.cuda.init()
marks["cuda_init"] = time.perf_counter()
torch.cuda.mem_get_info(0)
marks["context"] = time.perf_counter()
dev = torch.device("cuda", 0)
x = torch.ones(8, device=dev) * 2
torch.cuda.synchronize()
marks["first_kernel"] = time.perf_counter()
a = torch.randn(512, 512, device=dev, dtype=torch.bfloat16)
(a @ a).sum().item()
marks["cublas"] = time.perf_counter()
conv = torch.nn.Conv2d(64, 128, 3, padding=1).to(dev)
conv(torch.randn(16, 64, 56, 56, device=dev)).sum().item()
marks["cudnn"] = time.perf_counter()
q = torch.randn(4, 8, 256, 64, device=dev, dtype=torch.bfloat16)
torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().item()
marks["sdpa"] = time.perf_counter()
out: dict[str, object] = {"mode": "early" if thread is not None else "serial"}
last = t0
for name, at in marks.items():
    out[f"{name}_s"] = round(at - last, 3)
    last = at
out["total_s"] = round(last - t0, 3)
out["early"] = early or None
print(json.dumps(out))
