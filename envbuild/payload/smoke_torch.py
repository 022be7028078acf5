"""The PyTorch smoke test: tier 1 (visibility, build, archs, versions, floors) and tier 2 (a short
mixed-precision training run, cuDNN conv, SDPA, a bitwise-repeat GEMM, bf16 TFLOP/s and memory
bandwidth against the GPU's baseline, NVML telemetry, DDP over every GPU).

Sizes and rules come from NVIDIA DCGM (levels, 0.75 x healthy floors), gpu-burn (repeat the
same GEMM, demand identical results) and measurements on an H200
(benchmarks/results/h200-smoke.md): the whole tier 2 needs a few GiB and seconds on a healthy GPU.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
import traceback
from typing import Any

try:
    from . import smoke_checks as ck
    from . import smoke_host as hostmod
except ImportError:  # run as a folder (python /opt/envbuild/payload): siblings are top-level
    import smoke_checks as ck  # type: ignore[no-redef,import-not-found]
    import smoke_host as hostmod  # type: ignore[no-redef,import-not-found]


def _err(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def run(plan: dict[str, Any], out: dict[str, Any]) -> None:
    """Fill `out` (checks, versions, metrics, timings, device) for torch."""
    checks: list[dict[str, Any]] = out["checks"]
    timings: dict[str, Any] = out["timings"]
    allow_cpu = bool(plan.get("allow_cpu"))
    expect = plan.get("expect") or {}
    host = out["host"]

    t0 = time.perf_counter()
    import torch

    timings["import_s"] = round(time.perf_counter() - t0, 3)
    t1 = time.perf_counter()

    cuda_seen = torch.version.cuda
    count = torch.cuda.device_count() if cuda_seen else 0
    nvml_count = len(host["gpus"]) if host.get("source") else None
    checks.append(
        ck.check_gpu_visible(
            nvml_count=nvml_count,
            framework_count=count,
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            allow_cpu=allow_cpu,
            framework="torch",
        )
    )
    checks.append(ck.check_cuda_build(framework="torch", cuda_seen=cuda_seen, allow_cpu=allow_cpu))
    use_cuda = count > 0
    out["device"] = "cuda" if use_cuda else "cpu"

    cudnn_seen = None
    try:
        cudnn_seen = ck.cudnn_version_text(torch.backends.cudnn.version())
    except Exception:
        cudnn_seen = None
    nccl_seen = None
    if cuda_seen:
        try:
            nccl_seen = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:
            nccl_seen = None
    seen = {
        "framework": torch.__version__,
        "cuda": cuda_seen,
        "cudnn": cudnn_seen,
        "nccl": nccl_seen,
    }
    for label in ("framework", "cuda", "cudnn", "nccl"):
        out["versions"][label] = {"expected": expect.get(label), "seen": seen[label]}
        checks.append(ck.check_version(label, expect.get(label), seen[label]))

    ccs, names, free, tegra = [], [], [], []
    archs: list[str] = list(torch.cuda.get_arch_list()) if cuda_seen else []
    for i in range(count):
        major, minor = torch.cuda.get_device_capability(i)
        ccs.append(f"{major}.{minor}")
        # Jetson GPUs are integrated; they take only cubins built for exactly their capability.
        if getattr(torch.cuda.get_device_properties(i), "is_integrated", False):
            tegra.append(f"{major}.{minor}")
        names.append(torch.cuda.get_device_name(i))
        free.append(torch.cuda.mem_get_info(i)[0] / 2**20)
    out["metrics"]["framework_gpus"] = [
        {"index": i, "name": names[i], "cc": ccs[i], "free_mib": round(free[i])}
        for i in range(count)
    ]
    out["metrics"]["archs"] = archs
    checks.append(ck.check_archs(ccs, archs, framework="torch", tegra_ccs=tegra))
    checks.append(ck.check_driver_floor(host.get("driver"), plan.get("driver_floor")))
    checks.append(ck.check_shm(hostmod.shm_mib(), int(plan.get("min_shm_mib", 1024))))
    if use_cuda:
        checks.append(ck.check_free_memory(free, int(plan.get("min_free_mib", 4096))))
    timings["tier1_s"] = round(time.perf_counter() - t1, 3)

    if int(plan.get("tier", 2)) < 2:
        return
    if not ck.report_ok(checks):
        checks.append(ck.check("tier2", 2, "skip", "skipped: tier 1 failed"))
        return
    ready: list[float] = []
    _preload_dynamo(t0, ready)

    t2 = time.perf_counter()
    global _FORCED_PRECISION
    _FORCED_PRECISION = plan.get("precision")
    sampler = hostmod.NvmlSampler() if use_cuda else None
    if sampler is not None:
        sampler.start()
    device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
    # Each part's seconds as well: where a tier 2 run spends its time (benchmarks report it).
    # The checks that need no optimizer go first, while `_preload_dynamo` imports what the
    # optimizer needs; the throughput part goes last, with no import beside it.
    parts = {
        "conv_s": lambda: _conv(torch, device, out),
        "sdpa_s": lambda: _sdpa(torch, device, out),
        "repeat_s": lambda: _repeat(torch, device, out),
        "train_s": lambda: _train(torch, plan, device, out, free[0] if free else None),
        "perf_s": (lambda: _perf(torch, plan, names, out)) if use_cuda else None,
    }
    try:
        for key, part in parts.items():
            if part is not None:
                ts = time.perf_counter()
                part()
                timings[key] = round(time.perf_counter() - ts, 3)
    finally:
        if sampler is not None:
            hostmod.record_telemetry(sampler, out, checks, _torch_memory(torch, device))
    if use_cuda and count > 1 and plan.get("multi_gpu", True):
        try:
            from . import smoke_ddp
        except ImportError:
            import smoke_ddp  # type: ignore[no-redef,import-not-found]
        ddp = smoke_ddp.launch(count, timeout_s=int(plan.get("collective_timeout_s", 60)))
        out["metrics"]["ddp"] = ddp
        base = ck.pick_baseline(names[0], plan.get("baselines") or [])
        checks.extend(
            smoke_ddp.checks_from(ddp, count, gpu_name=names[0], baseline=dict(base or {}))
        )
    if use_cuda:
        ts = time.perf_counter()
        out["metrics"]["topology"] = hostmod.topology(count)
        timings["topology_s"] = round(time.perf_counter() - ts, 3)
    timings["tier2_s"] = round(time.perf_counter() - t2, 3)
    if ready:
        timings["dynamo_ready_s"] = ready[0]


def _preload_dynamo(t0: float, ready: list[float]) -> None:
    """Import torch._dynamo on a thread while the checks before training run.

    torch.optim's methods are wrapped by `torch._disable_dynamo`, whose first call imports
    torch._dynamo, and with it sympy (torch/_compile.py): about 1 s with byte-code, the largest
    part of the training check's time (benchmarks/results/h100-train-probe.md). The checks that
    run meanwhile spend their time in torch's kernels, which release the GIL. A failure here is
    left alone: the optimizer's own import in `_train` raises it again, where it is checked.
    `ready` gets when it was done, in seconds since `import torch` began (the thread writes
    nothing the report holds: the report may be printed while it still runs).
    """
    # sys.modules, not getattr(torch, "_dynamo"): torch's module __getattr__ imports it lazily.
    if "torch._dynamo" in sys.modules:
        return

    def load() -> None:
        try:
            import torch._dynamo  # noqa: F401
        except Exception:
            return
        ready.append(round(time.perf_counter() - t0, 3))

    threading.Thread(target=load, name="envbuild-preload-dynamo", daemon=True).start()


def _torch_memory(torch: Any, device: Any) -> dict[str, Any] | None:
    """What the caching allocator holds vs what tensors needed at most (MiB), for the readings."""
    if device.type != "cuda":
        return None
    try:
        return {
            "reserved_mib": round(torch.cuda.memory_reserved(device) / 2**20, 1),
            "max_allocated_mib": round(torch.cuda.max_memory_allocated(device) / 2**20, 1),
        }
    except Exception:
        return None


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


_FORCED_PRECISION: str | None = None
"""The plan's "precision" ("bf16"/"fp16"): tests the fp16 + GradScaler path on a bf16 GPU."""


