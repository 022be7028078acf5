// The Python binding: checks the tensors, launches the kernel on torch's current stream.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

cudaError_t vecadd_launch(const float* a, const float* b, float* out, int64_t n,
                          cudaStream_t stream);

torch::Tensor vecadd(const torch::Tensor& a, const torch::Tensor& b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "vecadd: both tensors must be on a CUDA device");
    TORCH_CHECK(a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat,
                "vecadd: float32 tensors only");
    TORCH_CHECK(a.sizes() == b.sizes(), "vecadd: the tensors differ in shape");
    const c10::cuda::CUDAGuard guard(a.device());
    torch::Tensor ac = a.contiguous();
    torch::Tensor bc = b.contiguous();
    torch::Tensor out = torch::empty_like(ac);
    cudaError_t err = vecadd_launch(ac.data_ptr<float>(), bc.data_ptr<float>(),
                                    out.data_ptr<float>(), ac.numel(),
                                    at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "vecadd: kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("vecadd", &vecadd, "a + b on the GPU (one CUDA kernel)");
}
