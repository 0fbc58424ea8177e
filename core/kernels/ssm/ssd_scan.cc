// The Mamba-2 SSD scan by chunks (math in ssd_scan.h), CPU implementation.
//
// Per (b, h) and chunk [c0, c0 + Lc), with a_t = dt_t·A, cs_i = Σ_{k ≤ i} a_k
// (local, in double), seg_ij = exp(cs_i − cs_j) (j ≤ i), e_i = exp(cs_i),
// l_j = exp(cs_last − cs_j), S = S_in (the state entering the chunk):
//   W_ij = (C_i·B_j)·seg_ij·dt_j
//   y_i  = Σ_{j ≤ i} W_ij·x_j + e_i·S·C_i + D·x_i
//   S_out = e_last·S + Σ_j l_j·dt_j·x_j ⊗ B_j
// Backward, G = ∂L/∂S_out (zero after the last chunk), Q_ij = (dy_i·x_j)·seg_ij·dt_j:
//   dx_j  = Σ_{i ≥ j} W_ij·dy_i + l_j·dt_j·G·B_j + D·dy_j
//   dB_j += Σ_{i ≥ j} Q_ij·C_i + l_j·dt_j·Gᵀ·x_j          (summed over the group's heads)
//   dC_i += Σ_{j ≤ i} Q_ij·B_j + e_i·Sᵀ·dy_i
//   ddt_j = Σ_{i ≥ j} (C_i·B_j)·seg_ij·(dy_i·x_j) + l_j·x_j·(G·B_j) + A·da_j
//   dcs_i: +Σ_j T_ij − Σ_k T_ki (T_ij = W_ij·(dy_i·x_j)) + e_i·dy_i·(S·C_i)
//          − U_i, and cs_last also gets Σ_j U_j + e_last·⟨G, S⟩ (U_j = l_j·dt_j·x_j·(G·B_j))
//   da_k  = Σ_{i ≥ k} dcs_i;  dA += Σ_k dt_k·da_k;  dD += Σ_t dy_t·x_t
//   G_in  = e_last·G + Σ_i e_i·dy_i ⊗ C_i   (∂L/∂S_in, the previous chunk's G)
// The chunk-entry states S_in are recomputed by a forward pass over the
// chunk states (steps 2–3 only) before the reverse pass.
#include "core/kernels/ssm/ssd_scan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "core/kernels/ssm/ssd_scan_cuda.h"
#include "core/status.h"

