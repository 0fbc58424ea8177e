// core/kernels/cuda/testing/warp_emulator_fragments.h — the warp emulator's
// tensor-core operations: mma.sync m16n8k16 (bf16 in, f32 accumulate) and
// ldmatrix .x4 (.trans) by the PTX ISA's fragment layouts, and wmma's
// 16×16×8 tf32 fragments (nvcuda::wmma). Each is a warp-wide operation: the
// lanes meet (MeetWarp), read each other's registers, and meet again before
// any writes its result. Included by warp_emulator.h (not on its own).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace gtp::emu {

inline float Bf16Half(uint32_t reg, int half) {
  const uint16_t h = static_cast<uint16_t>(half ? reg >> 16 : reg & 0xffffu);
  return __bfloat162float(__ushort_as_bfloat16(h));
}

// d += A·B for the warp, the registers laid out as the PTX ISA's
// mma.m16n8k16 (.bf16) fragments: lane = 4g + t; A a0 (g, 2t..2t+1), a1
// (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..); B b0 (k 2t..2t+1, n g), b1
// (k 2t+8.., n g); D d0, d1 (g, 2t..2t+1), d2, d3 (g+8, 2t..2t+1). The lower
// half of a register holds the smaller column (k) index. The sum runs in
// f32 in k order.
inline void MmaM16N8K16Bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  Block* blk = Current();
  const int tid = Tid(), base = tid / 32 * 32, lane = tid % 32;
  uint32_t* mine = Me().frag;
  for (int i = 0; i < 4; ++i) mine[i] = a[i];
  mine[4] = b[0];
  mine[5] = b[1];
  MeetWarp(WarpOp::kMma);
  auto A = [&](int r, int k) {
    const int l = 4 * (r % 8) + (k % 8) / 2, reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    return Bf16Half(blk->t[base + l].frag[reg], k % 2);
  };
  auto B = [&](int k, int n) {
    const int l = 4 * n + (k % 8) / 2, reg = k >= 8 ? 1 : 0;
    return Bf16Half(blk->t[base + l].frag[4 + reg], k % 2);
  };
  const int g = lane / 4, t = lane % 4;
  for (int q = 0; q < 4; ++q) {
    const int r = g + (q >> 1) * 8, n = 2 * t + (q & 1);
    float acc = d[q];
    for (int k = 0; k < 16; ++k) acc += A(r, k) * B(k, n);
    d[q] = acc;
  }
  Wait(blk->warps[tid / 32], "an mma");  // all read before any writes its next fragments
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane i names row i % 8
// of 8×8 matrix i / 8 (16 bytes at shared offset addr). Without .trans lane
// l gets in r[j] matrix j's row l / 4, columns 2(l % 4) and 2(l % 4) + 1;
// with .trans its column l / 4, rows 2(l % 4) and 2(l % 4) + 1 (the smaller
// index in the low half).
inline void LdMatrixX4(uint32_t (&r)[4], uint32_t addr, bool trans) {
  Block* b = Current();
  const int tid = Tid(), base = tid / 32 * 32, lane = tid % 32;
  Me().slot = addr;
  MeetWarp(WarpOp::kLdMatrix);
  auto element = [&](int j, int row, int col) {
    const uint32_t a = static_cast<uint32_t>(b->t[base + 8 * j + row].slot) + 2 * col;
    if (a % 2 != 0 || a + 2 > SharedMem().bytes) Fail("ldmatrix row address outside shared memory");
    uint16_t v;
    std::memcpy(&v, SharedMem().base + a, sizeof(v));
    return static_cast<uint32_t>(v);
  };
  uint32_t out[4];
  const int g = lane / 4, t = lane % 4;
  for (int j = 0; j < 4; ++j) {
    out[j] = trans ? element(j, 2 * t, g) | element(j, 2 * t + 1, g) << 16
                   : element(j, g, 2 * t) | element(j, g, 2 * t + 1) << 16;
  }
  Wait(b->warps[tid / 32], "an ldmatrix");  // all read the addresses before any moves on
  for (int j = 0; j < 4; ++j) r[j] = out[j];
}

