"""a + b with one CUDA kernel: envbuild's example of a torch extension built from source."""

import torch  # loads libtorch and libc10 before the extension that links them

from envbuild_vecadd import _C  # noqa: F401  (registers torch.ops.envbuild_vecadd)

__all__ = ["smoke", "vecadd"]


def vecadd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a + b (float32 CUDA tensors of one shape), computed by the extension's kernel."""
    return torch.ops.envbuild_vecadd.vecadd(a, b)


def smoke() -> str:
    """envbuild's smoke entry point (tier 2, on a GPU): the kernel's sum must equal torch's."""
    n = 1 << 20
    a = torch.arange(n, device="cuda", dtype=torch.float32)
    b = torch.full((n,), 0.5, device="cuda", dtype=torch.float32)
    got = vecadd(a, b)
    torch.cuda.synchronize()
    wrong = int((got != a + b).sum())
    if wrong:
        raise AssertionError(f"vecadd differs from torch's a + b in {wrong} of {n} elements")
    return f"vecadd of {n} floats on {torch.cuda.get_device_name(0)} equals torch's a + b"