namespace gtp::kernels::ssm {
namespace {

struct Dims {
  int64_t B, T, H, P, G, N;
};

void CheckTensor(const Exec& e, const Tensor& t, const char* op, const char* what) {
  GTP_CHECK(t.defined(), op, ": ", what, " is undefined");
  GTP_CHECK(t.device() == e.device, op, ": ", what, " is on ", t.device().ToString(), ", exec on ",
            e.device.ToString());
  GTP_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous: ", t.ToString());
  GTP_CHECK(t.dtype() == DType::kF32, op, ": ", what, " must be f32, got ", t.ToString());
}

bool Is(const Tensor& t, std::initializer_list<int64_t> dims) {
  if (t.rank() != static_cast<int>(dims.size())) return false;
  int i = 0;
  for (int64_t d : dims)
    if (t.dim(i++) != d) return false;
  return true;
}

// Checks the forward's inputs and returns their sizes.
Dims CheckInputs(const char* op, const Exec& e, const Tensor& x, const Tensor& dt, const Tensor& A,
                 const Tensor& Bm, const Tensor& Cm, const Tensor& D, int64_t chunk) {
  CheckTensor(e, x, op, "x");
  CheckTensor(e, dt, op, "dt");
  CheckTensor(e, A, op, "A");
  CheckTensor(e, Bm, op, "Bm");
  CheckTensor(e, Cm, op, "Cm");
  CheckTensor(e, D, op, "D");
  GTP_CHECK(chunk >= 1, op, ": chunk must be ≥ 1, got ", chunk);
  GTP_CHECK(x.rank() == 4, op, ": x must be [B, T, H, P], got ", x.ToString());
  const int64_t B = x.dim(0), T = x.dim(1), H = x.dim(2), P = x.dim(3);
  GTP_CHECK(Bm.rank() == 4 && Bm.dim(0) == B && Bm.dim(1) == T, op,
            ": Bm must be [B, T, G, N] with B = ", B, ", T = ", T, " (x ", x.ToString(), "), got ",
            Bm.ToString());
  const int64_t G = Bm.dim(2), N = Bm.dim(3);
  GTP_CHECK(G >= 1 && H % G == 0, op, ": heads H = ", H, " must be a multiple of groups G = ", G,
            " (x ", x.ToString(), ", Bm ", Bm.ToString(), ")");
  GTP_CHECK(Cm.shape() == Bm.shape(), op, ": Cm must be shaped like Bm ", Bm.ToString(), ", got ",
            Cm.ToString());
  GTP_CHECK(Is(dt, {B, T, H}), op, ": dt must be [B, T, H] = [", B, ", ", T, ", ", H, "], got ",
            dt.ToString());
  GTP_CHECK(Is(A, {H}), op, ": A must be [H] = [", H, "], got ", A.ToString());
  GTP_CHECK(Is(D, {H}), op, ": D must be [H] = [", H, "], got ", D.ToString());
  return Dims{B, T, H, P, G, N};
}

void CheckLike(const Exec& e, const Tensor& t, const Tensor& like, const char* op, const char* what,
               const char* like_name) {
  CheckTensor(e, t, op, what);
  GTP_CHECK(t.shape() == like.shape(), op, ": ", what, " must be shaped like ", like_name, " ",
            like.ToString(), ", got ", t.ToString());
}

// Eight partial sums in a fixed order: vectorisable, and still deterministic.
float Dot(const float* __restrict__ a, const float* __restrict__ b, int64_t n) {
  float s[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + tail;
}

// out[n] += alpha·v[n].
void Axpy(float alpha, const float* __restrict__ v, float* __restrict__ out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += alpha * v[i];
}

// Row pointers of one (b, h) into the [B, T, H, ·] and [B, T, G, ·] tensors.
struct HeadView {
  const Dims& d;
  int64_t b, h, g;
  size_t Row(int64_t t) const { return static_cast<size_t>((b * d.T + t) * d.H + h); }
  size_t GroupRow(int64_t t) const { return static_cast<size_t>((b * d.T + t) * d.G + g); }
};

// Local inclusive cumulative sums cs[i] = Σ_{k ≤ i} dt[c0 + k]·A in double.
void CumulativeDecay(const HeadView& v, const float* dt, double A, int64_t c0, int64_t Lc,
                     double* cs) {
  double s = 0.0;
  for (int64_t i = 0; i < Lc; ++i) {
    s += static_cast<double>(dt[v.Row(c0 + i)]) * A;
    cs[i] = s;
  }
}

// S ← e_last·S + Σ_j l_j·dt_j·x_j ⊗ B_j over the chunk (steps 2–3).
void AdvanceState(const HeadView& v, const float* x, const float* dt, const float* Bm,
                  const double* cs, int64_t c0, int64_t Lc, float* S) {
  const int64_t P = v.d.P, N = v.d.N;
  const float e_last = static_cast<float>(std::exp(cs[Lc - 1]));
  for (int64_t k = 0; k < P * N; ++k) S[k] *= e_last;
  for (int64_t j = 0; j < Lc; ++j) {
    const float w = static_cast<float>(std::exp(cs[Lc - 1] - cs[j])) * dt[v.Row(c0 + j)];
    const float* xj = x + v.Row(c0 + j) * P;
    const float* bj = Bm + v.GroupRow(c0 + j) * N;
    for (int64_t p = 0; p < P; ++p) Axpy(w * xj[p], bj, S + p * N, N);
  }
}

void ForwardCpu(const Dims& d, const float* x, const float* dt, const float* A, const float* Bm,
                const float* Cm, const float* D, float* y, int64_t L) {
  const int64_t P = d.P, N = d.N, heads_per_group = d.H / d.G;
  L = std::min(L, std::max<int64_t>(d.T, 1));
  std::vector<float> S(P * N), W(L * L), acc(P);
  std::vector<double> cs(L);
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const HeadView v{d, b, h, h / heads_per_group};
      std::fill(S.begin(), S.end(), 0.0f);
      for (int64_t c0 = 0; c0 < d.T; c0 += L) {
        const int64_t Lc = std::min(L, d.T - c0);
        CumulativeDecay(v, dt, A[h], c0, Lc, cs.data());
        // 1. Diagonal block: W_ij = (C_i·B_j)·exp(cs_i − cs_j)·dt_j, j ≤ i.
        for (int64_t i = 0; i < Lc; ++i) {
          const float* ci = Cm + v.GroupRow(c0 + i) * N;
          for (int64_t j = 0; j <= i; ++j)
            W[i * L + j] = Dot(ci, Bm + v.GroupRow(c0 + j) * N, N) *
                           static_cast<float>(std::exp(cs[i] - cs[j])) * dt[v.Row(c0 + j)];
        }
        for (int64_t i = 0; i < Lc; ++i) {
          const float* xi = x + v.Row(c0 + i) * P;
          const float* ci = Cm + v.GroupRow(c0 + i) * N;
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t j = 0; j <= i; ++j) Axpy(W[i * L + j], x + v.Row(c0 + j) * P, acc.data(), P);
          // 4. State to output from the state entering the chunk.
          const float ei = static_cast<float>(std::exp(cs[i]));
          float* yi = y + v.Row(c0 + i) * P;
          for (int64_t p = 0; p < P; ++p)
            yi[p] = acc[p] + ei * Dot(S.data() + p * N, ci, N) + D[h] * xi[p];
        }
        // 2–3. Chunk state and the inter-chunk recurrence.
        AdvanceState(v, x, dt, Bm, cs.data(), c0, Lc, S.data());
      }
    }
  }
}

