// layers/moe/internal/routing_math.h — the per-token and per-slot routing
// math of layers/moe/routing.h, shared by its CPU loops (routing.cc) and its
// CUDA kernels (cuda/routing.cu): one source compiled by both compilers, so
// that the two give the same bits.
//
// Every float operation is an explicit round-to-nearest multiply, add, subtract
// or divide (nvcc, and GCC where the target has FMA, would otherwise contract
// a·b + c into one rounding), and exp / log are our own
// (Cephes' single-precision polynomials, ~1 ulp): the C library's and CUDA's
// differ in the last bit. Sums run sequentially in a fixed order. Nothing here
// allocates: k ≤ kMaxTopK, and scores are recomputed where the CPU reference
// (router.h) keeps an [E] array.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GTP_MOE_HD __host__ __device__ inline
#else
#define GTP_MOE_HD inline
#endif

namespace gtp::layers::moe::routing_internal {

constexpr int kMaxTopK = 8;

// A RouterConfig flattened for the kernels, plus the router's shape.
struct RouteParams {
  int E = 0, k = 0;      // experts, top-k
  bool sigmoid = false;  // else softmax
  bool pre_softmax = true;
  float scaling = 1.0f;  // topk_scaling
  int num_groups = 0, group_topk = 0;
  int64_t capacity = 0;      // 0: dropless
  bool by_position = false;  // DropPolicy::kPosition
  // Aux-loss groups: G groups; local token t is in group (first_row + t) /
  // seq_len (seq_len 0: one group, the lane, of lane_rows tokens).
  float aux_coeff = 0.0f;
  int G = 1;
  int64_t seq_len = 0, first_row = 0, lane_rows = 1;
  // Context parallelism: seq_len and lane_rows count this CP rank's tokens,
  // 1/cp of each sequence (2 of its 2·cp chunks); the groups' and the
  // lane's token counts N_g, N (aux factor, z-loss) are cp times those.
  int cp = 1;
  float z_coeff = 0.0f;
  float loss_scale = 1.0f;  // backward: multiplies the aux and z gradients
};

GTP_MOE_HD float Mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  // The empty asm makes the product opaque, so that no host build (-mfma,
  // -march=native, aarch64's default contraction) fuses it into an FMA.
  float r = a * b;
#if defined(__x86_64__)
  __asm__("" : "+x"(r));
#elif defined(__aarch64__)
  __asm__("" : "+w"(r));
#else
  volatile float v = r;
  r = v;
#endif
  return r;
#endif
}
GTP_MOE_HD float Add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
GTP_MOE_HD float Sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
GTP_MOE_HD float Div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
GTP_MOE_HD uint32_t Bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}
GTP_MOE_HD float FromBits(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

// e^x: n = round(x·log2 e), r = x − n·ln 2 (two-part ln 2), a degree-7
// polynomial in r, times 2^n. 0 below −87 (no subnormal results), ∞ above 88.
GTP_MOE_HD float Exp(float x) {
  if (x != x) return x;
  if (x > 88.0f) return FromBits(0x7f800000u);
  if (x < -87.0f) return 0.0f;
  float n = Add(Mul(x, 1.44269504088896341f), 0.5f);
  // floor, exactly, on both sides: |n| < 2^23.
  float nt = static_cast<float>(static_cast<int>(n));
  if (nt > n) nt = Sub(nt, 1.0f);
  n = nt;
  const float r = Sub(Sub(x, Mul(n, 0.693359375f)), Mul(n, -2.12194440e-4f));
  float p = 1.9875691500e-4f;
  p = Add(Mul(p, r), 1.3981999507e-3f);
  p = Add(Mul(p, r), 8.3334519073e-3f);
  p = Add(Mul(p, r), 4.1665795894e-2f);
  p = Add(Mul(p, r), 1.6666665459e-1f);
  p = Add(Mul(p, r), 5.0000001201e-1f);
  const float y = Add(Add(Mul(Mul(p, r), r), r), 1.0f);
  const int ni = static_cast<int>(n);  // in [−126, 127]
  return Mul(y, FromBits(static_cast<uint32_t>(ni + 127) << 23));
}

// ln x of a positive normal x: x = f·2^e, f in [√½, √2), a polynomial in f − 1.
GTP_MOE_HD float Log(float x) {
  const uint32_t b = Bits(x);
  int e = static_cast<int>((b >> 23) & 0xffu) - 126;
  float f = FromBits((b & 0x807fffffu) | 0x3f000000u);  // [0.5, 1)
  if (f < 0.707106781186547524f) {
    e -= 1;
    f = Sub(Add(f, f), 1.0f);
  } else {
    f = Sub(f, 1.0f);
  }
  const float z = Mul(f, f);
  float y = 7.0376836292e-2f;
  y = Add(Mul(y, f), -1.1514610310e-1f);
  y = Add(Mul(y, f), 1.1676998740e-1f);
  y = Add(Mul(y, f), -1.2420140846e-1f);
  y = Add(Mul(y, f), 1.4249322787e-1f);
  y = Add(Mul(y, f), -1.6668057665e-1f);
  y = Add(Mul(y, f), 2.0000714765e-1f);
  y = Add(Mul(y, f), -2.4999993993e-1f);
  y = Add(Mul(y, f), 3.3333331174e-1f);
  y = Mul(Mul(y, f), z);
  const float fe = static_cast<float>(e);
  y = Add(y, Mul(fe, -2.12194440e-4f));
  y = Add(y, Mul(z, -0.5f));
  float r = Add(f, y);
  return Add(r, Mul(fe, 0.693359375f));
}

GTP_MOE_HD float Sigmoid(float x) { return Div(1.0f, Add(1.0f, Exp(-x))); }

// max of l[0, n) and Σ e^(l − max), sequential.
GTP_MOE_HD void MaxSum(const float* l, int n, float* m, float* s) {
  float mx = l[0];
  for (int i = 1; i < n; ++i)
    if (l[i] > mx) mx = l[i];
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum = Add(sum, Exp(Sub(l[i], mx)));
  *m = mx;
  *s = sum;
}

// Inserts (val, idx) into the descending list vals/idxs of *have ≤ k entries
// (a later equal value stays behind: ties go to the earlier index).
GTP_MOE_HD void Insert(float val, int32_t idx, float* vals, int32_t* idxs, int* have, int k) {
  int at = *have;
  while (at > 0 && val > vals[at - 1]) --at;
  if (at >= k) return;
  for (int j = (*have < k - 1 ? *have : k - 1); j > at; --j) {
    vals[j] = vals[j - 1];
    idxs[j] = idxs[j - 1];
  }
  vals[at] = val;
  idxs[at] = idx;
  if (*have < k) ++*have;
}

// The selection score of expert e (router.h): p (+ b), l (+ b) or σ (+ b);
// m, s: MaxSum of the token's logits (pre-softmax only).
GTP_MOE_HD float SelectScore(const RouteParams& p, const float* l, int e, float m, float s,
                             const float* bias) {
  const float v = p.sigmoid ? Sigmoid(l[e]) : p.pre_softmax ? Div(Exp(Sub(l[e], m)), s) : l[e];
  return bias != nullptr ? Add(v, bias[e]) : v;
}

// One token: logits l [E] → the top-k experts sel [k] and weights w [k].
GTP_MOE_HD void RouteToken(const RouteParams& p, const float* l, const float* bias, int32_t* sel,
                           float* w) {
  const int E = p.E, k = p.k;
  float m = 0.0f, s = 1.0f;
  if (!p.sigmoid && p.pre_softmax) MaxSum(l, E, &m, &s);
  int32_t keep[kMaxTopK];
  int nkeep = 0;
  const int gs = p.num_groups > 0 ? E / p.num_groups : E;
  if (p.num_groups > 0) {
    const int per = k / p.group_topk;
    float gval[kMaxTopK];
    for (int g = 0; g < p.num_groups; ++g) {
      float tv[kMaxTopK];
      int32_t ti[kMaxTopK];
      int have = 0;
      for (int i = 0; i < gs; ++i)
        Insert(SelectScore(p, l, g * gs + i, m, s, bias), i, tv, ti, &have, per);
      float sum = 0.0f;
      for (int i = 0; i < per; ++i) sum = Add(sum, tv[i]);
      Insert(sum, g, gval, keep, &nkeep, p.group_topk);
    }
  }
  float tv[kMaxTopK];
  int have = 0;
  for (int e = 0; e < E; ++e) {
    if (p.num_groups > 0) {
      bool eligible = false;
      for (int i = 0; i < nkeep; ++i) eligible = eligible || keep[i] == e / gs;
      if (!eligible) continue;
    }
    Insert(SelectScore(p, l, e, m, s, bias), e, tv, sel, &have, k);
  }
  if (p.sigmoid) {
    float S = 0.0f;
    for (int j = 0; j < k; ++j) S = Add(S, Sigmoid(l[sel[j]]));
    for (int j = 0; j < k; ++j) {
      const float sg = Sigmoid(l[sel[j]]);
      w[j] = Mul(p.scaling, k > 1 ? Div(sg, S) : sg);
    }
  } else if (p.pre_softmax) {
    for (int j = 0; j < k; ++j) w[j] = Mul(p.scaling, Div(Exp(Sub(l[sel[j]], m)), s));
  } else {
    float mm = l[sel[0]];
    for (int j = 1; j < k; ++j)
      if (l[sel[j]] > mm) mm = l[sel[j]];
    float ss = 0.0f;
    for (int j = 0; j < k; ++j) ss = Add(ss, Exp(Sub(l[sel[j]], mm)));
    for (int j = 0; j < k; ++j) w[j] = Mul(p.scaling, Div(Exp(Sub(l[sel[j]], mm)), ss));
  }
}

// Whether slot s keeps its expert under the capacity: counts [E] are the
// selections per expert, pos [n·k] / row_slot [n·k] the expert-sorted order
// of the selections (Dispatch of `selected`). kProbability: fewer than
// `capacity` slots of the expert have a larger weight (or an equal one and a
// lower slot); kPosition: fewer than `capacity` come earlier.
GTP_MOE_HD bool KeepSlot(const RouteParams& p, int64_t s, const int32_t* selected,
                         const float* weight, const int32_t* counts, const int32_t* pos,
                         const int32_t* row_slot) {
  const int e = selected[s];
  const int64_t c = counts[e];
  if (p.capacity <= 0 || c <= p.capacity) return true;
  int64_t off = 0;
  for (int i = 0; i < e; ++i) off += counts[i];
  if (p.by_position) return pos[s] - off < p.capacity;
  const float w = weight[s];
  int64_t rank = 0;
  for (int64_t r = off; r < off + c; ++r) {
    const int64_t s2 = row_slot[r];
    const float w2 = weight[s2];
    if (w2 > w || (w2 == w && s2 < s)) {
      if (++rank >= p.capacity) return false;
    }
  }
  return true;
}

GTP_MOE_HD int64_t GroupOf(const RouteParams& p, int64_t t) {
  return p.seq_len > 0 ? (p.first_row + t) / p.seq_len : 0;
}

// d(aux)/dq = AuxFactor · c[g, e]: coeff·E / (k·G·N_g²), N_g the whole
// group's tokens (over the CP ranks: the product is exact in integers, so
// CP gives one rank's bits).
GTP_MOE_HD float AuxFactor(const RouteParams& p) {
  const float ng = static_cast<float>((p.seq_len > 0 ? p.seq_len : p.lane_rows) * p.cp);
  return Div(Mul(p.aux_coeff, static_cast<float>(p.E)),
             Mul(Mul(static_cast<float>(p.k * p.G), ng), ng));
}

// Token t's part of aux: Σ_e AuxFactor·c[g, e]·q[e] (counts [G·E]).
GTP_MOE_HD float AuxPart(const RouteParams& p, const float* l, int64_t t, const float* counts) {
  const int E = p.E;
  const float f = AuxFactor(p);
  const float* c = counts + GroupOf(p, t) * E;
  float part = 0.0f;
  if (p.sigmoid) {
    float T = 0.0f;
    for (int e = 0; e < E; ++e) T = Add(T, Sigmoid(l[e]));
    for (int e = 0; e < E; ++e) part = Add(part, Mul(Mul(f, c[e]), Div(Sigmoid(l[e]), T)));
  } else {
    float m, s;
    MaxSum(l, E, &m, &s);
    for (int e = 0; e < E; ++e) part = Add(part, Mul(Mul(f, c[e]), Div(Exp(Sub(l[e], m)), s)));
  }
  return part;
}

// One token's dlogits dl [E] (=) from the weights' gradient dw [k] (ignored
// where expert < 0), the aux gradient (counts [G·E], or null for none) and the
// z-loss; returns the token's part of the z value (0 without z-loss).
GTP_MOE_HD float BackwardToken(const RouteParams& p, const float* l, int64_t t, const int32_t* sel,
                               const int32_t* expert, const float* dw, const float* counts,
                               float* dl) {
  const int E = p.E, k = p.k;
  const float sc = p.scaling, ls = p.loss_scale;
  float dws[kMaxTopK];
  for (int j = 0; j < k; ++j) dws[j] = expert[j] < 0 ? 0.0f : dw[j];
  const float f = counts != nullptr ? AuxFactor(p) : 0.0f;
  const float* cg = counts != nullptr ? counts + GroupOf(p, t) * E : nullptr;
  float m, s;
  MaxSum(l, E, &m, &s);
  float zf = 0.0f, zpart = 0.0f;
  if (p.z_coeff > 0.0f) {
    const float lse = Add(m, Log(s)), n = static_cast<float>(p.lane_rows * p.cp);
    zpart = Div(Mul(Mul(p.z_coeff, lse), lse), n);
    zf = Div(Mul(Mul(ls, 2.0f), Mul(p.z_coeff, lse)), n);
  }
  if (p.sigmoid) {
    float S = 0.0f, part[kMaxTopK];
    for (int j = 0; j < k; ++j) S = Add(S, Sigmoid(l[sel[j]]));
    if (k > 1) {
      float dot = 0.0f;
      for (int j = 0; j < k; ++j) dot = Add(dot, Mul(dws[j], Sigmoid(l[sel[j]])));
      for (int j = 0; j < k; ++j) part[j] = Mul(sc, Sub(Div(dws[j], S), Div(dot, Mul(S, S))));
    } else {
      part[0] = Mul(sc, dws[0]);
    }
    float T = 0.0f, dot2 = 0.0f;
    if (cg != nullptr) {
      for (int e = 0; e < E; ++e) T = Add(T, Sigmoid(l[e]));
      for (int e = 0; e < E; ++e) dot2 = Add(dot2, Mul(Div(Sigmoid(l[e]), T), Mul(f, cg[e])));
    }
    for (int e = 0; e < E; ++e) {
      float ds = 0.0f;
      for (int j = 0; j < k; ++j)
        if (sel[j] == e) ds = Add(ds, part[j]);
      if (cg != nullptr) ds = Add(ds, Mul(ls, Div(Sub(Mul(f, cg[e]), dot2), T)));
      const float sg = Sigmoid(l[e]);
      float v = Mul(Mul(ds, sg), Sub(1.0f, sg));
      if (p.z_coeff > 0.0f) v = Add(v, Mul(zf, Div(Exp(Sub(l[e], m)), s)));
      dl[e] = v;
    }
  } else if (p.pre_softmax) {
    // d_e = s·dw (selected) + loss_scale·daux_e; dl = p ∘ (d − p·d).
    float dot = 0.0f;
    for (int pass = 0; pass < 2; ++pass) {
      for (int e = 0; e < E; ++e) {
        float d = 0.0f;
        for (int j = 0; j < k; ++j)
          if (sel[j] == e) d = Add(d, Mul(sc, dws[j]));
        if (cg != nullptr) d = Add(d, Mul(ls, Mul(f, cg[e])));
        const float pe = Div(Exp(Sub(l[e], m)), s);
        if (pass == 0) {
          dot = Add(dot, Mul(pe, d));
        } else {
          float v = Mul(pe, Sub(d, dot));
          if (p.z_coeff > 0.0f) v = Add(v, Mul(zf, pe));
          dl[e] = v;
        }
      }
    }
  } else {
    float mm = l[sel[0]];
    for (int j = 1; j < k; ++j)
      if (l[sel[j]] > mm) mm = l[sel[j]];
    float ss = 0.0f, pw[kMaxTopK];
    for (int j = 0; j < k; ++j) ss = Add(ss, Exp(Sub(l[sel[j]], mm)));
    float dot = 0.0f;
    for (int j = 0; j < k; ++j) {
      pw[j] = Div(Exp(Sub(l[sel[j]], mm)), ss);
      dot = Add(dot, Mul(pw[j], dws[j]));
    }
    float dd = 0.0f;
    if (cg != nullptr)
      for (int e = 0; e < E; ++e) dd = Add(dd, Mul(Div(Exp(Sub(l[e], m)), s), Mul(f, cg[e])));
    for (int e = 0; e < E; ++e) {
      float v = 0.0f;
      for (int j = 0; j < k; ++j)
        if (sel[j] == e) v = Add(v, Mul(Mul(sc, pw[j]), Sub(dws[j], dot)));
      const float pe = Div(Exp(Sub(l[e], m)), s);
      if (cg != nullptr) v = Add(v, Mul(ls, Mul(pe, Sub(Mul(f, cg[e]), dd))));
      if (p.z_coeff > 0.0f) v = Add(v, Mul(zf, pe));
      dl[e] = v;
    }
  }
  return zpart;
}

}  // namespace gtp::layers::moe::routing_internal
