// core/kernels/ssm/testing/warp_emulator.h — runs CUDA kernel source on the
// host for a CPU test: every thread of a block is a std::thread, one block
// at a time; __syncthreads, __syncwarp, the shuffles and mma.sync m16n8k16
// (bf16 in, f32 accumulate) meet at barriers, so a warp's lanes exchange
// values as on the GPU. cp.async copies at once. Shared memory is filled
// with NaN before every block, so a read of a word the block never wrote
// shows up as NaN in the outputs. A lane that skips a warp-wide operation
// the others meet aborts (MeetWarp), and a barrier that some threads never
// reach aborts after 120 s (a hang detector: far beyond any wait on a loaded machine).
//
// For tests only (it holds process-wide state: the block in flight). Use:
//   #define GTP_CUDA_HOST_EMULATION
//   #include "core/kernels/ssm/testing/warp_emulator.h"
//   namespace <the kernels' namespace> { namespace { alignas(16) double smem_d[N]; } }
//   #include "<the .cu file>"           // its launchers now run here
//   gtp::emu::SetShared(smem_d, sizeof(smem_d));
// It checks the kernels' logic (indexing, masks, the fragments' layouts as
// PTX documents them, barriers); timing, memory ordering and the hardware's
// own rounding inside an mma are not emulated.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#ifndef GTP_CUDA_HOST_EMULATION
#error "define GTP_CUDA_HOST_EMULATION before including warp_emulator.h"
#endif

namespace gtp::emu {

class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lock, std::chrono::seconds(120), [&] { return gen_ != gen; })) {
      std::fprintf(stderr,
                   "warp_emulator: a barrier of %d threads waited 120 s (%d arrived): "
                   "divergent code around a warp- or block-wide operation?\n",
                   n_, count_);
      std::abort();
    }
  }

 private:
  const int n_;
  int count_ = 0;
  int64_t gen_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
};

struct Block {
  unsigned id = 0, grid = 0;
  int threads = 0;
  std::unique_ptr<Barrier> all;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<uint64_t> slot;  // a shuffle's value per thread
  std::vector<int64_t> seq;    // how many warp operations each thread has met
  std::vector<uint32_t> frag;  // an mma's A (4) and B (2) registers per thread
};

inline Block*& Current() {
  static Block* block = nullptr;
  return block;
}
inline int& Tid() {
  thread_local int tid = 0;
  return tid;
}
struct Shared {
  char* base = nullptr;
  size_t bytes = 0;
};
inline Shared& SharedMem() {
  static Shared s;
  return s;
}
inline void SetShared(void* base, size_t bytes) {
  SharedMem() = Shared{static_cast<char*>(base), bytes};
}

struct Idx {
  unsigned x, y, z;
};
inline Idx ThreadIdx() { return {static_cast<unsigned>(Tid()), 0, 0}; }
inline Idx BlockIdx() { return {Current()->id, 0, 0}; }
inline Idx BlockDim() { return {static_cast<unsigned>(Current()->threads), 1, 1}; }
inline Idx GridDim() { return {Current()->grid, 1, 1}; }

inline void SyncThreads() { Current()->all->Wait(); }

// A warp-wide operation (__syncwarp, a shuffle of some kind, an mma) met by
// all 32 lanes: each lane says which operation it is at and how many it has
// met, and after the barrier every lane checks that the warp agrees. A lane
// that skipped one (a full-mask shuffle under a branch: undefined on the
// GPU, an illegal instruction on the H200) meets the others at a different
// operation, or fewer in all, and aborts here, naming the lanes.
enum class WarpOp : int64_t { kSync = 1, kShflXor, kShflUp, kShflDown, kShflIdx, kMma };
inline void MeetWarp(WarpOp op) {
  Block* b = Current();
  const int tid = Tid(), base = tid / 32 * 32;
  const int64_t mine = ((b->seq[tid] >> 8) + 1) << 8 | static_cast<int64_t>(op);
  b->seq[tid] = mine;
  b->warps[tid / 32]->Wait();
  for (int l = 0; l < 32; ++l) {
    if (b->seq[base + l] != mine) {
      std::fprintf(stderr,
                   "warp_emulator: lane %d is at warp-wide operation #%lld (kind %d), "
                   "lane %d at #%lld (kind %d): a lane skipped a shuffle, mma or "
                   "__syncwarp that the others met\n",
                   tid % 32, static_cast<long long>(mine >> 8), static_cast<int>(mine & 255), l,
                   static_cast<long long>(b->seq[base + l] >> 8),
                   static_cast<int>(b->seq[base + l] & 255));
      std::abort();
    }
  }
  b->warps[tid / 32]->Wait();  // nobody moves on before all have checked
}
inline void SyncWarp() { MeetWarp(WarpOp::kSync); }

// Lane `src` of this warp's value (own value where src is outside 0..31).
template <class T>
T Exchange(T v, int src, WarpOp op) {
  static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
  Block* b = Current();
  const int tid = Tid(), base = tid / 32 * 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  b->slot[tid] = bits;
  MeetWarp(op);
  T out = v;
  if (src >= 0 && src < 32) std::memcpy(&out, &b->slot[base + src], sizeof(T));
  b->warps[tid / 32]->Wait();
  return out;
}

inline float Bf16Half(uint32_t reg, int half) {
  const uint16_t h = static_cast<uint16_t>(half ? reg >> 16 : reg & 0xffffu);
  return __bfloat162float(__ushort_as_bfloat16(h));
}