void BackwardCpu(const Dims& d, const float* dy, const float* x, const float* dt, const float* A,
                 const float* Bm, const float* Cm, const float* D, float* dx, float* ddt, float* dA,
                 float* dBm, float* dCm, float* dD, int64_t L) {
  const int64_t P = d.P, N = d.N, heads_per_group = d.H / d.G;
  L = std::min(L, std::max<int64_t>(d.T, 1));
  const int64_t num_chunks = (d.T + L - 1) / L;
  // Heads of a group add into the same rows of dBm and dCm.
  std::memset(dBm, 0, sizeof(float) * d.B * d.T * d.G * N);
  std::memset(dCm, 0, sizeof(float) * d.B * d.T * d.G * N);
  std::vector<float> S_in(std::max<int64_t>(num_chunks, 1) * P * N);  // entering each chunk
  std::vector<float> G(P * N), W(L * L), Q(L * L), GB(P), SC(P), tmp(N);
  std::vector<double> cs(L), dcs(L), ddt_direct(L), dA_acc(d.H, 0.0), dD_acc(d.H, 0.0);
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const HeadView v{d, b, h, h / heads_per_group};
      const double Ah = A[h];
      // Chunk-entry states, recomputed from the inputs.
      std::fill(S_in.begin(), S_in.begin() + P * N, 0.0f);
      for (int64_t c = 0; c + 1 < num_chunks; ++c) {
        const int64_t c0 = c * L;
        CumulativeDecay(v, dt, Ah, c0, L, cs.data());
        float* next = S_in.data() + (c + 1) * P * N;
        std::copy(S_in.data() + c * P * N, S_in.data() + (c + 1) * P * N, next);
        AdvanceState(v, x, dt, Bm, cs.data(), c0, L, next);
      }
      std::fill(G.begin(), G.end(), 0.0f);
      for (int64_t c = num_chunks - 1; c >= 0; --c) {
        const int64_t c0 = c * L, Lc = std::min(L, d.T - c0);
        const float* S = S_in.data() + c * P * N;
        CumulativeDecay(v, dt, Ah, c0, Lc, cs.data());
        std::fill(dcs.begin(), dcs.end(), 0.0);
        std::fill(ddt_direct.begin(), ddt_direct.end(), 0.0);
        // W_ij as the forward's; Q_ij = (dy_i·x_j)·seg_ij·dt_j. T_ij = W_ij·(dy_i·x_j)
        // moves cs_i up and cs_j down; T_ij / dt_j is dt_j's direct term.
        for (int64_t i = 0; i < Lc; ++i) {
          const float* ci = Cm + v.GroupRow(c0 + i) * N;
          const float* dyi = dy + v.Row(c0 + i) * P;
          double row = 0.0;
          for (int64_t j = 0; j <= i; ++j) {
            const float seg = static_cast<float>(std::exp(cs[i] - cs[j]));
            const float dtj = dt[v.Row(c0 + j)];
            const float cb = Dot(ci, Bm + v.GroupRow(c0 + j) * N, N);
            const float dyx = Dot(dyi, x + v.Row(c0 + j) * P, P);
            W[i * L + j] = cb * seg * dtj;
            Q[i * L + j] = dyx * seg * dtj;
            const double r = static_cast<double>(cb) * seg * dyx;
            ddt_direct[j] += r;
            row += r * dtj;
            dcs[j] -= r * dtj;
          }
          dcs[i] += row;
        }
        const float e_last = static_cast<float>(std::exp(cs[Lc - 1]));
        double last = 0.0;  // extra ∂L/∂cs_last
        for (int64_t j = 0; j < Lc; ++j) {
          const float* xj = x + v.Row(c0 + j) * P;
          const float* bj = Bm + v.GroupRow(c0 + j) * N;
          const float* dyj = dy + v.Row(c0 + j) * P;
          const float dtj = dt[v.Row(c0 + j)];
          const float lj = static_cast<float>(std::exp(cs[Lc - 1] - cs[j]));
          // dx_j = Σ_{i ≥ j} W_ij·dy_i + l_j·dt_j·G·B_j + D·dy_j.
          float* dxj = dx + v.Row(c0 + j) * P;
          for (int64_t p = 0; p < P; ++p) {
            GB[p] = Dot(G.data() + p * N, bj, N);
            dxj[p] = D[h] * dyj[p] + lj * dtj * GB[p];
          }
          for (int64_t i = j; i < Lc; ++i) Axpy(W[i * L + j], dy + v.Row(c0 + i) * P, dxj, P);
          // dB_j += Σ_{i ≥ j} Q_ij·C_i + l_j·dt_j·Gᵀ·x_j.
          float* dbj = dBm + v.GroupRow(c0 + j) * N;
          std::fill(tmp.begin(), tmp.end(), 0.0f);
          for (int64_t p = 0; p < P; ++p) Axpy(xj[p], G.data() + p * N, tmp.data(), N);
          Axpy(lj * dtj, tmp.data(), dbj, N);
          for (int64_t i = j; i < Lc; ++i) Axpy(Q[i * L + j], Cm + v.GroupRow(c0 + i) * N, dbj, N);
          // The state terms of dt_j and cs: x_j·(G·B_j).
          const double xgb = Dot(xj, GB.data(), P);
          ddt_direct[j] += lj * xgb;
          const double u = lj * dtj * xgb;
          last += u;
          dcs[j] -= u;
        }
        for (int64_t i = 0; i < Lc; ++i) {
          const float* ci = Cm + v.GroupRow(c0 + i) * N;
          const float* dyi = dy + v.Row(c0 + i) * P;
          const float ei = static_cast<float>(std::exp(cs[i]));
          // dC_i += Σ_{j ≤ i} Q_ij·B_j + e_i·Sᵀ·dy_i.
          float* dci = dCm + v.GroupRow(c0 + i) * N;
          for (int64_t j = 0; j <= i; ++j) Axpy(Q[i * L + j], Bm + v.GroupRow(c0 + j) * N, dci, N);
          std::fill(tmp.begin(), tmp.end(), 0.0f);
          for (int64_t p = 0; p < P; ++p) Axpy(dyi[p], S + p * N, tmp.data(), N);
          Axpy(ei, tmp.data(), dci, N);
          // cs_i through e_i: dy_i·(S·C_i) = C_i·(Sᵀ·dy_i).
          dcs[i] += static_cast<double>(ei) * Dot(ci, tmp.data(), N);
        }
        // cs_last through e_last·S_in in S_out.
        last += static_cast<double>(e_last) * Dot(G.data(), S, P * N);
        dcs[Lc - 1] += last;
        // a_k enters every cs_i with i ≥ k.
        double da = 0.0;
        for (int64_t k = Lc - 1; k >= 0; --k) {
          da += dcs[k];
          const size_t r = v.Row(c0 + k);
          ddt[r] = static_cast<float>(ddt_direct[k] + Ah * da);
          dA_acc[h] += static_cast<double>(dt[r]) * da;
        }
        // G ← ∂L/∂S_in = e_last·G + Σ_i e_i·dy_i ⊗ C_i.
        for (int64_t k = 0; k < P * N; ++k) G[k] *= e_last;
        for (int64_t i = 0; i < Lc; ++i) {
          const float* ci = Cm + v.GroupRow(c0 + i) * N;
          const float* dyi = dy + v.Row(c0 + i) * P;
          const float ei = static_cast<float>(std::exp(cs[i]));
          for (int64_t p = 0; p < P; ++p) Axpy(ei * dyi[p], ci, G.data() + p * N, N);
        }
      }
      for (int64_t t = 0; t < d.T; ++t) dD_acc[h] += Dot(dy + v.Row(t) * P, x + v.Row(t) * P, P);
    }
  }
  for (int64_t h = 0; h < d.H; ++h) {
    dA[h] += static_cast<float>(dA_acc[h]);
    dD[h] += static_cast<float>(dD_acc[h]);
  }
}

