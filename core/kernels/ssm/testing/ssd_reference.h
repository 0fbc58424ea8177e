// core/kernels/ssm/testing/ssd_reference.h — the SSD scan and its gradients
// by their definition, in double, for tests (the emulator's and the GPU's):
// the recurrence forward and its adjoint backward, one (b, h) at a time.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace gtp::kernels::ssm::reference {

struct SsdDims {
  int64_t B, T, H, P, G, N;
};

// The scan as its definition (ssd_scan.h), in double: S_t = exp(dt_t·A)·S_{t−1}
// + dt_t·x_t ⊗ B_t, y_t = S_t·C_t + D·x_t; the backward by the adjoint of that
// recurrence, from t = T − 1 down (dS carries ∂L/∂S_t).
struct SsdReference {
  std::vector<double> y, dx, ddt, dA, dB, dC, dD;
  std::vector<double> dA_terms;  // Σ |term| of each dA (its sum cancels: a scale for its error)
};
inline SsdReference RunSsdReference(const SsdDims& c, const std::vector<float>& x,
                                    const std::vector<float>& dt, const std::vector<float>& A,
                                    const std::vector<float>& Bm, const std::vector<float>& Cm,
                                    const std::vector<float>& D, const std::vector<float>& dy) {
  const int64_t B = c.B, T = c.T, H = c.H, P = c.P, G = c.G, N = c.N, hpg = H / G;
  SsdReference r;
  r.y.assign(B * T * H * P, 0.0);
  r.dx.assign(B * T * H * P, 0.0);
  r.ddt.assign(B * T * H, 0.0);
  r.dA.assign(H, 0.0);
  r.dA_terms.assign(H, 0.0);
  r.dD.assign(H, 0.0);
  r.dB.assign(B * T * G * N, 0.0);
  r.dC.assign(B * T * G * N, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / hpg;
      auto xi = [&](int64_t t, int64_t p) { return double{x[((b * T + t) * H + h) * P + p]}; };
      auto dyi = [&](int64_t t, int64_t p) { return double{dy[((b * T + t) * H + h) * P + p]}; };
      auto Bi = [&](int64_t t, int64_t n) { return double{Bm[((b * T + t) * G + g) * N + n]}; };
      auto Ci = [&](int64_t t, int64_t n) { return double{Cm[((b * T + t) * G + g) * N + n]}; };
      auto dti = [&](int64_t t) { return double{dt[(b * T + t) * H + h]}; };
      std::vector<std::vector<double>> S(T + 1, std::vector<double>(P * N, 0.0));  // S[t + 1] = S_t
      for (int64_t t = 0; t < T; ++t) {
        const double a = std::exp(dti(t) * A[h]);
        for (int64_t p = 0; p < P; ++p) {
          double yp = double{D[h]} * xi(t, p);
          for (int64_t n = 0; n < N; ++n) {
            S[t + 1][p * N + n] = a * S[t][p * N + n] + dti(t) * xi(t, p) * Bi(t, n);
            yp += S[t + 1][p * N + n] * Ci(t, n);
          }
          r.y[((b * T + t) * H + h) * P + p] = yp;
        }
      }
      std::vector<double> dS(P * N, 0.0);
      for (int64_t t = T - 1; t >= 0; --t) {
        const double a = std::exp(dti(t) * A[h]);
        for (int64_t p = 0; p < P; ++p) {
          for (int64_t n = 0; n < N; ++n) dS[p * N + n] += dyi(t, p) * Ci(t, n);
        }
        double dS_Sprev = 0.0, x_dS_B = 0.0;
        for (int64_t p = 0; p < P; ++p) {
          double dxp = double{D[h]} * dyi(t, p);
          for (int64_t n = 0; n < N; ++n) {
            const double s = S[t + 1][p * N + n], d = dS[p * N + n];
            r.dC[((b * T + t) * G + g) * N + n] += s * dyi(t, p);
            dxp += dti(t) * d * Bi(t, n);
            r.dB[((b * T + t) * G + g) * N + n] += dti(t) * d * xi(t, p);
            x_dS_B += xi(t, p) * d * Bi(t, n);
            dS_Sprev += d * S[t][p * N + n];
          }
          r.dx[((b * T + t) * H + h) * P + p] = dxp;
          r.dD[h] += dyi(t, p) * xi(t, p);
        }
        r.ddt[(b * T + t) * H + h] = x_dS_B + double{A[h]} * a * dS_Sprev;
        r.dA[h] += dti(t) * a * dS_Sprev;
        r.dA_terms[h] += std::fabs(dti(t) * a * dS_Sprev);
        for (double& d : dS) d *= a;
      }
    }
  }
  return r;
}

}  // namespace gtp::kernels::ssm::reference
