// core/kernels/cuda/flash_attention_common.cuh — what the fused attention's
// forward (flash_attention.cu) and backward (flash_attention_backward.cu)
// share: the PTX helpers (ldmatrix, mma.sync), the fragment addressing, the
// tile loaders and the argument checks.
//
// The fused attention (causal or bidirectional) in the FlashAttention-2
// scheme, bf16 in and out, f32 accumulation on the tensor cores (mma.sync
// m16n8k16, operands through ldmatrix).
//
// Math, per batch b, query head h, kv head g = h / (NH/NKV), scale = 1/√HS:
//   s_ij = scale·q_i·k_j (j ≤ i when causal, every j < T when not)
//   lse_i = log Σ_j exp(s_ij)   p_ij = exp(s_ij − lse_i)
//   out_i = Σ_j p_ij·v_j
// Backward, with D_i = Σ_d dout_id·out_id (computed first, FlashBwdDotKernel):
//   dp_ij = dout_i·v_j   ds_ij = p_ij·(dp_ij − D_i)
//   dq_i = scale·Σ_j ds_ij·k_j
//   dk_j = scale·Σ_{h of g} Σ_i ds_ij·q_i    dv_j = Σ_{h of g} Σ_i p_ij·dout_i
//
// Layout: q/out/dout/dq [B, T, NH, HS], k/v/dk/dv [B, T, NKV, HS], lse and the
// D scratch [B, NH, T] (f32). Gradients are written (=).
//
// Work split (every output element has exactly one owner, so there are no
// atomics and the results are bit-identical run to run). Causality is a
// template parameter (kCausal), so the causal kernels are unchanged by the
// bidirectional ones; "up to / from the diagonal" below reads "all tiles"
// when !kCausal:
//   forward   one block per (b·NH + h, 64-query tile); loops over the key
//             tiles up to the diagonal (fully masked tiles are never touched).
//   dk/dv     one block per (b·NKV + g, 64-key tile); loops over the query
//             heads of g and the query tiles from the diagonal on, keeping
//             dk/dv in registers.
//   dq        one block per (b·NH + h, 64-query tile) over the key tiles up
//             to the diagonal: it recomputes P and dP (three GEMMs instead of
//             FA2's atomic dq accumulation), which costs about 40% more tensor
//             work than FA2's backward but needs no dq scratch and stays
//             deterministic.
//   Backward launches: FlashBwdDotKernel (D) first, then for HS 64 the dk/dv
//             and dq blocks in one launch (FlashBwdMergedKernel, rounds of
//             decreasing work, 168-register cap for 3 blocks/SM), for HS 128 two
//             kernels (FlashBwdDkDvKernel, then FlashBwdDqKernel).
//   FlashAttentionBackwardSeparateDq (not in cuda.h) is the previous backward,
//   three kernels for both head sizes, kept for side-by-side timing in
//   dev/flash_attention; that directory's variants.cu holds the experiments
//   (dq fused into the dk/dv kernel, timing-only modes), which are not here.
// Each warp owns 16 rows of the block's tile; shared-memory rows are padded by
// 16 bytes so ldmatrix's eight row addresses fall in distinct bank groups.
// Tiles are copied with cp.async, the next key (or query) tile while the
// current one is used; rows past T are zero-filled and masked.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "core/kernels/cuda.h"
#include "core/kernels/cuda/common.cuh"