// The warp-level kernels (ssd_mma.cu), split-bf16 or bf16 products.
bool IsMma(SsdCudaKernel k) {
  return k == SsdCudaKernel::kChunkedMma || k == SsdCudaKernel::kChunkedMmaBf16;
}

// The kernels that run this call: kAuto resolved (SsdAutoKernel); a chunked
// kernel on a shape that does not fit aborts, naming P and N.
SsdCudaKernel Resolve(const char* op, const Dims& d, int64_t chunk, SsdCudaKernel kernel,
                      bool backward) {
  if (kernel == SsdCudaKernel::kAuto) kernel = SsdAutoKernel(backward, d.P, d.N, chunk);
  if (kernel == SsdCudaKernel::kRecurrence) return kernel;
  if (IsMma(kernel)) {
    GTP_CHECK(cuda::SsdMmaFits(d.P, d.N), op, ": kChunkedMma and kChunkedMmaBf16 take P and N ",
              "up to 64, got P = ", d.P, ", N = ", d.N,
              " (use SsdCudaKernel::kAuto or kRecurrence)");
    return kernel;
  }
  const bool heads = backward && kernel == SsdCudaKernel::kChunkedHeads;
  GTP_CHECK(cuda::SsdChunkedFits(d.P, d.N, chunk,
                                 heads ? cuda::ChunkedBlocks::kHeadGroups
                                       : cuda::ChunkedBlocks::kPerHead),
            op, ": the chunked CUDA kernels take P·N up to about 14k (less for kChunkedHeads' ",
            "backward), got P = ", d.P, ", N = ", d.N, " (use SsdCudaKernel::kAuto or kRecurrence)");
  return kernel;
}

}  // namespace

