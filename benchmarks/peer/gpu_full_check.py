"""The peer's hand-written check of a GPU image that checks what envbuild's smoke test checks
(benchmarks/peer/torch-gpu.Dockerfile, `CMD` overridden by the H200 build bench): the fair
side of the cold-build row, so the ratio compares the same work (issue 33: "the peer runs the
same checks").

PEER_TIER=1: what envbuild's tier 1 checks: a GPU visible, a CUDA build of torch, the
versions of torch / CUDA / cuDNN / NCCL, the GPU's compute capability in torch's arch list,
free memory. PEER_TIER=2 (the default) adds what its tier 2 runs, at the same sizes
(envbuild/payload/smoke_torch.py): a 4-layer transformer (d=512) trained 30 steps in bf16 from
a DataLoader with 2 workers and pinned memory, loss falling; a Conv2d forward and backward
(cuDNN); scaled_dot_product_attention against the plain math; a 4096^2 matmul repeated three
times, bit-identical; an 8192^3 bf16 matmul's TFLOP/s and a device-to-device copy's TB/s.
It is what a careful engineer writes by hand: plain asserts, no report. The last line is its
own split in seconds (JSON). PEER_ALLOW_CPU=1: the bench's dry run without a GPU.
"""

import json
import math
import os
import time

started = time.perf_counter()
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

imported = time.perf_counter()
cpu_ok = os.environ.get("PEER_ALLOW_CPU") == "1"
if not torch.cuda.is_available() and not cpu_ok:
    raise SystemExit("no GPU: torch.cuda.is_available() is False")
gpu = torch.cuda.is_available()
dev = torch.device("cuda", 0) if gpu else torch.device("cpu")
print(
    "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version()
)
if gpu:
    print("nccl", torch.cuda.nccl.version())
    major, minor = torch.cuda.get_device_capability(0)
    assert f"sm_{major}{minor}" in torch.cuda.get_arch_list(), torch.cuda.get_arch_list()
    free, _total = torch.cuda.mem_get_info(0)
    assert free > 4 * 2**30, f"only {free / 2**30:.1f} GiB free"
tier1 = time.perf_counter()
split = {"import_s": imported - started, "tier1_s": tier1 - imported}

if os.environ.get("PEER_TIER", "2") != "1":
    # Training: the same model, data and loop as envbuild's, bf16 autocast on the GPU.
    vocab, d, layers, heads, seq, batch, steps = (256, 512, 4, 8, 256, 32, 30)
    if not gpu:
        vocab, d, layers, heads, seq, batch = (64, 64, 2, 4, 32, 16)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(vocab, generator=g)
    x = torch.randint(0, vocab, (steps * batch, seq), generator=g)
    loader = DataLoader(TensorDataset(x, perm[x]), batch_size=batch, num_workers=2, pin_memory=gpu)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(
        d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True
    )
    model = nn.Sequential(
        nn.Embedding(vocab, d),
        nn.TransformerEncoder(layer, layers, enable_nested_tensor=False),
        nn.LayerNorm(d),
        nn.Linear(d, vocab),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for xb, yb in loader:
        xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=gpu):
            loss = nn.functional.cross_entropy(model(xb).float().reshape(-1, vocab), yb.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses
    trained = time.perf_counter()
    # cuDNN: a convolution forward and backward.
    conv = nn.Conv2d(64, 128, 3, padding=1).to(dev)
    xin = torch.randn(16, 64, 56, 56, device=dev, requires_grad=True)
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=gpu):
        yout = conv(xin)
    yout.float().square().mean().backward()
    assert bool(torch.isfinite(xin.grad).all()), "conv grad not finite"
    # Attention against the plain math.
    low = torch.bfloat16 if gpu else torch.float32
    q, k, v = (torch.randn(4, 8, 256, 64, device=dev, dtype=low) for _ in range(3))
    got = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    scores = q.float() @ k.float().transpose(-2, -1) / math.sqrt(64)
    mask = torch.ones(256, 256, dtype=torch.bool, device=dev).tril()
    ref = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v.float()
    assert float((got.float() - ref).abs().max()) <= 3e-2, "sdpa differs from the math"
    # The same matmul three times: bit-identical.
    n = 4096 if gpu else 256
    a, b = torch.randn(n, n, device=dev, dtype=low), torch.randn(n, n, device=dev, dtype=low)
    first = a @ b
    assert all(bool((a @ b == first).all()) for _ in range(3)), "matmul not repeatable"
    checked = time.perf_counter()
    if gpu:
        # Throughput: bf16 matmul TFLOP/s and copy bandwidth, printed for a person to judge.
        m = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        m @ m
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(10):
            m @ m
        torch.cuda.synchronize()
        tflops = 10 * 2 * 8192**3 / (time.perf_counter() - t) / 1e12
        buf = torch.empty(2**30, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(buf)
        dst.copy_(buf)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(10):
            dst.copy_(buf)
        torch.cuda.synchronize()
        tbs = 10 * 2 * 2**30 / (time.perf_counter() - t) / 1e12
        print(f"bf16 {tflops:.0f} TFLOP/s, copy {tbs:.2f} TB/s")
    split.update(
        train_s=trained - tier1, checks_s=checked - trained, perf_s=time.perf_counter() - checked
    )
    print(f"ok: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
split["total_s"] = time.perf_counter() - started
print(json.dumps({key: round(value, 3) for key, value in split.items()}))