namespace gtp::kernels::cuda {
namespace {


using internal::CeilDiv;
using internal::CpAsync16;
using internal::CpAsyncCommit;
using internal::CpAsyncWait;
using internal::SmemAddr;
using internal::kWarpSize;
using internal::WarpSum;

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kPad = 8;  // bf16 elements of padding per shared-memory row

// ---- PTX helpers ---------------------------------------------------------------------

#if defined(GTP_CUDA_HOST_EMULATION)
// The host warp emulator (core/kernels/cuda/testing/warp_emulator.h) runs them.
__device__ __forceinline__ void Ldsm4(uint32_t (&r)[4], uint32_t addr) {
  ::gtp::emu::LdMatrixX4(r, addr, /*trans=*/false);
}
__device__ __forceinline__ void Ldsm4T(uint32_t (&r)[4], uint32_t addr) {
  ::gtp::emu::LdMatrixX4(r, addr, /*trans=*/true);
}
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  const uint32_t b[2] = {b0, b1};
  ::gtp::emu::MmaM16N8K16Bf16(c, a, b);
}
#else
__device__ __forceinline__ void Ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void Ldsm4T(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// c[16×8] += a[16×16]·b[16×8], bf16 operands, f32 accumulators.
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif

__device__ __forceinline__ uint32_t PackBF16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The A fragment (16×16, bf16) of k-step kk made from two adjacent 16×8 C
// fragments c[2·kk], c[2·kk + 1] of an f32 accumulator: how P (or dS) is
// reused as the next product's A operand without a trip through shared memory.
template <int kN>
__device__ __forceinline__ void PackAFragment(const float (&c)[kN][4], int kk, uint32_t (&a)[4]) {
  a[0] = PackBF16(c[2 * kk][0], c[2 * kk][1]);
  a[1] = PackBF16(c[2 * kk][2], c[2 * kk][3]);
  a[2] = PackBF16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = PackBF16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

__device__ __forceinline__ float Exp2(float x) {
#if defined(GTP_CUDA_HOST_EMULATION)
  return exp2f(x);  // (ex2.approx's error is within the tests' bf16 bounds)
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#endif
}

// ---- Fragment addressing (per lane; `s` is a tile with row stride kS elements) --------
// Fragment layouts of m16n8k16 (g = lane / 4, t = lane % 4): A regs hold
// (row g | g+8, cols 2t | 2t+8 ..+1); B regs (k 2t | 2t+8 ..+1, col g); C holds
// (row g, cols 2t, 2t+1) and (row g+8, cols 2t, 2t+1).

// A fragment, rows r0..r0+15 × cols c0..c0+15 of a row-major tile.
template <int kS>
__device__ __forceinline__ uint32_t AddrA(const uint16_t* s, int r0, int c0, int lane) {
  return SmemAddr(s + (r0 + (lane & 15)) * kS + c0 + (lane >> 4) * 8);
}
// A fragment, rows m0..m0+15 × cols k0..k0+15, of a tile stored transposed
// ([k][m], e.g. dSᵀ for dS·K). ldmatrix.trans.
template <int kS>
__device__ __forceinline__ uint32_t AddrAT(const uint16_t* s, int m0, int k0, int lane) {
  return SmemAddr(s + (k0 + (lane & 7) + ((lane >> 4) << 3)) * kS + m0 + ((lane >> 3) & 1) * 8);
}
// B fragments of two n8 tiles (n0, n0+8) × k c0..c0+15, the tile stored [n][k]
// (e.g. K for Q·Kᵀ): regs 0,1 → n-tile n0; regs 2,3 → n-tile n0+8. ldmatrix.
template <int kS>
__device__ __forceinline__ uint32_t AddrBnk(const uint16_t* s, int n0, int c0, int lane) {
  return SmemAddr(s + (n0 + (lane & 7) + ((lane >> 4) << 3)) * kS + c0 + ((lane >> 3) & 1) * 8);
}
// Same two n8 tiles of a tile stored [k][n] (e.g. V for P·V), k rows k0..k0+15.
// ldmatrix.trans.
template <int kS>
__device__ __forceinline__ uint32_t AddrBkn(const uint16_t* s, int k0, int n0, int lane) {
  return SmemAddr(s + (k0 + (lane & 7) + (((lane >> 3) & 1) << 3)) * kS + n0 + (lane >> 4) * 8);
}

// Copies kRows × HS bf16 from global rows (stride ld elements) to a padded
// shared tile; rows ≥ valid are zero-filled (never read).
template <int HS, int kRows, int kThreads>
__device__ __forceinline__ void LoadTile(uint16_t* s, const uint16_t* g, int64_t ld, int valid) {
  constexpr int kChunks = HS / 8, kTotal = kRows * kChunks;
  static_assert(kTotal % kThreads == 0, "tile copy must divide over the block");
#pragma unroll
  for (int i = 0; i < kTotal / kThreads; ++i) {
    const int c = i * kThreads + threadIdx.x;
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool ok = r < valid;
    CpAsync16(SmemAddr(s + r * (HS + kPad) + col), ok ? g + r * ld + col : g, ok);
  }
}

// Writes 16 rows × HS of a warp's staged tile (shared, stride HS + kPad) to
// global rows row0.. (stride ld), skipping rows ≥ T. 16-byte stores.
template <int HS>
__device__ __forceinline__ void StoreRows(const uint16_t* s, uint16_t* g, int64_t ld, int row0,
                                          int T, int lane) {
  constexpr int kChunks = HS / 8;
#pragma unroll
  for (int i = 0; i < 16 * kChunks / kWarpSize; ++i) {
    const int c = i * kWarpSize + lane;
    const int r = c / kChunks, col = (c % kChunks) * 8;
    if (row0 + r < T) {
      *reinterpret_cast<uint4*>(g + (row0 + r) * ld + col) =
          *reinterpret_cast<const uint4*>(s + r * (HS + kPad) + col);
    }
  }
}

// Stages a warp's 16 × HS f32 accumulator fragment (times `mul`) into shared
// rows (stride HS + kPad) as bf16.
template <int HS>
__device__ __forceinline__ void StageAcc(uint16_t* s, const float (&acc)[HS / 8][4], float mul0,
                                         float mul1, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int d = 0; d < HS / 8; ++d) {
    *reinterpret_cast<uint32_t*>(s + g * (HS + kPad) + d * 8 + 2 * t) =
        PackBF16(acc[d][0] * mul0, acc[d][1] * mul0);
    *reinterpret_cast<uint32_t*>(s + (g + 8) * (HS + kPad) + d * 8 + 2 * t) =
        PackBF16(acc[d][2] * mul1, acc[d][3] * mul1);
  }
}

// bf16 tensors are copied 16 bytes at a time (rows of HS = 64 or 128 elements
// stay aligned when the base is); f32 buffers need only their natural alignment.
void CheckArgs(const char* what, const void* const* bf16_ptrs, int n_bf16,
               const void* const* f32_ptrs, int n_f32, int64_t B, int64_t T, int64_t NH,
               int64_t NKV, int64_t HS) {
  GTP_CU_REQUIRE(HS == 64 || HS == 128, "%s: head size %lld is not supported (64 or 128)", what,
                 static_cast<long long>(HS));
  GTP_CU_REQUIRE(B >= 0 && T >= 0 && NKV >= 1 && NH >= NKV && NH % NKV == 0,
                 "%s: bad shape B=%lld T=%lld NH=%lld NKV=%lld", what, static_cast<long long>(B),
                 static_cast<long long>(T), static_cast<long long>(NH),
                 static_cast<long long>(NKV));
  GTP_CU_REQUIRE(CeilDiv(T, 64) <= 65535 && B * NH < (int64_t{1} << 31),
                 "%s: shape too large for the grid: B=%lld T=%lld NH=%lld", what,
                 static_cast<long long>(B), static_cast<long long>(T),
                 static_cast<long long>(NH));
  for (int i = 0; i < n_bf16; ++i) {
    GTP_CU_REQUIRE(bf16_ptrs[i] != nullptr && reinterpret_cast<uintptr_t>(bf16_ptrs[i]) % 16 == 0,
                   "%s: bf16 pointer %d is null or not 16-byte aligned", what, i);
  }
  for (int i = 0; i < n_f32; ++i) {
    GTP_CU_REQUIRE(f32_ptrs[i] != nullptr && reinterpret_cast<uintptr_t>(f32_ptrs[i]) % 4 == 0,
                   "%s: f32 pointer %d is null or misaligned", what, i);
  }
}

const uint16_t* U(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }
uint16_t* U(bf16* p) { return reinterpret_cast<uint16_t*>(p); }

}  // namespace
}  // namespace gtp::kernels::cuda