SsdCudaKernel SsdAutoKernel(bool backward, int64_t P, int64_t N, int64_t chunk) {
  if (cuda::SsdMmaFits(P, N)) return SsdCudaKernel::kChunkedMma;
  if (backward && P * N <= 256 && cuda::SsdChunkedFits(P, N, chunk)) {
    return SsdCudaKernel::kChunked;
  }
  return SsdCudaKernel::kRecurrence;
}

bool SsdCudaKernelFits(SsdCudaKernel kernel, bool backward, int64_t P, int64_t N, int64_t chunk) {
  if (P < 1 || P > 1024 || N < 0 || N > cuda::kSsdMaxN || chunk < 1) return false;
  if (kernel == SsdCudaKernel::kAuto) kernel = SsdAutoKernel(backward, P, N, chunk);
  if (kernel == SsdCudaKernel::kRecurrence) return true;
  if (IsMma(kernel)) return cuda::SsdMmaFits(P, N);
  return cuda::SsdChunkedFits(P, N, chunk,
                              backward && kernel == SsdCudaKernel::kChunkedHeads
                                  ? cuda::ChunkedBlocks::kHeadGroups
                                  : cuda::ChunkedBlocks::kPerHead);
}

int64_t SsdCudaChunkLength(SsdCudaKernel kernel, bool backward, int64_t P, int64_t N,
                           int64_t chunk) {
  GTP_CHECK(kernel == SsdCudaKernel::kChunked || kernel == SsdCudaKernel::kChunkedHeads ||
                IsMma(kernel),
            "SsdCudaChunkLength: kChunked, kChunkedHeads, kChunkedMma or kChunkedMmaBf16 only");
  if (!SsdCudaKernelFits(kernel, backward, P, N, chunk)) return 0;
  if (IsMma(kernel)) return cuda::SsdMmaChunkLength(P, N, chunk);
  return cuda::SsdChunkedLength(P, N, chunk,
                                backward && kernel == SsdCudaKernel::kChunkedHeads
                                    ? cuda::ChunkedBlocks::kHeadGroups
                                    : cuda::ChunkedBlocks::kPerHead);
}