// ---- wmma (nvcuda::wmma below) for 16×16×8 tf32 fragments: element e of
// a fragment of R×C elements is lane e % 32's x[e / 32], at row e / C,
// column e % C. (CUDA leaves the mapping unspecified, so code that is right
// on the GPU does not depend on it.) The product's sum runs in f32 in k
// order; operands that the caller rounded to tf32 (__float_to_tf32) multiply
// exactly in f32.

// d = a·b + c over the warp: a 16×8 (row-major elements), b 8×16, c and d
// 16×16 accumulators (8 elements a lane).
inline void WmmaMma(float* d, const float* a, const float* b, const float* c) {
  Block* blk = Current();
  const int tid = Tid(), base = tid / 32 * 32, lane = tid % 32;
  Me().wmma_a = a;
  Me().wmma_b = b;
  MeetWarp(WarpOp::kMma);
  auto A = [&](int r, int k) {
    const int e = r * 8 + k;
    return blk->t[base + e % 32].wmma_a[e / 32];
  };
  auto B = [&](int k, int n) {
    const int e = k * 16 + n;
    return blk->t[base + e % 32].wmma_b[e / 32];
  };
  float out[8];
  for (int t = 0; t < 8; ++t) {
    const int e = lane + 32 * t, r = e / 16, n = e % 16;
    float acc = c[t];
    for (int k = 0; k < 8; ++k) acc += A(r, k) * B(k, n);
    out[t] = acc;
  }
  Wait(blk->warps[tid / 32], "a wmma");  // all read a and b before any writes d
  for (int t = 0; t < 8; ++t) d[t] = out[t];
}

inline float RoundTf32(float v) {  // cvt.rna.tf32.f32: nearest, ties away from zero
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & ~0x1fffu;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

}  // namespace gtp::emu

namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
}  // namespace precision
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment;
template <class Layout>
struct fragment<matrix_a, 16, 16, 8, precision::tf32, Layout> {
  static constexpr int num_elements = 4, kRows = 16, kCols = 8;
  float x[num_elements];
};
template <class Layout>
struct fragment<matrix_b, 16, 16, 8, precision::tf32, Layout> {
  static constexpr int num_elements = 4, kRows = 8, kCols = 16;
  float x[num_elements];
};
template <>
struct fragment<accumulator, 16, 16, 8, float, void> {
  static constexpr int num_elements = 8, kRows = 16, kCols = 16;
  float x[num_elements];
};

inline float __float_to_tf32(float v) { return ::gtp::emu::RoundTf32(v); }

template <class Frag>
void fill_fragment(Frag& f, float v) {
  for (float& e : f.x) e = v;
}

// A fragment's elements from memory, row- or column-major with leading
// dimension ldm; the warp meets, as on the GPU.
template <class Use, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 8, precision::tf32, Layout>& f, const float* p,
                      unsigned ldm) {
  using Frag = fragment<Use, 16, 16, 8, precision::tf32, Layout>;
  ::gtp::emu::SyncWarp();
  const int lane = ::gtp::emu::Tid() % 32;
  const bool rows = std::is_same<Layout, row_major>::value;
  for (int t = 0; t < Frag::num_elements; ++t) {
    const int e = lane + 32 * t, r = e / Frag::kCols, c = e % Frag::kCols;
    f.x[t] = rows ? p[r * ldm + c] : p[r + c * ldm];
  }
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 8, float>& f,
                              unsigned ldm, layout_t layout) {
  ::gtp::emu::SyncWarp();
  const int lane = ::gtp::emu::Tid() % 32;
  for (int t = 0; t < 8; ++t) {
    const int e = lane + 32 * t, r = e / 16, c = e % 16;
    (layout == mem_row_major ? p[r * ldm + c] : p[r + c * ldm]) = f.x[t];
  }
}
template <class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 8, float>& d,
              const fragment<matrix_a, 16, 16, 8, precision::tf32, LA>& a,
              const fragment<matrix_b, 16, 16, 8, precision::tf32, LB>& b,
              const fragment<accumulator, 16, 16, 8, float>& c) {
  ::gtp::emu::WmmaMma(d.x, a.x, b.x, c.x);
}
}  // namespace nvcuda::wmma
