// The kernel and its launcher. No torch headers here, so nvcc compiles a few lines per
// architecture; the torch-facing code is in vecadd.cpp (compiled once, by the host compiler).
#include <cstdint>
#include <cuda_runtime.h>

__global__ void vecadd_kernel(const float* a, const float* b, float* out, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = a[i] + b[i];
    }
}

cudaError_t vecadd_launch(const float* a, const float* b, float* out, int64_t n,
                          cudaStream_t stream) {
    if (n == 0) {
        return cudaSuccess;
    }
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    vecadd_kernel<<<static_cast<unsigned int>(blocks), threads, 0, stream>>>(a, b, out, n);
    return cudaGetLastError();
}