void SsdScanForward(const Exec& e, const Tensor& x, const Tensor& dt, const Tensor& A,
                    const Tensor& Bm, const Tensor& Cm, const Tensor& D, const Tensor& y,
                    int64_t chunk, SsdCudaKernel kernel) {
  const char* op = "SsdScanForward";
  const Dims d = CheckInputs(op, e, x, dt, A, Bm, Cm, D, chunk);
  CheckLike(e, y, x, op, "y", "x");
  if (e.is_cuda()) {
    GTP_CHECK(d.N <= cuda::kSsdMaxN, op, ": CUDA takes N ≤ ", cuda::kSsdMaxN, ", got ", d.N);
    GTP_CHECK(d.P <= 1024, op, ": CUDA takes P ≤ 1024, got ", d.P);
    const SsdCudaKernel k = Resolve(op, d, chunk, kernel, /*backward=*/false);
    if (IsMma(k)) {
      Tensor scratch = e.Empty({std::max<int64_t>(
          cuda::SsdMmaScratchFloats(d.B, d.T, d.H, d.P, d.G, d.N, chunk, false), 1)});
      cuda::SsdMmaForward(x.data<float>(), dt.data<float>(), A.data<float>(), Bm.data<float>(),
                          Cm.data<float>(), D.data<float>(), y.data<float>(), scratch.data<float>(),
                          d.B, d.T, d.H, d.P, d.G, d.N, chunk, k == SsdCudaKernel::kChunkedMma,
                          e.stream);
      return;
    }
    if (k != SsdCudaKernel::kRecurrence) {
      // Freed on return without a sync: the caching allocator hands it out
      // again only to work ordered after ours on the same stream.
      Tensor scratch = e.Empty({std::max<int64_t>(
          cuda::SsdChunkedScratchFloats(d.B, d.T, d.H, d.P, d.G, d.N, chunk, false), 1)});
      cuda::SsdChunkedForward(x.data<float>(), dt.data<float>(), A.data<float>(), Bm.data<float>(),
                              Cm.data<float>(), D.data<float>(), y.data<float>(),
                              scratch.data<float>(), d.B, d.T, d.H, d.P, d.G, d.N, chunk, e.stream,
                              k == SsdCudaKernel::kChunkedHeads ? cuda::ChunkedBlocks::kHeadGroups
                                                                : cuda::ChunkedBlocks::kPerHead);
      return;
    }
    cuda::SsdScanForward(x.data<float>(), dt.data<float>(), A.data<float>(), Bm.data<float>(),
                         Cm.data<float>(), D.data<float>(), y.data<float>(), d.B, d.T, d.H, d.P,
                         d.G, d.N, e.stream);
    return;
  }
  ForwardCpu(d, x.data<float>(), dt.data<float>(), A.data<float>(), Bm.data<float>(),
             Cm.data<float>(), D.data<float>(), y.data<float>(), chunk);
}

