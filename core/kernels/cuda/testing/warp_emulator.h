// core/kernels/cuda/testing/warp_emulator.h — runs CUDA kernel source on the
// host for a CPU test. Every thread of a block is a fiber (its own stack,
// switched on one OS thread), one block at a time; a fiber
// runs until it meets a synchronisation point (__syncthreads, __syncwarp, a
// shuffle, ldmatrix .x4 (.trans), mma.sync m16n8k16 with bf16 inputs and
// f32 accumulation, a wmma call on 16×16×8 tf32 fragments) and the
// scheduler then picks the next ready thread in the order SetSchedule names.
// So a run is deterministic, and a kernel can be run in several orders the
// GPU may take: outputs that differ between them mean a thread reads shared
// memory that another writes with no barrier between (a race).
//
// What aborts, with a message naming the threads (or the block):
// - a lane that skips a warp-wide operation the others meet (a full-mask
//   shuffle under a branch: undefined on the GPU, an illegal instruction on
//   the H200);
// - a barrier that some threads never reach (divergent __syncthreads, or a
//   thread that returned early): found at once, when no thread can run;
// - cp.async of 16 bytes to or from an address that is not 16-byte aligned,
//   and a thread that ends with cp.async copies it never waited for;
// - a block that wrote dynamic shared memory past the bytes its launch
//   asked for.
// What shows in the outputs: shared memory is NaN before every block, so a
// read of a word no thread wrote comes out NaN; cp.async copies land when
// the issuing thread's cp.async.wait_group lets them, not before, so a read
// that comes too early sees the old contents (NaN at first).
//
// For tests only (it holds process-wide state: the block in flight). Use:
//   #define GTP_CUDA_HOST_EMULATION
//   #include "core/kernels/cuda/testing/warp_emulator.h"
//   #include "<the .cu file>"           // its launches run here, in order
//   alignas(16) double smem[N];          // the blocks' dynamic shared memory
//   gtp::emu::SetShared(smem, sizeof(smem));
// A kernel file opts in by routing its inline PTX and its launches through
// helpers that GTP_CUDA_HOST_EMULATION swaps (common.cuh's cp.async; see
// core/kernels/ssm/ssd_mma_common.cuh's MmaBf16) and declares its dynamic
// shared memory with common.cuh's GTP_DYNAMIC_SHARED and launches through
// common.cuh's Launch. A static __shared__ array becomes a static local: one
// for the block, as on the GPU, but not NaN-filled between blocks (it
// starts at zero). Blocks and grids may have up to three dimensions.
// It checks a kernel's logic (indexing, masks, the fragments' layouts as the
// PTX ISA documents them, barriers, races between barriers); timing, memory
// ordering and the tensor cores' own rounding inside an mma are not
// emulated. Under AddressSanitizer (--config=asan) the fiber switches are
// annotated, so a kernel's out-of-bounds access to the test's host buffers
// is reported as well.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#ifndef GTP_CUDA_HOST_EMULATION
#error "define GTP_CUDA_HOST_EMULATION before including warp_emulator.h"
#endif

#if defined(__SANITIZE_ADDRESS__)
#define GTP_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GTP_EMU_ASAN 1
#endif
#endif
#ifndef GTP_EMU_ASAN
#define GTP_EMU_ASAN 0
#endif
#if GTP_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// ---- Fiber contexts: on x86-64 a switch that saves the callee-saved
// registers and the FP control words on the fiber's own stack (ucontext's
// swapcontext also saves the signal mask, a system call a switch, which made
// the emulator several times slower); elsewhere ucontext.
#if defined(__x86_64__)
extern "C" void gtp_emu_switch(void** save_sp, void* load_sp);
// (weak: each test binary that includes this header gets one copy)
asm(R"(
  .text
  .weak gtp_emu_switch
  .type gtp_emu_switch, @function
gtp_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gtp_emu_switch, .-gtp_emu_switch
)");
#endif

