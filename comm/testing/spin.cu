#include "comm/testing/spin.h"

namespace gtp::comm::testing {
namespace {

__global__ void SpinKernel(long long ns) {
  const long long t0 = clock64();
  // clock64 counts SM cycles; the rate comes from the device's clock below.
  while (clock64() - t0 < ns) {
  }
}

}  // namespace

void Spin(cudaStream_t stream, double ms) {
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  SpinKernel<<<1, 1, 0, stream>>>(static_cast<long long>(ms * khz));
}

}  // namespace gtp::comm::testing