void SsdScanBackward(const Exec& e, const Tensor& dy, const Tensor& x, const Tensor& dt,
                     const Tensor& A, const Tensor& Bm, const Tensor& Cm, const Tensor& D,
                     const Tensor& dx, const Tensor& ddt, const Tensor& dA, const Tensor& dBm,
                     const Tensor& dCm, const Tensor& dD, int64_t chunk, SsdCudaKernel kernel) {
  const char* op = "SsdScanBackward";
  const Dims d = CheckInputs(op, e, x, dt, A, Bm, Cm, D, chunk);
  CheckLike(e, dy, x, op, "dy", "x");
  CheckLike(e, dx, x, op, "dx", "x");
  CheckLike(e, ddt, dt, op, "ddt", "dt");
  CheckLike(e, dA, A, op, "dA", "A");
  CheckLike(e, dBm, Bm, op, "dBm", "Bm");
  CheckLike(e, dCm, Cm, op, "dCm", "Cm");
  CheckLike(e, dD, D, op, "dD", "D");
  if (e.is_cuda()) {
    GTP_CHECK(d.N <= cuda::kSsdMaxN, op, ": CUDA takes N ≤ ", cuda::kSsdMaxN, ", got ", d.N);
    GTP_CHECK(d.P <= 1024, op, ": CUDA takes P ≤ 1024, got ", d.P);
    const SsdCudaKernel k = Resolve(op, d, chunk, kernel, /*backward=*/true);
    if (IsMma(k)) {
      Tensor scratch = e.Empty({std::max<int64_t>(
          cuda::SsdMmaScratchFloats(d.B, d.T, d.H, d.P, d.G, d.N, chunk, true), 1)});
      cuda::SsdMmaBackward(dy.data<float>(), x.data<float>(), dt.data<float>(), A.data<float>(),
                           Bm.data<float>(), Cm.data<float>(), D.data<float>(), dx.data<float>(),
                           ddt.data<float>(), dA.data<float>(), dBm.data<float>(),
                           dCm.data<float>(), dD.data<float>(), scratch.data<float>(), d.B, d.T,
                           d.H, d.P, d.G, d.N, chunk, k == SsdCudaKernel::kChunkedMma, e.stream);
      return;
    }
    if (k != SsdCudaKernel::kRecurrence) {
      const cuda::ChunkedBlocks which = k == SsdCudaKernel::kChunkedHeads
                                              ? cuda::ChunkedBlocks::kHeadGroups
                                              : cuda::ChunkedBlocks::kPerHead;
      Tensor scratch = e.Empty({std::max<int64_t>(
          cuda::SsdChunkedScratchFloats(d.B, d.T, d.H, d.P, d.G, d.N, chunk, true, which), 1)});
      cuda::SsdChunkedBackward(
          dy.data<float>(), x.data<float>(), dt.data<float>(), A.data<float>(), Bm.data<float>(),
          Cm.data<float>(), D.data<float>(), dx.data<float>(), ddt.data<float>(), dA.data<float>(),
          dBm.data<float>(), dCm.data<float>(), dD.data<float>(), scratch.data<float>(), d.B, d.T,
          d.H, d.P, d.G, d.N, chunk, e.stream, which);
      return;
    }
    // Freed on return without a sync: the caching allocator hands it out
    // again only to work ordered after ours on the same stream (as core/kernels/ops/).
    const int64_t floats = cuda::SsdScanBackwardScratchFloats(d.B, d.T, d.H, d.P, d.G, d.N, chunk);
    Tensor scratch = e.Empty({std::max<int64_t>(floats, 1)});
    cuda::SsdScanBackward(dy.data<float>(), x.data<float>(), dt.data<float>(), A.data<float>(),
                          Bm.data<float>(), Cm.data<float>(), D.data<float>(), dx.data<float>(),
                          ddt.data<float>(), dA.data<float>(), dBm.data<float>(), dCm.data<float>(),
                          dD.data<float>(), scratch.data<float>(), d.B, d.T, d.H, d.P, d.G, d.N,
                          chunk, e.stream);
    return;
  }
  BackwardCpu(d, dy.data<float>(), x.data<float>(), dt.data<float>(), A.data<float>(),
              Bm.data<float>(), Cm.data<float>(), D.data<float>(), dx.data<float>(),
              ddt.data<float>(), dA.data<float>(), dBm.data<float>(), dCm.data<float>(),
              dD.data<float>(), chunk);
}

}  // namespace gtp::kernels::ssm
