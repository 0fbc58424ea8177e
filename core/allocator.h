// core/allocator.h — memory allocators with statistics.
//
// An Allocator is passed explicitly to whoever allocates (no global default
// with mutable state). HeapAllocator serves CPU memory (64-byte aligned);
// CudaCachingAllocator serves one CUDA device and keeps freed blocks in size
// classes for reuse, like PyTorch's caching allocator (without stream
// tracking: a block freed while a stream still reads it must be synchronised by
// the caller first). All methods are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device.h"

namespace gtp {

struct AllocatorStats {
  int64_t bytes_in_use = 0;       // handed out, not yet freed (rounded sizes)
  int64_t peak_bytes_in_use = 0;  // max of bytes_in_use since creation / ResetPeak
  int64_t bytes_reserved = 0;     // held from the system (in use + cached)
  int64_t num_allocs = 0;         // successful Allocate calls
  int64_t num_cache_hits = 0;     // Allocate calls served from the cache
  std::string ToString() const;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns `bytes` of memory (nullptr for 0 bytes). ResourceExhausted when the
  // device is full. Never blocks on other threads beyond a short lock.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  // Returns memory obtained from Allocate on this allocator.
  virtual void Free(void* p) = 0;
  virtual Device device() const = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void ResetPeak() = 0;
};

namespace internal {
// What HeapAllocator and PinnedHostAllocator share: host memory (reported as
// Device::Cpu()), their live blocks and the statistics, under one mutex.
class HostAllocator : public Allocator {
 public:
  Device device() const override { return Device::Cpu(); }
  AllocatorStats stats() const override;
  void ResetPeak() override;

 protected:
  // Records `p` of `bytes` (in use and reserved; a successful allocation).
  void AddLive(void* p, size_t bytes);
  // Forgets `p`, which must be live (else a check failure naming `owner`).
  void RemoveLive(void* p, const char* owner);
  // Hands every live block to `release` (a leak by the owner, at destruction).
  void ReleaseLive(void (*release)(void*));

 private:
  mutable absl::Mutex mu_;
  std::map<void*, size_t> live_;  // GUARDED_BY(mu_)
  AllocatorStats stats_;          // GUARDED_BY(mu_)
};
}  // namespace internal

// Aligned host memory with statistics.
class HeapAllocator final : public internal::HostAllocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* p) override;
};

// Page-locked host memory (cudaHostAlloc), so host↔device copies can be
// truly asynchronous. Reports Device::Cpu(). Allocate fails with the CUDA
// error where no CUDA driver is present.
class PinnedHostAllocator final : public internal::HostAllocator {
 public:
  ~PinnedHostAllocator() override;
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* p) override;
};

// Caching allocator for one CUDA device. Sizes round up to 512 B below 1 MiB
// and to 2 MiB above; a freed block returns to its size class. When
// cudaMalloc fails, the cache is emptied and the allocation retried once.
class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device);
  ~CudaCachingAllocator() override;
  CudaCachingAllocator(const CudaCachingAllocator&) = delete;
  CudaCachingAllocator& operator=(const CudaCachingAllocator&) = delete;

  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* p) override;
  Device device() const override { return Device::Cuda(device_); }
  AllocatorStats stats() const override;
  void ResetPeak() override;
  // Returns every cached (free) block to the driver.
  void EmptyCache();

  static size_t RoundSize(size_t bytes);

 private:
  void EmptyCacheLocked();
  int device_;
  mutable absl::Mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> blocks
  std::map<void*, size_t> live_;
  AllocatorStats stats_;
};

}  // namespace gtp
