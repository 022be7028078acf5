"""The extension module: a C++ binding (g++) and one CUDA kernel (nvcc).

torch.utils.cpp_extension reads the architectures from TORCH_CUDA_ARCH_LIST and the parallel
jobs from MAX_JOBS (https://pytorch.org/docs/stable/cpp_extension.html); envbuild's builder
stage sets both from the lock.
"""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    ext_modules=[
        CUDAExtension(
            "envbuild_vecadd._C",
            ["csrc/vecadd.cpp", "csrc/vecadd_kernel.cu"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
