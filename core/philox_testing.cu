#include <cuda_runtime.h>

#include "core/philox.h"
#include "core/philox_testing.h"

namespace gtp::testing_internal {
namespace {
__global__ void PhiloxKernel(uint64_t key, uint64_t first, int n, uint32_t* __restrict__ raw,
                             float* __restrict__ uni, float* __restrict__ nrm) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Philox4 r = PhiloxRaw(key, first + i, 0);
  for (int k = 0; k < 4; ++k) raw[4 * i + k] = r.v[k];
  uni[i] = PhiloxUniform(key, first + i);
  nrm[i] = PhiloxNormal(key, first + i);
}
absl::Status Err(cudaError_t e, const char* what) {
  return e == cudaSuccess ? absl::OkStatus() : absl::InternalError(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

absl::Status PhiloxOnDevice(uint64_t key, uint64_t first, int n, uint32_t* out_raw,
                            float* out_uniform, float* out_normal) {
  uint32_t* raw = nullptr;
  float *uni = nullptr, *nrm = nullptr;
  // First failure wins; plain cudaError_t keeps nvcc quiet about [[nodiscard]] Status.
  cudaError_t e = cudaMalloc(&raw, 16 * n);
  if (e == cudaSuccess) e = cudaMalloc(&uni, 4 * n);
  if (e == cudaSuccess) e = cudaMalloc(&nrm, 4 * n);
  if (e == cudaSuccess) {
    PhiloxKernel<<<(n + 255) / 256, 256>>>(key, first, n, raw, uni, nrm);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(out_raw, raw, 16 * n, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(out_uniform, uni, 4 * n, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(out_normal, nrm, 4 * n, cudaMemcpyDeviceToHost);
  cudaFree(raw);
  cudaFree(uni);
  cudaFree(nrm);
  return Err(e, "PhiloxOnDevice");
}
}  // namespace gtp::testing_internal
