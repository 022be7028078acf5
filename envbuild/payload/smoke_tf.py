"""The TensorFlow smoke test: the GPU is visible to TensorFlow, an XLA-jitted matmul runs there,
a few GradientTape steps lower the loss (CPU with --allow-cpu), plus the common tier-1 checks.
"""

from __future__ import annotations

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


def run(plan: dict[str, Any], out: dict[str, Any]) -> None:
    checks: list[dict[str, Any]] = out["checks"]
    timings = out["timings"]
    allow_cpu = bool(plan.get("allow_cpu"))
    expect = plan.get("expect") or {}
    host = out["host"]

    t0 = time.perf_counter()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    timings["import_s"] = round(time.perf_counter() - t0, 3)
    t1 = time.perf_counter()
    gpus = tf.config.list_physical_devices("GPU")
    info = dict(tf.sysconfig.get_build_info())
    cuda_seen = info.get("cuda_version") if tf.test.is_built_with_cuda() else None
    nvml_count = len(host["gpus"]) if host.get("source") else None
    checks.append(
        ck.check_gpu_visible(
            nvml_count=nvml_count,
            framework_count=len(gpus),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            allow_cpu=allow_cpu,
            framework="tensorflow",
        )
    )
    checks.append(
        ck.check_cuda_build(framework="tensorflow", cuda_seen=cuda_seen, allow_cpu=allow_cpu)
    )
    out["device"] = "cuda" if gpus else "cpu"
    seen = {
        "framework": tf.__version__,
        "cuda": cuda_seen,
        "cudnn": info.get("cudnn_version"),
        "nccl": None,
    }
    for label in ("framework", "cuda", "cudnn", "nccl"):
        out["versions"][label] = {"expected": expect.get(label), "seen": seen[label]}
        if label == "nccl" and not seen[label]:
            checks.append(
                ck.check("version:nccl", 1, "skip", "tensorflow does not report its NCCL")
            )
            continue
        checks.append(ck.check_version(label, expect.get(label), seen[label]))
    ccs = []
    for g in gpus:
        cc = tf.config.experimental.get_device_details(g).get("compute_capability")
        if cc:
            ccs.append(f"{cc[0]}.{cc[1]}")
    # tf.sysconfig.get_build_info()["cuda_compute_capabilities"]: "sm_60", "compute_90", ...
    archs = list(info.get("cuda_compute_capabilities") or [])
    checks.append(ck.check_archs(ccs, archs, framework="tensorflow"))
    checks.append(ck.check_driver_floor(host.get("driver"), plan.get("driver_floor")))
    checks.append(ck.check_shm(hostmod.shm_mib(), int(plan.get("min_shm_mib", 1024))))
    timings["tier1_s"] = round(time.perf_counter() - t1, 3)
    if int(plan.get("tier", 2)) < 2:
        return
    if not ck.report_ok(checks):
        checks.append(ck.check("tier2", 2, "skip", "skipped: tier 1 failed"))
        return
    t2 = time.perf_counter()
    name = "/GPU:0" if gpus else "/CPU:0"
    sampler = hostmod.NvmlSampler() if gpus else None
    if sampler is not None:
        sampler.start()
    try:
        with tf.device(name):
            _matmul(tf, name, out)
            _train(tf, out)
    finally:
        if sampler is not None:
            peaks = sampler.stop()
            out["metrics"]["nvml"] = peaks
            checks.append(ck.check_telemetry(peaks))
    timings["tier2_s"] = round(time.perf_counter() - t2, 3)


def _matmul(tf: Any, name: str, out: dict[str, Any]) -> None:
    try:
        a = tf.random.stateless_normal((1024, 1024), seed=(0, 1))
        f = tf.function(lambda x: tf.matmul(x, x, transpose_b=True), jit_compile=True)
        r = f(a)
        diag_ok = bool(tf.reduce_all(tf.linalg.diag_part(r) > 0))
        placed = name.split(":")[0].strip("/") in r.device.upper()
        if diag_ok and placed:
            out["checks"].append(ck.check("jit-matmul", 2, "pass", f"XLA matmul on {r.device}"))
        else:
            out["checks"].append(
                ck.check(
                    "jit-matmul",
                    2,
                    "fail",
                    f"on {r.device}, diag>0 {diag_ok}",
                    "TensorFlow placed the work off the GPU",
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
                "XLA could not compile for this GPU: check the TensorFlow CUDA build",
            )
        )


def _train(tf: Any, out: dict[str, Any]) -> None:
    try:
        x = tf.random.stateless_normal((512, 64), seed=(1, 2))
        y = tf.tanh(x @ tf.random.stateless_normal((64, 1), seed=(3, 4)))
        w1 = tf.Variable(tf.random.stateless_normal((64, 128), seed=(5, 6)) * 0.1)
        w2 = tf.Variable(tf.random.stateless_normal((128, 1), seed=(7, 8)) * 0.1)
        opt = tf.keras.optimizers.SGD(0.1)
        losses, nonfinite, zero = [], [], []
        for i in range(30):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.nn.gelu(x @ w1) @ w2 - y) ** 2)
            grads = tape.gradient(loss, [w1, w2])
            if i == 0:
                for n, g in (("w1", grads[0]), ("w2", grads[1])):
                    if not bool(tf.reduce_all(tf.math.is_finite(g))):
                        nonfinite.append(n)
                    elif not bool(tf.reduce_any(g != 0)):
                        zero.append(n)
            opt.apply_gradients([(grads[0], w1), (grads[1], w2)])
            losses.append(float(loss))
        out["metrics"].update(
            {"loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4), "steps": 30}
        )
        out["checks"].append(ck.check_grads(n_params=2, nonfinite=nonfinite, zero=zero))
        out["checks"].append(ck.check_loss_falling(losses))
    except Exception as exc:
        out["errors"].append(traceback.format_exc(limit=4))
        out["checks"].append(
            ck.check("train", 2, "fail", _err(exc), "the training step crashed: see the error")
        )
