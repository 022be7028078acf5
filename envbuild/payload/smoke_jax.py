"""The JAX smoke test: the GPU is visible to JAX, a jitted matmul runs there, a few training
steps lower the loss and stay on the device (CPU with --allow-cpu), plus the common tier-1
checks and bf16 TFLOP/s.

Proven on an H200 (GPU path) and on the CPU (jax 0.10.2, tests/unit/payload/test_payload_frameworks.py,
benchmarks/results/cpu-smoke-jax.json).
"""

from __future__ import annotations

import contextlib
import os
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
    lines = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def _cuda_versions(jax: Any) -> tuple[str | None, str | None]:
    """(CUDA, cuDNN) the jaxlib CUDA plugin was built with; (None, None) for CPU-only jaxlib.

    jax._src.lib.cuda_versions is private but is what `jax.print_environment_info()` reads.
    """
    try:
        from jax._src.lib import cuda_versions as cv
    except Exception:
        return None, None
    if cv is None:
        return None, None

    def fmt(n: int | None) -> str | None:
        # cudaRuntimeGetVersion: 1000*major + 10*minor (CUDA runtime API docs).
        return None if not n else f"{n // 1000}.{(n % 1000) // 10}"

    cuda = cudnn = None
    with contextlib.suppress(Exception):
        cuda = fmt(cv.cuda_runtime_get_version())
    with contextlib.suppress(Exception):
        cudnn = ck.cudnn_version_text(cv.cudnn_get_version())
    return cuda, cudnn


def run(plan: dict[str, Any], out: dict[str, Any]) -> None:
    checks: list[dict[str, Any]] = out["checks"]
    timings = out["timings"]
    allow_cpu = bool(plan.get("allow_cpu"))
    expect = plan.get("expect") or {}
    host = out["host"]

    t0 = time.perf_counter()
    import jax

    timings["import_s"] = round(time.perf_counter() - t0, 3)
    t1 = time.perf_counter()
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    cuda_seen, cudnn_seen = _cuda_versions(jax)
    nvml_count = len(host["gpus"]) if host.get("source") else None
    checks.append(
        ck.check_gpu_visible(
            nvml_count=nvml_count,
            framework_count=len(gpus),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            allow_cpu=allow_cpu,
            framework="jax",
        )
    )
    # jaxlib's CUDA plugin version when readable; a loaded plugin that sees GPUs is a CUDA build.
    jax_cuda = cuda_seen or ("plugin (version unread)" if gpus else None)
    checks.append(ck.check_cuda_build(framework="jax", cuda_seen=jax_cuda, allow_cpu=allow_cpu))
    out["device"] = "cuda" if gpus else "cpu"
    seen = {"framework": jax.__version__, "cuda": cuda_seen, "cudnn": cudnn_seen, "nccl": None}
    for label in ("framework", "cuda", "cudnn", "nccl"):
        out["versions"][label] = {"expected": expect.get(label), "seen": seen[label]}
        if label == "nccl" and not seen[label]:
            checks.append(ck.check("version:nccl", 1, "skip", "jax does not report its NCCL"))
            continue
        checks.append(ck.check_version(label, expect.get(label), seen[label]))
    ccs = [
        str(getattr(d, "compute_capability", ""))
        for d in gpus
        if getattr(d, "compute_capability", None)
    ]
    out["metrics"]["framework_gpus"] = [
        {"index": i, "name": d.device_kind, "cc": getattr(d, "compute_capability", None)}
        for i, d in enumerate(gpus)
    ]
    # jaxlib's CUDA wheels carry their own archs list nowhere public; the jitted matmul below
    # is the real test ("no kernel image" fails there).
    checks.append(
        ck.check(
            "arch-covered",
            1,
            "skip",
            f"cc {' '.join(ccs) or 'n/a'}: jax does not list its archs; the jitted matmul tests it",
        )
    )
    checks.append(ck.check_driver_floor(host.get("driver"), plan.get("driver_floor")))
    checks.append(ck.check_shm(hostmod.shm_mib(), int(plan.get("min_shm_mib", 1024))))
    timings["tier1_s"] = round(time.perf_counter() - t1, 3)
    if int(plan.get("tier", 2)) < 2:
        return
    if not ck.report_ok(checks):
        checks.append(ck.check("tier2", 2, "skip", "skipped: tier 1 failed"))
        return
    t2 = time.perf_counter()
    dev = gpus[0] if gpus else jax.devices("cpu")[0]
    sampler = hostmod.NvmlSampler() if gpus else None
    if sampler is not None:
        sampler.start()
    try:
        _matmul(jax, dev, out)
        _train(jax, dev, max(6, int(plan.get("steps", 30))), out)
        if gpus:
            _perf(jax, dev, plan, out)
    finally:
        if sampler is not None:
            hostmod.record_telemetry(sampler, out, checks)
    timings["tier2_s"] = round(time.perf_counter() - t2, 3)