def _precision(torch: Any, device: Any) -> str:
    if device.type != "cuda":
        return "fp32"
    if _FORCED_PRECISION in ("bf16", "fp16"):
        return _FORCED_PRECISION
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def _low_dtype(torch: Any, device: Any) -> Any:
    """bf16 on GPUs that have it (Ampere+), fp16 before; fp32 on the CPU."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(
        _precision(torch, device), torch.float32
    )


def _train(
    torch: Any, plan: dict[str, Any], device: Any, out: dict[str, Any], free_mib: float | None
) -> None:
    """A small transformer learns a fixed token permutation; loss must fall clearly."""
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    checks, metrics = out["checks"], out["metrics"]
    steps = max(6, int(plan.get("steps", 30)))
    on_gpu = device.type == "cuda"
    # GPU: ~13 M params, 8192 tokens a step; CPU (--allow-cpu): small enough for seconds.
    vocab, d, layers, heads, seq, batch = (
        (256, 512, 4, 8, 256, 32) if on_gpu else (64, 64, 2, 4, 32, 16)
    )
    precision = _precision(torch, device)
    metrics["precision"] = precision
    try:
        if on_gpu:
            # The checks before it allocated too: train_peak_mem_mib is the training's own.
            torch.cuda.reset_peak_memory_stats(device)
        g = torch.Generator().manual_seed(0)
        perm = torch.randperm(vocab, generator=g)
        x = torch.randint(0, vocab, (steps * batch, seq), generator=g)
        y = perm[x]
        loader = DataLoader(
            TensorDataset(x, y),
            batch_size=batch,
            shuffle=False,
            drop_last=True,
            num_workers=2,
            pin_memory=on_gpu,
        )
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(
            d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True
        )
        model = nn.Sequential(
            nn.Embedding(vocab, d),
            nn.TransformerEncoder(layer, layers, enable_nested_tensor=False),
            nn.LayerNorm(d),
            nn.Linear(d, vocab),
        ).to(device)
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        off = [f"param {n} on {p.device}" for n, p in params if p.device.type != device.type]
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        scaler = None
        if precision == "fp16":
            # torch.amp.GradScaler("cuda") since torch 2.3; torch.cuda.amp.GradScaler before.
            amp_scaler = getattr(torch.amp, "GradScaler", None)
            scaler = amp_scaler("cuda") if amp_scaler else torch.cuda.amp.GradScaler()
        amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        loss_fn = nn.CrossEntropyLoss()
        losses: list[float] = []
        step_s: list[float] = []
        nonfinite: list[str] = []
        zero: list[str] = []
        for step, (xb, yb) in enumerate(loader):
            ts = time.perf_counter()
            xb = xb.to(device, non_blocking=True)
            yb = yb.to(device, non_blocking=True)
            if xb.device.type != device.type or yb.device.type != device.type:
                off.append(f"batch {step} on {xb.device}")
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                logits = model(xb)
                loss = loss_fn(logits.float().reshape(-1, vocab), yb.reshape(-1))
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
            else:
                loss.backward()
            if step in (0, steps - 1):
                for n, p in params:
                    if p.grad is None:
                        zero.append(f"{n} (no grad) at step {step}")
                    elif not bool(torch.isfinite(p.grad).all()):
                        # fp16: an overflow is the GradScaler's to skip (its first steps
                        # overflow by design); the weights are checked after the loop.
                        if scaler is None:
                            nonfinite.append(f"{n} at step {step}")
                    elif not bool(p.grad.abs().sum() > 0):
                        zero.append(f"{n} at step {step}")
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
            if not bool(torch.isfinite(total)) and scaler is None:
                nonfinite.append(f"total norm at step {step}")
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            losses.append(float(loss.item()))
            _sync(torch, device)
            step_s.append(time.perf_counter() - ts)
        nonfinite += [f"{n} weights" for n, p in params if not bool(torch.isfinite(p).all())]
        checks.append(ck.check_placement(device=device.type, off_device=off))
        checks.append(ck.check_grads(n_params=len(params), nonfinite=nonfinite, zero=zero))
        checks.append(ck.check_loss_falling(losses))
        steady = step_s[1:] or step_s
        med = statistics.median(steady)
        metrics.update(
            {
                "loss_first": round(losses[0], 4),
                "loss_last": round(losses[-1], 4),
                "steps": len(losses),
                "params": sum(p.numel() for _, p in params),
                "first_step_s": round(step_s[0], 4),
                "step_ms_median": round(med * 1000, 3),
                "tokens_per_s": round(batch * seq / med) if med > 0 else None,
            }
        )
        out["timings"]["first_step_s"] = round(step_s[0], 4)
        out["timings"]["step_ms_median"] = round(med * 1000, 3)
        if on_gpu:
            metrics["train_peak_mem_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20)
        checks.append(
            ck.check(
                "train",
                2,
                "pass",
                f"{len(losses)} steps {precision}, {med * 1000:.1f} ms/step, num_workers=2 pin_memory={on_gpu}",
            )
        )
    except _oom_type(torch) as exc:
        checks.append(_oom_check("train", exc, free_mib))
    except Exception as exc:
        out["errors"].append(traceback.format_exc(limit=4))
        checks.append(
            ck.check(
                "train", 2, "fail", _err(exc), "the training step crashed: see the error above"
            )
        )


def _oom_type(torch: Any) -> type[BaseException]:
    # torch.OutOfMemoryError is the public name since torch 2.5; older releases have only
    # torch.cuda.OutOfMemoryError (torch docs, torch.cuda.OutOfMemoryError).
    found = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    return found


def _oom_check(name: str, exc: BaseException, free_mib: float | None) -> dict[str, Any]:
    seen = "unknown" if free_mib is None else f"{free_mib:.0f} MiB"
    return ck.check(
        name,
        2,
        "fail",
        f"out of memory ({seen} free before the test): {_err(exc)[:160]}",
        "other processes hold GPU memory: free it (nvidia-smi lists them) or run `--tier 1`",
    )


def _conv(torch: Any, device: Any, out: dict[str, Any]) -> None:
    """One Conv2d forward and backward (cuDNN on a GPU)."""
    precision = _precision(torch, device)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    try:
        conv = torch.nn.Conv2d(64, 128, 3, padding=1).to(device)
        xin = torch.randn(16, 64, 56, 56, device=device, requires_grad=True)
        _sync(torch, device)
        ts = time.perf_counter()
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            yout = conv(xin)
        yout.float().square().mean().backward()
        _sync(torch, device)
        ms = (time.perf_counter() - ts) * 1000
        grads = [xin.grad, conv.weight.grad]
        finite = all(
            gr is not None and bool(torch.isfinite(gr).all()) and bool(gr.abs().sum() > 0)
            for gr in grads
        )
        lib = (
            f"cuDNN {ck.cudnn_version_text(torch.backends.cudnn.version())}"
            if device.type == "cuda" and torch.backends.cudnn.is_available()
            else "no cuDNN (CPU)"
        )
        if device.type == "cuda" and not torch.backends.cudnn.enabled:
            lib = "cuDNN disabled"
        if finite and not (device.type == "cuda" and lib.startswith("cuDNN disabled")):
            out["checks"].append(
                ck.check("conv", 2, "pass", f"{lib}, fwd+bwd {ms:.1f} ms (incl. first-call setup)")
            )
        else:
            out["checks"].append(
                ck.check(
                    "conv",
                    2,
                    "fail",
                    f"{lib}, gradients finite and non-zero: {finite}",
                    "cuDNN is missing or broken: check the locked nvidia-cudnn package",
                )
            )
    except _oom_type(torch) as exc:
        out["checks"].append(_oom_check("conv", exc, None))
    except Exception as exc:
        out["errors"].append(traceback.format_exc(limit=4))
        out["checks"].append(
            ck.check(
                "conv",
                2,
                "fail",
                _err(exc),
                "cuDNN could not run a convolution: check the locked nvidia-cudnn package",
            )
        )


def _sdpa(torch: Any, device: Any, out: dict[str, Any]) -> None:
    """One scaled_dot_product_attention, compared with the plain-math result in fp32."""
    import math

    import torch.nn.functional as F

    try:
        dtype = _low_dtype(torch, device)
        g = torch.Generator(device=device).manual_seed(0)
        q, k, v = (
            torch.randn(4, 8, 256, 64, device=device, dtype=dtype, generator=g) for _ in range(3)
        )
        got = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        qf, kf, vf = q.float(), k.float(), v.float()
        scores = qf @ kf.transpose(-2, -1) / math.sqrt(qf.shape[-1])
        mask = torch.ones(256, 256, dtype=torch.bool, device=device).tril()
        ref = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ vf
        err = float((got.float() - ref).abs().max())
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        figure = (
            f"max |err| {err:.2e} vs fp32 math ({str(dtype).replace('torch.', '')}, tol {tol:g})"
        )
        if err <= tol:
            out["checks"].append(ck.check("sdpa", 2, "pass", figure))
        else:
            out["checks"].append(
                ck.check(
                    "sdpa",
                    2,
                    "fail",
                    figure,
                    "attention kernels give wrong results on this GPU: report the image",
                )
            )
    except Exception as exc:
        out["errors"].append(traceback.format_exc(limit=4))
        out["checks"].append(
            ck.check(
                "sdpa", 2, "fail", _err(exc), "scaled_dot_product_attention failed: see the error"
            )
        )


def _repeat(torch: Any, device: Any, out: dict[str, Any]) -> None:
    """The same GEMM 3 times must be bit-identical (gpu-burn / DCGM diagnostic idea)."""
    try:
        n = 4096 if device.type == "cuda" else 256
        dtype = _low_dtype(torch, device)
        g = torch.Generator(device=device).manual_seed(1)
        a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
        b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
        first = a @ b
        mism = 0
        for _ in range(3):
            mism += int((a @ b != first).sum())
        nan = int(torch.isnan(first).sum())
        out["checks"].append(ck.check_bitwise(mism + nan, 3))
    except Exception as exc:
        out["errors"].append(traceback.format_exc(limit=4))
        out["checks"].append(
            ck.check("matmul-repeat", 2, "fail", _err(exc), "a plain matmul failed: see the error")
        )


def _perf(torch: Any, plan: dict[str, Any], names: list[str], out: dict[str, Any]) -> None:
    """bf16 8192^3 matmul TFLOP/s and device-to-device copy TB/s on every GPU, vs the baseline."""
    per_gpu: list[dict[str, Any]] = []
    baselines = plan.get("baselines") or []
    ratio = float(plan.get("floor_ratio", ck.FLOOR_RATIO))
    try:
        for i, name in enumerate(names):
            dev = torch.device("cuda", i)
            with torch.cuda.device(dev):
                per_gpu.append({"index": i, "name": name, **_measure(torch, dev)})
    except _oom_type(torch) as exc:
        out["checks"].append(_oom_check("perf", exc, torch.cuda.mem_get_info(0)[0] / 2**20))
        return
    except Exception as exc:
        out["errors"].append(traceback.format_exc(limit=4))
        out["checks"].append(
            ck.check("perf", 2, "fail", _err(exc), "the benchmark kernels failed: see the error")
        )
        return
    out["metrics"]["perf"] = per_gpu
    worst_t = min(per_gpu, key=lambda r: r["bf16_tflops"])
    worst_b = min(per_gpu, key=lambda r: r["mem_bw_tbs"])
    out["metrics"]["bf16_tflops"] = worst_t["bf16_tflops"]
    out["metrics"]["mem_bw_tbs"] = worst_b["mem_bw_tbs"]
    for metric, worst, unit in (
        ("bf16_tflops", worst_t, "TFLOP/s"),
        ("mem_bw_tbs", worst_b, "TB/s"),
    ):
        base = ck.pick_baseline(worst["name"], baselines)
        c = ck.check_throughput(
            metric.replace("_", "-"),
            value=worst[metric],
            unit=unit,
            gpu_name=worst["name"],
            baseline=base,
            key=metric,
            floor_ratio=ratio,
        )
        if metric == "bf16_tflops" and worst.get("matmul_dtype") != "bfloat16":
            c["figure"] += f" (measured in {worst.get('matmul_dtype')})"
        if len(per_gpu) > 1:
            c["figure"] += f" (slowest of {len(per_gpu)}: GPU {worst['index']})"
        out["checks"].append(c)


def _measure(torch: Any, dev: Any) -> dict[str, Any]:
    """Timed with CUDA events after warm-ups, on random data (zeros run ~13% faster: KINDS.md)."""
    n, iters = 8192, 30
    g = torch.Generator(device=dev).manual_seed(2)
    dtype = _low_dtype(torch, dev)
    a = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
    c = torch.empty(n, n, device=dev, dtype=dtype)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        torch.matmul(a, b, out=c)
    end.record()
    end.synchronize()
    tflops = 2 * n**3 * iters / (start.elapsed_time(end) / 1000) / 1e12
    del a, b, c
    nbytes = 2**30
    src = torch.empty(nbytes // 4, device=dev, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start.record()
    for _ in range(iters):
        dst.copy_(src)
    end.record()
    end.synchronize()
    # Bytes read + written, as the H200 reference figures count them (reference §B1).
    tbs = 2 * nbytes * iters / (start.elapsed_time(end) / 1000) / 1e12
    del src, dst
    torch.cuda.empty_cache()
    return {
        "bf16_tflops": round(tflops, 1),
        "mem_bw_tbs": round(tbs, 3),
        "matmul_dtype": str(dtype).replace("torch.", ""),
    }
