#include "core/allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cuda_runtime.h"

namespace gtp {

std::string AllocatorStats::ToString() const {
  return absl::StrFormat("in_use=%d peak=%d reserved=%d allocs=%d cache_hits=%d", bytes_in_use,
                         peak_bytes_in_use, bytes_reserved, num_allocs, num_cache_hits);
}

namespace internal {

void HostAllocator::AddLive(void* p, size_t bytes) {
  absl::MutexLock lock(&mu_);
  live_[p] = bytes;
  stats_.bytes_in_use += bytes;
  stats_.bytes_reserved += bytes;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  stats_.num_allocs++;
}

void HostAllocator::RemoveLive(void* p, const char* owner) {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(p);
  GTP_CHECK(it != live_.end(), owner, "::Free of a pointer it did not allocate");
  stats_.bytes_in_use -= it->second;
  stats_.bytes_reserved -= it->second;
  live_.erase(it);
}

AllocatorStats HostAllocator::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void HostAllocator::ResetPeak() {
  absl::MutexLock lock(&mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

void HostAllocator::ReleaseLive(void (*release)(void*)) {
  absl::MutexLock lock(&mu_);
  for (auto& [p, size] : live_) release(p);
}

}  // namespace internal

absl::StatusOr<void*> HeapAllocator::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) return absl::ResourceExhaustedError(absl::StrFormat("host allocation of %d bytes failed", bytes));
  AddLive(p, rounded);
  return p;
}

void HeapAllocator::Free(void* p) {
  if (!p) return;
  RemoveLive(p, "HeapAllocator");
  std::free(p);
}

PinnedHostAllocator::~PinnedHostAllocator() {
  ReleaseLive([](void* p) { cudaFreeHost(p); });
}

absl::StatusOr<void*> PinnedHostAllocator::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  GTP_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  AddLive(p, bytes);
  return p;
}

void PinnedHostAllocator::Free(void* p) {
  if (!p) return;
  RemoveLive(p, "PinnedHostAllocator");
  cudaFreeHost(p);
}

CudaCachingAllocator::CudaCachingAllocator(int device) : device_(device) {}

CudaCachingAllocator::~CudaCachingAllocator() {
  absl::MutexLock lock(&mu_);
  EmptyCacheLocked();
  // Live blocks at destruction are a leak by the owner; release them anyway.
  for (auto& [p, size] : live_) cudaFree(p);
}

size_t CudaCachingAllocator::RoundSize(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = 2u << 20, kSplit = 1u << 20;
  if (bytes < kSplit) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

absl::StatusOr<void*> CudaCachingAllocator::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t size = RoundSize(bytes);
  absl::MutexLock lock(&mu_);
  void* p = nullptr;
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    stats_.num_cache_hits++;
  } else {
    GTP_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      EmptyCacheLocked();
      err = cudaMalloc(&p, size);
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return CudaStatus(err, absl::StrFormat("cudaMalloc(%d bytes) on cuda:%d (in use %d, reserved %d)",
                                             size, device_, stats_.bytes_in_use,
                                             stats_.bytes_reserved));
    }
    stats_.bytes_reserved += size;
  }
  live_[p] = size;
  stats_.bytes_in_use += size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  stats_.num_allocs++;
  return p;
}

void CudaCachingAllocator::Free(void* p) {
  if (!p) return;
  absl::MutexLock lock(&mu_);
  auto it = live_.find(p);
  GTP_CHECK(it != live_.end(), "CudaCachingAllocator::Free of a pointer it did not allocate");
  stats_.bytes_in_use -= it->second;
  free_[it->second].push_back(p);
  live_.erase(it);
}

AllocatorStats CudaCachingAllocator::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void CudaCachingAllocator::ResetPeak() {
  absl::MutexLock lock(&mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

void CudaCachingAllocator::EmptyCache() {
  absl::MutexLock lock(&mu_);
  EmptyCacheLocked();
}

void CudaCachingAllocator::EmptyCacheLocked() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) {
      cudaFree(p);
      stats_.bytes_reserved -= size;
    }
  }
  free_.clear();
}

}  // namespace gtp