def _matmul(jax: Any, dev: Any, out: dict[str, Any]) -> None:
    import jax.numpy as jnp

    try:
        key = jax.random.PRNGKey(0)
        a = jax.device_put(jax.random.normal(key, (1024, 1024), jnp.float32), dev)
        f = jax.jit(lambda x: x @ x.T)
        r = f(a).block_until_ready()
        where = {d.platform for d in r.devices()}
        diag_ok = bool(jnp.all(jnp.diag(r) > 0))
        if where == {dev.platform} and diag_ok:
            out["checks"].append(
                ck.check(
                    "jit-matmul", 2, "pass", f"jitted 1024^2 matmul on {dev.platform}:{dev.id}"
                )
            )
        else:
            out["checks"].append(
                ck.check(
                    "jit-matmul",
                    2,
                    "fail",
                    f"ran on {sorted(where)}, diag>0 {diag_ok}",
                    "jax placed the work off the GPU",
                )
            )
    except Exception as exc:
        out["errors"].append(traceback.format_exc(limit=4))
        out["checks"].append(
            ck.check(
                "jit-matmul",
                2,
                "fail",
                _err(exc),
                "XLA could not compile for this GPU: check the jaxlib CUDA plugin version",
            )
        )


def _train(jax: Any, dev: Any, steps: int, out: dict[str, Any]) -> None:
    """A 2-layer MLP regression, plain SGD, jitted step: the loss must fall clearly."""
    import jax.numpy as jnp

    try:
        k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(0), 4)
        x = jax.device_put(jax.random.normal(k1, (512, 64)), dev)
        w_true = jax.random.normal(k2, (64, 1))
        y = jax.device_put(jnp.tanh(x @ w_true), dev)
        params = jax.device_put(
            {
                "w1": jax.random.normal(k3, (64, 128)) * 0.1,
                "w2": jax.random.normal(k4, (128, 1)) * 0.1,
            },
            dev,
        )
        dtype = jnp.bfloat16 if dev.platform == "gpu" else jnp.float32
        out["metrics"]["precision"] = "bf16" if dtype == jnp.bfloat16 else "fp32"

        def loss_fn(p: Any) -> Any:
            h = jax.nn.gelu(x.astype(dtype) @ p["w1"].astype(dtype)).astype(jnp.float32)
            return jnp.mean((h @ p["w2"] - y) ** 2)

        def step_fn(p: Any) -> Any:
            loss, grads = jax.value_and_grad(loss_fn)(p)
            return jax.tree_util.tree_map(lambda a, g: a - 0.1 * g, p, grads), loss, grads

        step = jax.jit(step_fn)

        losses, nonfinite, zero = [], [], []
        ts = time.perf_counter()
        for i in range(steps):
            params, loss, grads = step(params)
            losses.append(float(loss))
            if i == 0:
                for name, gr in grads.items():
                    if not bool(jnp.all(jnp.isfinite(gr))):
                        nonfinite.append(name)
                    elif not bool(jnp.any(gr != 0)):
                        zero.append(name)
        out["metrics"].update(
            {"loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4), "steps": steps}
        )
        out["timings"]["train_s"] = round(time.perf_counter() - ts, 3)
        # The parameters after the steps, the batch and the last loss must live on `dev`.
        where = {"x": x, "y": y, "loss": loss, **{f"params.{k}": v for k, v in params.items()}}
        off = [
            f"{n} on {sorted(str(d) for d in a.devices())}"
            for n, a in sorted(where.items())
            if set(a.devices()) != {dev}
        ]
        out["checks"].append(ck.check_placement(device=f"{dev.platform}:{dev.id}", off_device=off))
        out["checks"].append(ck.check_grads(n_params=2, nonfinite=nonfinite, zero=zero))
        out["checks"].append(ck.check_loss_falling(losses))
    except Exception as exc:
        out["errors"].append(traceback.format_exc(limit=4))
        out["checks"].append(
            ck.check("train", 2, "fail", _err(exc), "the training step crashed: see the error")
        )


def _perf(jax: Any, dev: Any, plan: dict[str, Any], out: dict[str, Any]) -> None:
    import jax.numpy as jnp

    try:
        n, iters = 8192, 30
        k1, k2 = jax.random.split(jax.random.PRNGKey(2))
        a = jax.device_put(jax.random.normal(k1, (n, n), jnp.bfloat16), dev)
        b = jax.device_put(jax.random.normal(k2, (n, n), jnp.bfloat16), dev)
        f = jax.jit(lambda x, y: x @ y)
        for _ in range(3):
            f(a, b).block_until_ready()
        ts = time.perf_counter()
        for _ in range(iters):
            r = f(a, b)
        r.block_until_ready()
        tflops = 2 * n**3 * iters / (time.perf_counter() - ts) / 1e12
        out["metrics"]["bf16_tflops"] = round(tflops, 1)
        name = str(dev.device_kind)
        base = ck.pick_baseline(name, plan.get("baselines") or [])
        out["checks"].append(
            ck.check_throughput(
                "bf16-tflops",
                value=round(tflops, 1),
                unit="TFLOP/s",
                gpu_name=name,
                baseline=base,
                key="bf16_tflops",
                floor_ratio=float(plan.get("floor_ratio", ck.FLOOR_RATIO)),
            )
        )
    except Exception as exc:
        out["errors"].append(traceback.format_exc(limit=4))
        out["checks"].append(
            ck.check(
                "bf16-tflops", 2, "fail", _err(exc), "the benchmark matmul failed: see the error"
            )
        )
