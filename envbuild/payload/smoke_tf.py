"""The TensorFlow smoke test: the GPU is visible to TensorFlow, an XLA-jitted matmul runs there,
a few GradientTape steps (a tf.function, bf16 matmuls on GPUs with bf16) lower the loss and stay
on the device (CPU with --allow-cpu), plus the common tier-1 checks.

Proven on the CPU (tensorflow-cpu 2.21.0, tests/unit/payload/test_payload_frameworks.py,
benchmarks/results/cpu-smoke-tf.json); the GPU path follows TensorFlow's documented APIs but
has not run on a GPU yet.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
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


# The and-cuda extra installs cuDNN as one of these wheels (tensorflow 2.21.0 METADATA:
# `nvidia-cudnn-cu12<10.0,>=9.3.0.75; extra == "and-cuda"`), and the lock pins its version;
# get_build_info()["cudnn_version"] is only the major TensorFlow was built for ("9").
_CUDNN_WHEELS = ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11")


def _wheel_version(names: tuple[str, ...]) -> str | None:
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(name)
    return None


def _precision(plan: dict[str, Any], cc: str | None) -> str:
    """bf16 matmuls on GPUs with bf16 tensor cores (cc >= 8.0, Ampere); fp32 otherwise.

    A plan's "precision" ("bf16"/"fp32") forces one: that is how the bf16 path is tested on the
    CPU (TensorFlow has bf16 MatMul CPU kernels).
    """
    forced = plan.get("precision")
    if forced in ("bf16", "fp32"):
        return str(forced)
    major = ck.version_numbers(cc)[:1]
    return "bf16" if major and major[0] >= 8 else "fp32"


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
    # TensorFlow maps nearly all GPU memory at first use by default; grow on demand instead so
    # the smoke test does not hold the GPU (tf.config.experimental.set_memory_growth docs: must
    # run before the GPUs are initialised, else RuntimeError).
    for g in gpus:
        with contextlib.suppress(RuntimeError, ValueError):
            tf.config.experimental.set_memory_growth(g, True)
    info = dict(tf.sysconfig.get_build_info())
    built_with_cuda = bool(info.get("is_cuda_build")) or tf.test.is_built_with_cuda()
    cuda_seen = info.get("cuda_version") if built_with_cuda else None
    nvml_count = len(host["gpus"]) if host.get("source") else None
    visible = ck.check_gpu_visible(
        nvml_count=nvml_count,
        framework_count=len(gpus),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        allow_cpu=allow_cpu,
        framework="tensorflow",
    )
    if visible["status"] == "fail" and not gpus and nvml_count and built_with_cuda:
        # The GPUs are there but TensorFlow did not open them: it logs "Cannot dlopen some GPU
        # libraries" and carries on on the CPU when its CUDA wheels are missing.
        visible["hint"] = (
            "NVML sees GPUs but TensorFlow does not: its CUDA libraries did not load (install "
            "`tensorflow[and-cuda]`, and read TensorFlow's 'Cannot dlopen' log lines)"
        )
    checks.append(visible)
    checks.append(
        ck.check_cuda_build(framework="tensorflow", cuda_seen=cuda_seen, allow_cpu=allow_cpu)
    )
    out["device"] = "cuda" if gpus else "cpu"
    seen = {
        "framework": tf.__version__,
        "cuda": cuda_seen,
        "cudnn": (_wheel_version(_CUDNN_WHEELS) or info.get("cudnn_version"))
        if built_with_cuda
        else None,
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
    # get_device_details(): {"device_name": "NVIDIA H200", "compute_capability": (9, 0)} for a
    # GPU (tf.config.experimental.get_device_details docs); run-time facts, unlike build info.
    framework_gpus: list[dict[str, Any]] = []
    for i, g in enumerate(gpus):
        details: dict[str, Any] = {}
        with contextlib.suppress(Exception):
            details = dict(tf.config.experimental.get_device_details(g))
        cc = details.get("compute_capability")
        framework_gpus.append(
            {
                "index": i,
                "name": str(details.get("device_name") or g.name),
                "cc": f"{cc[0]}.{cc[1]}" if cc else None,
            }
        )
    out["metrics"]["framework_gpus"] = framework_gpus
    ccs = [str(d["cc"]) for d in framework_gpus if d["cc"]]
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
    precision = _precision(plan, framework_gpus[0]["cc"] if framework_gpus else None)
    out["metrics"]["precision"] = precision
    steps = max(6, int(plan.get("steps", 30)))
    sampler = hostmod.NvmlSampler() if gpus else None
    if sampler is not None:
        sampler.start()
    try:
        with tf.device(name):
            _matmul(tf, name, out)
            _train(tf, name, precision, steps, out)
    finally:
        if sampler is not None:
            hostmod.record_telemetry(sampler, out, checks)
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
                "XLA could not compile for this GPU: check the TensorFlow CUDA build (XLA needs "
                "ptxas and libdevice from the nvidia-cuda-nvcc wheel of tensorflow[and-cuda])",
            )
        )


def _train(tf: Any, name: str, precision: str, steps: int, out: dict[str, Any]) -> None:
    """A 2-layer MLP regression, plain SGD in a tf.function: the loss must fall clearly.

    Plain assign_sub rather than a Keras optimizer: the payload needs TensorFlow only (Keras is
    a separate package from TF 2.16 on, and Keras 2 and 3 optimizers differ).
    """
    try:
        low = tf.bfloat16 if precision == "bf16" else tf.float32
        x = tf.random.stateless_normal((512, 64), seed=(1, 2))
        y = tf.tanh(x @ tf.random.stateless_normal((64, 1), seed=(3, 4)))
        w1 = tf.Variable(tf.random.stateless_normal((64, 128), seed=(5, 6)) * 0.1)
        w2 = tf.Variable(tf.random.stateless_normal((128, 1), seed=(7, 8)) * 0.1)

        def step_fn() -> Any:
            with tf.GradientTape() as tape:
                # bf16 matmul, fp32 activation and loss: what mixed precision does per layer.
                h = tf.cast(tf.matmul(tf.cast(x, low), tf.cast(w1, low)), tf.float32)
                loss = tf.reduce_mean((tf.nn.gelu(h) @ w2 - y) ** 2)
            g1, g2 = tape.gradient(loss, [w1, w2])
            w1.assign_sub(0.1 * g1)
            w2.assign_sub(0.1 * g2)
            return loss, g1, g2

        step = tf.function(step_fn)
        losses: list[float] = []
        nonfinite: list[str] = []
        zero: list[str] = []
        loss: Any = None
        ts = time.perf_counter()
        for i in range(steps):
            loss, g1, g2 = step()
            if i == 0:
                for n, g in (("w1", g1), ("w2", g2)):
                    if not bool(tf.reduce_all(tf.math.is_finite(g))):
                        nonfinite.append(n)
                    elif not bool(tf.reduce_any(g != 0)):
                        zero.append(n)
            losses.append(float(loss))
        out["timings"]["train_s"] = round(time.perf_counter() - ts, 3)
        out["metrics"].update(
            {"loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4), "steps": steps}
        )
        # TensorFlow soft placement runs an op without a GPU kernel on the CPU without a word:
        # the batch, the weights and the loss must sit on the device under test.
        kind = name.strip("/").split(":")[0]
        off = [
            f"{n} on {t.device or '?'}"
            for n, t in (("x", x), ("y", y), ("w1", w1), ("w2", w2), ("loss", loss))
            if f"{kind}:" not in str(t.device).upper()
        ]
        out["checks"].append(ck.check_placement(device=name.strip("/"), off_device=off))
        out["checks"].append(ck.check_grads(n_params=2, nonfinite=nonfinite, zero=zero))
        out["checks"].append(ck.check_loss_falling(losses))
    except Exception as exc:
        out["errors"].append(traceback.format_exc(limit=4))
        out["checks"].append(
            ck.check("train", 2, "fail", _err(exc), "the training step crashed: see the error")
        )