// d += A·B for the warp, the registers laid out as the PTX ISA's
// mma.m16n8k16 (.bf16) fragments: lane = 4g + t; A a0 (g, 2t..2t+1), a1
// (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..); B b0 (k 2t..2t+1, n g), b1
// (k 2t+8.., n g); D d0, d1 (g, 2t..2t+1), d2, d3 (g+8, 2t..2t+1). The lower
// half of a register holds the smaller column (k) index.
inline void MmaM16N8K16Bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  Block* blk = Current();
  const int tid = Tid(), base = tid / 32 * 32, lane = tid % 32;
  uint32_t* mine = &blk->frag[6 * tid];
  for (int i = 0; i < 4; ++i) mine[i] = a[i];
  mine[4] = b[0];
  mine[5] = b[1];
  MeetWarp(WarpOp::kMma);
  auto A = [&](int r, int k) {
    const int l = 4 * (r % 8) + (k % 8) / 2, reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    return Bf16Half(blk->frag[6 * (base + l) + reg], k % 2);
  };
  auto B = [&](int k, int n) {
    const int l = 4 * n + (k % 8) / 2, reg = k >= 8 ? 1 : 0;
    return Bf16Half(blk->frag[6 * (base + l) + 4 + reg], k % 2);
  };
  const int g = lane / 4, t = lane % 4;
  for (int q = 0; q < 4; ++q) {
    const int r = g + (q >> 1) * 8, n = 2 * t + (q & 1);
    float acc = d[q];
    for (int k = 0; k < 16; ++k) acc += A(r, k) * B(k, n);
    d[q] = acc;
  }
  blk->warps[tid / 32]->Wait();
}

// Runs fn (a kernel call with its arguments bound) on `block` threads for
// each of `grid` blocks in order.
template <class Fn>
void RunGrid(int64_t grid, int block, int64_t smem_bytes, Fn fn) {
  if (block % 32 != 0 || static_cast<size_t>(smem_bytes) > SharedMem().bytes) {
    std::fprintf(stderr,
                 "warp_emulator: block %d (a multiple of 32?), %lld bytes of shared "
                 "memory (SetShared gave %zu)\n",
                 block, static_cast<long long>(smem_bytes), SharedMem().bytes);
    std::abort();
  }
  for (int64_t id = 0; id < grid; ++id) {
    Block b;
    b.id = static_cast<unsigned>(id);
    b.grid = static_cast<unsigned>(grid);
    b.threads = block;
    b.all = std::make_unique<Barrier>(block);
    for (int w = 0; w < block / 32; ++w) b.warps.push_back(std::make_unique<Barrier>(32));
    b.slot.assign(block, 0);
    b.seq.assign(block, 0);
    b.frag.assign(6 * static_cast<size_t>(block), 0);
    float* f = reinterpret_cast<float*>(SharedMem().base);
    for (size_t i = 0; i < SharedMem().bytes / sizeof(float); ++i) {
      f[i] = std::numeric_limits<float>::quiet_NaN();
    }
    Current() = &b;
    std::vector<std::thread> threads;
    for (int t = 0; t < block; ++t) {
      threads.emplace_back([t, &fn] {
        Tid() = t;
        fn();
      });
    }
    for (std::thread& th : threads) th.join();
    Current() = nullptr;
  }
}

}  // namespace gtp::emu

// ---- The CUDA names the kernels use, on the host.
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __shared__
#define threadIdx (::gtp::emu::ThreadIdx())
#define blockIdx (::gtp::emu::BlockIdx())
#define blockDim (::gtp::emu::BlockDim())
#define gridDim (::gtp::emu::GridDim())

inline void __syncthreads() { ::gtp::emu::SyncThreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { ::gtp::emu::SyncWarp(); }
template <class T>
T __shfl_xor_sync(unsigned, T v, int mask) {
  return ::gtp::emu::Exchange(v, (::gtp::emu::Tid() % 32) ^ mask, ::gtp::emu::WarpOp::kShflXor);
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned d) {
  return ::gtp::emu::Exchange(v, ::gtp::emu::Tid() % 32 - static_cast<int>(d),
                              ::gtp::emu::WarpOp::kShflUp);
}
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned d) {
  return ::gtp::emu::Exchange(v, ::gtp::emu::Tid() % 32 + static_cast<int>(d),
                              ::gtp::emu::WarpOp::kShflDown);
}
template <class T>
T __shfl_sync(unsigned, T v, int src) {
  return ::gtp::emu::Exchange(v, src & 31, ::gtp::emu::WarpOp::kShflIdx);
}

namespace gtp::kernels::cuda::internal {
// cp.async: a copy at once (zeros where !valid); SmemAddr is the offset in
// the emulated shared memory.
inline uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(static_cast<const char*>(p) - ::gtp::emu::SharedMem().base);
}
inline void CpAsync16(uint32_t dst, const void* src, bool valid) {
  char* d = ::gtp::emu::SharedMem().base + dst;
  if (reinterpret_cast<uintptr_t>(d) % 16 != 0 ||
      (valid && reinterpret_cast<uintptr_t>(src) % 16)) {
    std::fprintf(stderr,
                 "warp_emulator: cp.async of 16 bytes from %p to shared offset %u: both "
                 "must be 16-byte aligned\n",
                 src, dst);
    std::abort();
  }
  if (valid) {
    std::memcpy(d, src, 16);
  } else {
    std::memset(d, 0, 16);
  }
}
inline void CpAsync4(float* dst, const float* src, bool valid) { *dst = valid ? *src : 0.0f; }
inline void CpAsyncCommit() {}
template <int N>
inline void CpAsyncWait() {}
}  // namespace gtp::kernels::cuda::internal