namespace gtp::emu {

[[noreturn]] inline void Fail(const char* what);

struct Context {
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
  // The context's stack, for AddressSanitizer's fiber annotations (under
  // --config=asan the emulated kernels' host-memory accesses are checked
  // too: a CPU memcheck). The scheduler's is learned at the first switch.
  const void* stack = nullptr;
  size_t stack_bytes = 0;
  void* fake_stack = nullptr;
};

#if GTP_EMU_ASAN
// Where the context that resumed us runs (the scheduler's stack, learned
// by a fiber).
inline void FinishSwitch(void* fake_stack, Context* resumer) {
  const void* bottom = nullptr;
  size_t bytes = 0;
  __sanitizer_finish_switch_fiber(fake_stack, &bottom, &bytes);
  if (resumer != nullptr && resumer->stack == nullptr) {
    resumer->stack = bottom;
    resumer->stack_bytes = bytes;
  }
}
#endif

// Saves the running context in `from` and resumes `to` (`from` for good
// where done: its stack is not resumed again).
inline void Switch(Context& from, Context& to, bool done = false) {
#if GTP_EMU_ASAN
  __sanitizer_start_switch_fiber(done ? nullptr : &from.fake_stack, to.stack, to.stack_bytes);
#else
  (void)done;
#endif
#if defined(__x86_64__)
  gtp_emu_switch(&from.sp, to.sp);
#else
  if (swapcontext(&from.uc, &to.uc) != 0) Fail("swapcontext failed");
#endif
#if GTP_EMU_ASAN
  FinishSwitch(from.fake_stack, &to);
#endif
}

// `ctx` starts entry() on the stack [stack, stack + bytes) at its first
// Switch; entry must not return (it switches away for good).
inline void MakeContext(Context& ctx, char* stack, size_t bytes, void (*entry)()) {
  ctx.stack = stack;
  ctx.stack_bytes = bytes;
  ctx.fake_stack = nullptr;
#if GTP_EMU_ASAN
  // A fiber that ran here before never returned: its frames' redzones are
  // still poisoned.
  __asan_unpoison_memory_region(stack, bytes);
#endif
#if defined(__x86_64__)
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t{15};
  auto* slot = reinterpret_cast<uint64_t*>(top);
  slot[-1] = 0;                                  // entry's (never used) return address
  slot[-2] = reinterpret_cast<uint64_t>(entry);  // gtp_emu_switch's ret goes here
  for (int r = 3; r <= 8; ++r) slot[-r] = 0;     // rbp, rbx, r12 … r15
  uint32_t mxcsr;
  uint16_t fpcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  auto* words = reinterpret_cast<uint32_t*>(&slot[-9]);
  words[0] = mxcsr;
  words[1] = fpcw;
  ctx.sp = &slot[-9];
#else
  if (getcontext(&ctx.uc) != 0) Fail("getcontext failed");
  ctx.uc.uc_stack.ss_sp = stack;
  ctx.uc.uc_stack.ss_size = bytes;
  ctx.uc.uc_link = nullptr;
  makecontext(&ctx.uc, entry, 0);
#endif
}

// The order of a block's threads between synchronisation points: thread 0
// first, the last thread first, or a seeded random ready thread each time.
enum class Schedule { kInOrder, kReverse, kShuffled };
struct Settings {
  Schedule schedule = Schedule::kInOrder;
  uint32_t seed = 1;
};
inline Settings& CurrentSettings() {
  static Settings s;
  return s;
}
inline void SetSchedule(Schedule schedule, uint32_t seed = 1) {
  CurrentSettings() = Settings{schedule, seed};
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

[[noreturn]] inline void Fail(const char* what) {
  std::fprintf(stderr, "warp_emulator: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

enum class WarpOp : int64_t { kSync = 1, kShflXor, kShflUp, kShflDown, kShflIdx, kMma, kLdMatrix };

struct CpCopy {
  char* dst;
  const void* src;
  int bytes;
  bool valid;
};

struct Thread {
  enum class State { kReady, kWaiting, kDone };
  Context ctx;
  State state = State::kReady;
  const char* waits_at = "";
  int64_t seq = 0;                // warp-wide operations met (<< 8) | the last one's kind
  uint64_t slot = 0;              // a shuffle's value
  uint32_t frag[6] = {};          // an mma's A (4) and B (2) registers
  const float* wmma_a = nullptr;  // a wmma::mma_sync's fragments' elements
  const float* wmma_b = nullptr;
  std::vector<CpCopy> open;                 // cp.async copies not yet committed
  std::deque<std::vector<CpCopy>> pending;  // committed groups, oldest first
};

struct Barrier {
  int n = 0;
  std::vector<int> arrived;
};

struct Block {
  dim3 idx, grid, dim;  // blockIdx, gridDim, blockDim
  unsigned id = 0;      // the block's linear index, for messages
  int threads = 0;
  int current = 0;  // the thread running now
  std::vector<Thread> t;
  Barrier all;
  std::vector<Barrier> warps;
  Context scheduler;
  const std::function<void()>* fn = nullptr;
};

inline Block*& Current() {
  static Block* block = nullptr;
  return block;
}
inline Thread& Me() { return Current()->t[Current()->current]; }
inline int Tid() { return Current()->current; }

inline dim3 ThreadIdx() {
  const dim3 d = Current()->dim;
  const unsigned t = static_cast<unsigned>(Tid());
  return dim3(t % d.x, t / d.x % d.y, t / (d.x * d.y));
}
inline dim3 BlockIdx() { return Current()->idx; }
inline dim3 BlockDim() { return Current()->dim; }
inline dim3 GridDim() { return Current()->grid; }

// The block's dynamic shared memory (common.cuh's GTP_DYNAMIC_SHARED).
template <class T>
T* DynamicShared() {
  return reinterpret_cast<T*>(SharedMem().base);
}

// This thread arrives at `bar` and gives the CPU back to the scheduler; the
// last to arrive makes them all ready again.
inline void Wait(Barrier& bar, const char* what) {
  Block* b = Current();
  Thread& me = Me();
  bar.arrived.push_back(b->current);
  me.state = Thread::State::kWaiting;
  me.waits_at = what;
  if (static_cast<int>(bar.arrived.size()) == bar.n) {
    for (int i : bar.arrived) b->t[i].state = Thread::State::kReady;
    bar.arrived.clear();
  }
  Switch(me.ctx, b->scheduler);
}

inline void SyncThreads() { Wait(Current()->all, "__syncthreads"); }

// A warp-wide operation (__syncwarp, a shuffle, an mma) met by all 32 lanes:
// each lane says which operation it is at and how many it has met, and after
// the barrier every lane checks that the warp agrees. A lane that skipped one
// meets the others at a different operation, or never, and aborts.
inline void MeetWarp(WarpOp op) {
  Block* b = Current();
  const int tid = Tid(), base = tid / 32 * 32, lanes = b->warps[tid / 32].n;
  const int64_t mine = ((Me().seq >> 8) + 1) << 8 | static_cast<int64_t>(op);
  Me().seq = mine;
  Wait(b->warps[tid / 32], "a warp-wide operation");
  for (int l = 0; l < lanes; ++l) {
    const int64_t other = b->t[base + l].seq;
    if (other != mine) {
      std::fprintf(stderr,
                   "warp_emulator: block %u lane %d is at warp-wide operation #%lld (kind %d), "
                   "lane %d at #%lld (kind %d): a lane skipped a shuffle, mma or __syncwarp "
                   "that the others met\n",
                   b->id, tid % 32, static_cast<long long>(mine >> 8), static_cast<int>(mine & 255),
                   l, static_cast<long long>(other >> 8), static_cast<int>(other & 255));
      Fail("warp-wide operations out of step");
    }
  }
  Wait(b->warps[tid / 32], "a warp-wide operation");  // all checked before any moves on
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
  Me().slot = bits;
  MeetWarp(op);
  T out = v;
  if (src >= 0 && src < b->warps[tid / 32].n) std::memcpy(&out, &b->t[base + src].slot, sizeof(T));
  Wait(b->warps[tid / 32], "a shuffle");  // all read before any writes its next value
  return out;
}

// ---- cp.async: queued per thread; a group lands at the wait that covers it.
inline void CpAsyncIssue(char* dst, const void* src, int bytes, bool valid) {
  if (reinterpret_cast<uintptr_t>(dst) % bytes != 0 ||
      (valid && reinterpret_cast<uintptr_t>(src) % bytes != 0)) {
    std::fprintf(stderr,
                 "warp_emulator: cp.async of %d bytes from %p to shared offset %td: both must "
                 "be %d-byte aligned\n",
                 bytes, src, dst - SharedMem().base, bytes);
    Fail("misaligned cp.async");
  }
  if (dst < SharedMem().base || dst + bytes > SharedMem().base + SharedMem().bytes) {
    Fail("cp.async to an address outside shared memory");
  }
  Me().open.push_back(CpCopy{dst, src, bytes, valid});
}
inline void CpAsyncCommitGroup() {
  Thread& me = Me();
  me.pending.push_back(std::move(me.open));
  me.open.clear();
}
inline void CpAsyncWaitGroup(int n) {
  Thread& me = Me();
  while (static_cast<int>(me.pending.size()) > n) {
    for (const CpCopy& c : me.pending.front()) {
      if (c.valid) {
        std::memcpy(c.dst, c.src, c.bytes);
      } else {
        std::memset(c.dst, 0, c.bytes);
      }
    }
    me.pending.pop_front();
  }
}

// ---- the scheduler

class Stacks {
 public:
  static constexpr size_t kBytes = 512 * 1024;  // each, below a guard page
  char* Get(int i) {
    while (static_cast<int>(stacks_.size()) <= i) {
      const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
      void* p =
          mmap(nullptr, kBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) Fail("mmap of a fiber stack failed");
      if (mprotect(p, page, PROT_NONE) != 0) Fail("mprotect of a guard page failed");
      stacks_.push_back(static_cast<char*>(p) + page);
    }
    return stacks_[i];
  }

 private:
  std::vector<char*> stacks_;  // kept for the process (a test's lifetime)
};
inline Stacks& FiberStacks() {
  static Stacks s;
  return s;
}

inline void FiberEntry() {
  Block* b = Current();
#if GTP_EMU_ASAN
  FinishSwitch(nullptr, &b->scheduler);  // the first switch into this fiber
#endif
  (*b->fn)();
  Thread& me = Me();
  bool in_flight = !me.open.empty();  // (an empty committed group holds nothing)
  for (const std::vector<CpCopy>& g : me.pending) in_flight = in_flight || !g.empty();
  if (in_flight) {
    std::fprintf(stderr,
                 "warp_emulator: block %u thread %d ended with cp.async copies it never "
                 "waited for\n",
                 b->id, b->current);
    Fail("cp.async copies left in flight");
  }
  me.state = Thread::State::kDone;
  Switch(me.ctx, b->scheduler, /*done=*/true);  // a done thread is never resumed
  Fail("a finished thread was resumed");
}

inline int PickReady(const Block& b, std::mt19937& rng) {
  const Schedule s = CurrentSettings().schedule;
  if (s == Schedule::kShuffled) {
    int ready[1024];
    int n = 0;
    for (int i = 0; i < b.threads; ++i) {
      if (b.t[i].state == Thread::State::kReady) ready[n++] = i;
    }
    return n == 0 ? -1 : ready[std::uniform_int_distribution<int>(0, n - 1)(rng)];
  }
  for (int k = 0; k < b.threads; ++k) {
    const int i = s == Schedule::kInOrder ? k : b.threads - 1 - k;
    if (b.t[i].state == Thread::State::kReady) return i;
  }
  return -1;
}

[[noreturn]] inline void Deadlock(const Block& b) {
  int done = 0;
  for (const Thread& th : b.t) done += th.state == Thread::State::kDone;
  std::fprintf(stderr,
               "warp_emulator: block %u cannot go on: %d of %d threads have returned and the "
               "others wait:\n",
               b.id, done, b.threads);
  for (int i = 0, shown = 0; i < b.threads && shown < 8; ++i) {
    if (b.t[i].state != Thread::State::kWaiting) continue;
    std::fprintf(stderr, "  thread %d (warp %d lane %d) at %s\n", i, i / 32, i % 32,
                 b.t[i].waits_at);
    ++shown;
  }
  Fail(
      "a barrier that some threads never reach (divergent code around __syncthreads or a "
      "warp-wide operation?)");
}

// Runs fn (a kernel call with its arguments bound) on the block's threads
// for each block of the grid in order (x fastest).
template <class Fn>
void RunGrid(dim3 grid, dim3 dim, int64_t smem_bytes, Fn fn) {
  const int block = static_cast<int>(dim.x * dim.y * dim.z);
  if (block < 1 || block > 1024 || static_cast<size_t>(smem_bytes) > SharedMem().bytes) {
    std::fprintf(stderr,
                 "warp_emulator: block of %d threads (1 to 1024?), %lld bytes of shared memory "
                 "(SetShared gave %zu)\n",
                 block, static_cast<long long>(smem_bytes), SharedMem().bytes);
    Fail("launch out of the emulator's bounds");
  }
  const std::function<void()> body = fn;
  std::mt19937 rng(CurrentSettings().seed);
  const int64_t blocks = int64_t{grid.x} * grid.y * grid.z;
  for (int64_t id = 0; id < blocks; ++id) {
    Block b;
    b.idx = dim3(static_cast<unsigned>(id % grid.x), static_cast<unsigned>(id / grid.x % grid.y),
                 static_cast<unsigned>(id / (int64_t{grid.x} * grid.y)));
    b.grid = grid;
    b.dim = dim;
    b.id = static_cast<unsigned>(id);
    b.threads = block;
    b.fn = &body;
    b.t.resize(block);
    b.all.n = block;
    for (int w = 0; w * 32 < block; ++w)
      b.warps.push_back(Barrier{std::min(32, block - 32 * w), {}});
    float* f = reinterpret_cast<float*>(SharedMem().base);
    for (size_t i = 0; i < SharedMem().bytes / sizeof(float); ++i) {
      f[i] = std::numeric_limits<float>::quiet_NaN();
    }
    for (int i = 0; i < block; ++i) {
      MakeContext(b.t[i].ctx, FiberStacks().Get(i), Stacks::kBytes, &FiberEntry);
    }
    Current() = &b;
    for (;;) {
      const int next = PickReady(b, rng);
      if (next < 0) {
        for (const Thread& th : b.t) {
          if (th.state != Thread::State::kDone) Deadlock(b);
        }
        break;
      }
      b.current = next;
      Switch(b.scheduler, b.t[next].ctx);
    }
    Current() = nullptr;
    // Shared memory past the launch's bytes must still be the NaN fill: a
    // block that wrote there overran its allocation (an error on the GPU).
    const size_t used = (static_cast<size_t>(smem_bytes) + sizeof(float) - 1) / sizeof(float);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t i = used; i < SharedMem().bytes / sizeof(float); ++i) {
      if (std::memcmp(&f[i], &nan, sizeof(float)) != 0) {
        std::fprintf(stderr,
                     "warp_emulator: block %lld wrote shared memory at byte %zu, past the %lld "
                     "bytes its launch asked for\n",
                     static_cast<long long>(id), i * sizeof(float),
                     static_cast<long long>(smem_bytes));
        Fail("a write past the block's shared memory");
      }
    }
  }
}

}  // namespace gtp::emu

// ---- The CUDA names the kernels use, on the host.
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(...)
#define threadIdx (::gtp::emu::ThreadIdx())
#define blockIdx (::gtp::emu::BlockIdx())
#define blockDim (::gtp::emu::BlockDim())
#define gridDim (::gtp::emu::GridDim())

// The rounding intrinsics (round to nearest, no contraction): plain host
// operations (no FMA contraction on the host build's default x86-64 target).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
// The fast-math intrinsics as their exact host counterparts (the device's
// are approximations: an emulation test compares the kernel with the same
// function on the host, not with the GPU's values).
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }

// CUDA's device-side integer min/max and bit casts.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float __uint_as_float(unsigned int u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Atomics: the block's threads run one at a time, so a plain update is atomic.
inline unsigned int atomicMax(unsigned int* p, unsigned int v) {
  const unsigned int old = *p;
  if (v > old) *p = v;
  return old;
}
inline int atomicMin(int* p, int v) {
  const int old = *p;
  if (v < old) *p = v;
  return old;
}

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
// cp.async (common.cuh's helpers): SmemAddr is the offset in the emulated
// shared memory.
inline uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(static_cast<const char*>(p) - ::gtp::emu::SharedMem().base);
}
inline void CpAsync16(uint32_t dst, const void* src, bool valid) {
  ::gtp::emu::CpAsyncIssue(::gtp::emu::SharedMem().base + dst, src, 16, valid);
}
inline void CpAsync4(float* dst, const float* src, bool valid) {
  ::gtp::emu::CpAsyncIssue(reinterpret_cast<char*>(dst), src, 4, valid);
}
inline void CpAsyncCommit() { ::gtp::emu::CpAsyncCommitGroup(); }
template <int N>
inline void CpAsyncWait() {
  ::gtp::emu::CpAsyncWaitGroup(N);
}
}  // namespace gtp::kernels::cuda::internal

// The tensor-core operations (mma.sync, ldmatrix, wmma).
#include "core/kernels/cuda/testing/warp_emulator_fragments.h"
