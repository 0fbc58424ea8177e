// core/kernels/fp8/gpu_env.h — the fp8 GPU tests' environment (testonly):
// host tensors for the CPU path; device copies, poisoned device outputs and
// downloads for the CUDA path on a non-blocking stream with a BlasContext.
// Construct only after checking CudaDeviceCount() (the BlasContext needs a
// GPU).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/kernels/fp8/block_gemm.h"
#include "core/kernels/fp8/block_testing.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/tensor.h"

namespace gtp::kernels::fp8::testing {

class GpuEnv {
 public:
  using ByteVec = std::vector<uint8_t>;

  GpuEnv() : stream_(kernels::testing::TestStream()), gpu_alloc_(0), blas_(0) {
    cpu = Exec::Cpu(heap_);
    gpu = Exec{Device::Cuda(0), &gpu_alloc_, stream_.get(), &blas_, nullptr};
  }
  // A host output filled with 0xff bytes.
  Tensor HostOut(const Shape& s, DType t) {
    Tensor h = cpu.Empty(s, t);
    if (h.nbytes() > 0) std::memset(h.raw_data(), 0xff, h.nbytes());
    return h;
  }
  // A device copy of a host tensor (kept alive by the env).
  Tensor Up(const Tensor& host) {
    bufs_.push_back(std::make_unique<kernels::testing::DeviceBuffer<uint8_t>>(Bytes(host)));
    return Tensor::Wrap(bufs_.back()->get(), host.shape(), host.dtype(), Device::Cuda(0));
  }
  Fp8Matrix Up(const Fp8Matrix& m) { return {Up(m.q), Up(m.scales), m.layout}; }
  // A device tensor with every byte set to `byte`.
  Tensor Poisoned(const Shape& s, DType t, uint8_t byte) {
    auto buf = std::make_unique<kernels::testing::DeviceBuffer<uint8_t>>(
        static_cast<size_t>(s.numel()) * SizeOf(t));
    if (buf->bytes() > 0) {
      GTP_CUDA_CHECK(cudaMemset(buf->get(), byte, buf->bytes()));
      GTP_CUDA_CHECK(cudaDeviceSynchronize());
    }
    bufs_.push_back(std::move(buf));
    return Tensor::Wrap(bufs_.back()->get(), s, t, Device::Cuda(0));
  }
  // A device tensor's bytes, after the stream's work.
  ByteVec Down(const Tensor& t) {
    GTP_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    ByteVec v(static_cast<size_t>(t.nbytes()));
    if (!v.empty())
      GTP_CUDA_CHECK(cudaMemcpy(v.data(), t.raw_data(), v.size(), cudaMemcpyDeviceToHost));
    return v;
  }
  std::vector<float> DownFloats(const Tensor& t) {
    return kernels::testing::LoadAs(Down(t), t.dtype());
  }

  Exec cpu, gpu;

 private:
  HeapAllocator heap_;
  Stream stream_;
  CudaCachingAllocator gpu_alloc_;
  kernels::cuda::BlasContext blas_;
  std::vector<std::unique_ptr<kernels::testing::DeviceBuffer<uint8_t>>> bufs_;
};

}  // namespace gtp::kernels::fp8::testing
