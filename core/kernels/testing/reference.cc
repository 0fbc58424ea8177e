#include "core/kernels/testing/reference.h"

#include <algorithm>
#include <cmath>

namespace gtp::kernels::testing {

void RefGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
             const std::vector<double>& A, int64_t lda, const std::vector<double>& B, int64_t ldb,
             double beta, std::vector<double>* C, int64_t ldc) {
  if (lda == 0) lda = trans_a ? m : k;
  if (ldb == 0) ldb = trans_b ? k : n;
  if (ldc == 0) ldc = n;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        double a = trans_a ? A[p * lda + i] : A[i * lda + p];
        double b = trans_b ? B[j * ldb + p] : B[p * ldb + j];
        acc += a * b;
      }
      double& c = (*C)[i * ldc + j];
      c = alpha * acc + (beta != 0 ? beta * c : 0.0);
    }
  }
}

std::vector<double> RefEmbedding(const std::vector<int32_t>& idx, const std::vector<double>& table,
                                 int64_t V, int64_t C, int64_t vocab_start) {
  std::vector<double> out(idx.size() * C, 0.0);
  for (size_t n = 0; n < idx.size(); ++n) {
    int64_t row = static_cast<int64_t>(idx[n]) - vocab_start;
    if (row < 0 || row >= V) continue;
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = table[row * C + c];
  }
  return out;
}

std::vector<double> RefLayerNorm(const std::vector<double>& x, const std::vector<double>& w,
                                 const std::vector<double>& b, int64_t N, int64_t C, double eps,
                                 std::vector<double>* mean, std::vector<double>* rstd) {
  std::vector<double> y(N * C);
  if (mean) mean->assign(N, 0.0);
  if (rstd) rstd->assign(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const double* row = &x[n * C];
    double mu = 0;
    for (int64_t c = 0; c < C; ++c) mu += row[c];
    mu /= C;
    double var = 0;
    for (int64_t c = 0; c < C; ++c) var += (row[c] - mu) * (row[c] - mu);
    var /= C;
    double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c) {
      y[n * C + c] = (row[c] - mu) * rs * w[c] + (b.empty() ? 0.0 : b[c]);
    }
    if (mean) (*mean)[n] = mu;
    if (rstd) (*rstd)[n] = rs;
  }
  return y;
}

std::vector<double> RefRMSNorm(const std::vector<double>& x, const std::vector<double>& w,
                               int64_t N, int64_t C, double eps, std::vector<double>* rstd) {
  std::vector<double> y(N * C);
  if (rstd) rstd->assign(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += x[n * C + c] * x[n * C + c];
    double rs = 1.0 / std::sqrt(ms / C + eps);
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = x[n * C + c] * rs * w[c];
    if (rstd) (*rstd)[n] = rs;
  }
  return y;
}

std::vector<double> RefGelu(const std::vector<double>& x) {
  const double s = std::sqrt(2.0 / M_PI);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = 0.5 * x[i] * (1.0 + std::tanh(s * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  }
  return y;
}

std::vector<double> RefSwiGlu(const std::vector<double>& x, int64_t N, int64_t H) {
  std::vector<double> y(N * H);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      double g = x[n * 2 * H + h], u = x[n * 2 * H + H + h];
      y[n * H + h] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  return y;
}

std::vector<double> RefSoftmax(const std::vector<double>& x, int64_t N, int64_t C) {
  std::vector<double> y(N * C);
  for (int64_t n = 0; n < N; ++n) {
    double mx = -INFINITY;
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, x[n * C + c]);
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(x[n * C + c] - mx);
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = std::exp(x[n * C + c] - mx) / sum;
  }
  return y;
}

std::vector<double> RefAttention(const std::vector<double>& q, const std::vector<double>& k,
                                 const std::vector<double>& v, int64_t B, int64_t T, int64_t NH,
                                 int64_t NKV, int64_t HS, std::vector<double>* att, bool causal) {
  std::vector<double> out(B * T * NH * HS, 0.0);
  if (att) att->assign(B * NH * T * T, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> p(T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t kvh = h / (NH / NKV);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t end = causal ? t + 1 : T;
        const double* qt = &q[((b * T + t) * NH + h) * HS];
        double mx = -INFINITY;
        for (int64_t s = 0; s < end; ++s) {
          const double* ks = &k[((b * T + s) * NKV + kvh) * HS];
          double dot = 0;
          for (int64_t d = 0; d < HS; ++d) dot += qt[d] * ks[d];
          p[s] = dot * scale;
          mx = std::max(mx, p[s]);
        }
        double sum = 0;
        for (int64_t s = 0; s < end; ++s) sum += (p[s] = std::exp(p[s] - mx));
        double* ot = &out[((b * T + t) * NH + h) * HS];
        for (int64_t s = 0; s < end; ++s) {
          p[s] /= sum;
          if (att) (*att)[((b * NH + h) * T + t) * T + s] = p[s];
          const double* vs = &v[((b * T + s) * NKV + kvh) * HS];
          for (int64_t d = 0; d < HS; ++d) ot[d] += p[s] * vs[d];
        }
      }
    }
  }
  return out;
}

std::vector<double> RefAttentionLse(const std::vector<double>& q, const std::vector<double>& k,
                                    int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                    bool causal) {
  std::vector<double> lse(B * NH * T);
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> sc(T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t kvh = h / (NH / NKV);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t end = causal ? t + 1 : T;
        double mx = -INFINITY;
        for (int64_t s = 0; s < end; ++s) {
          double dot = 0;
          for (int64_t d = 0; d < HS; ++d) {
            dot += q[((b * T + t) * NH + h) * HS + d] * k[((b * T + s) * NKV + kvh) * HS + d];
          }
          sc[s] = dot * scale;
          mx = std::max(mx, sc[s]);
        }
        double sum = 0;
        for (int64_t s = 0; s < end; ++s) sum += std::exp(sc[s] - mx);
        lse[(b * NH + h) * T + t] = mx + std::log(sum);
      }
    }
  }
  return lse;
}

void RefAttentionBackward(const std::vector<double>& q, const std::vector<double>& k,
                          const std::vector<double>& v, const std::vector<double>& dout, int64_t B,
                          int64_t T, int64_t NH, int64_t NKV, int64_t HS, std::vector<double>* dq,
                          std::vector<double>* dk, std::vector<double>* dv, bool causal) {
  dq->assign(q.size(), 0.0);
  dk->assign(k.size(), 0.0);
  dv->assign(v.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> p(T), dp(T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t kvh = h / (NH / NKV);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t end = causal ? t + 1 : T;
        const double* qt = &q[((b * T + t) * NH + h) * HS];
        const double* gt = &dout[((b * T + t) * NH + h) * HS];
        double mx = -INFINITY;
        for (int64_t s = 0; s < end; ++s) {
          const double* ks = &k[((b * T + s) * NKV + kvh) * HS];
          const double* vs = &v[((b * T + s) * NKV + kvh) * HS];
          double dot = 0, dpv = 0;
          for (int64_t d = 0; d < HS; ++d) {
            dot += qt[d] * ks[d];
            dpv += gt[d] * vs[d];
          }
          p[s] = dot * scale;
          dp[s] = dpv;
          mx = std::max(mx, p[s]);
        }
        double sum = 0;
        for (int64_t s = 0; s < end; ++s) sum += (p[s] = std::exp(p[s] - mx));
        double pdp = 0;
        for (int64_t s = 0; s < end; ++s) {
          p[s] /= sum;
          pdp += p[s] * dp[s];
        }
        double* dqt = &(*dq)[((b * T + t) * NH + h) * HS];
        for (int64_t s = 0; s < end; ++s) {
          const double ds = p[s] * (dp[s] - pdp) * scale;
          const int64_t o = ((b * T + s) * NKV + kvh) * HS;
          for (int64_t d = 0; d < HS; ++d) {
            dqt[d] += ds * k[o + d];
            (*dk)[o + d] += ds * qt[d];
            (*dv)[o + d] += p[s] * gt[d];
          }
        }
      }
    }
  }
}

std::vector<double> RefCrossEntropy(const std::vector<double>& logits,
                                    const std::vector<int32_t>& targets, int64_t N, int64_t V) {
  std::vector<double> loss(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    const double* row = &logits[n * V];
    double mx = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    loss[n] = std::log(sum) + mx - row[targets[n]];
  }
  return loss;
}

void RefLayerNormBackward(const std::vector<double>& dy, const std::vector<double>& x,
                          const std::vector<double>& w, int64_t N, int64_t C, double eps,
                          std::vector<double>* dx, std::vector<double>* dw,
                          std::vector<double>* db) {
  std::vector<double> mean, rstd;
  RefLayerNorm(x, w, {}, N, C, eps, &mean, &rstd);
  dx->assign(N * C, 0.0);
  dw->assign(C, 0.0);
  db->assign(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double g_mean = 0, gx_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double g = dy[n * C + c] * w[c], xhat = (x[n * C + c] - mean[n]) * rstd[n];
      g_mean += g;
      gx_mean += g * xhat;
    }
    g_mean /= C;
    gx_mean /= C;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (x[n * C + c] - mean[n]) * rstd[n];
      (*dx)[n * C + c] = rstd[n] * (dy[n * C + c] * w[c] - g_mean - xhat * gx_mean);
      (*dw)[c] += dy[n * C + c] * xhat;
      (*db)[c] += dy[n * C + c];
    }
  }
}

void RefRMSNormBackward(const std::vector<double>& dy, const std::vector<double>& x,
                        const std::vector<double>& w, int64_t N, int64_t C, double eps,
                        std::vector<double>* dx, std::vector<double>* dw) {
  std::vector<double> rstd;
  RefRMSNorm(x, w, N, C, eps, &rstd);
  dx->assign(N * C, 0.0);
  dw->assign(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double gx_mean = 0;
    for (int64_t c = 0; c < C; ++c) gx_mean += dy[n * C + c] * w[c] * x[n * C + c] * rstd[n];
    gx_mean /= C;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = x[n * C + c] * rstd[n];
      (*dx)[n * C + c] = rstd[n] * (dy[n * C + c] * w[c] - xhat * gx_mean);
      (*dw)[c] += dy[n * C + c] * xhat;
    }
  }
}

std::vector<double> RefGeluBackward(const std::vector<double>& dy, const std::vector<double>& x) {
  const double s = std::sqrt(2.0 / M_PI), k = 0.044715;
  std::vector<double> dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double t = std::tanh(s * (x[i] + k * x[i] * x[i] * x[i]));
    dx[i] =
        dy[i] * (0.5 * (1.0 + t) + 0.5 * x[i] * (1.0 - t * t) * s * (1.0 + 3.0 * k * x[i] * x[i]));
  }
  return dx;
}

std::vector<double> RefSwiGluBackward(const std::vector<double>& dy, const std::vector<double>& x,
                                      int64_t N, int64_t H) {
  std::vector<double> dx(N * 2 * H);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      const double g = x[n * 2 * H + h], u = x[n * 2 * H + H + h], d = dy[n * H + h];
      const double sg = 1.0 / (1.0 + std::exp(-g));
      dx[n * 2 * H + h] = d * u * sg * (1.0 + g * (1.0 - sg));
      dx[n * 2 * H + H + h] = d * g * sg;
    }
  }
  return dx;
}

std::vector<double> RefCrossEntropyBackward(const std::vector<double>& logits,
                                            const std::vector<int32_t>& targets,
                                            const std::vector<double>& dloss, int64_t N,
                                            int64_t V) {
  std::vector<double> dl(N * V, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    const double* row = &logits[n * V];
    const double mx = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    for (int64_t v = 0; v < V; ++v) {
      dl[n * V + v] = dloss[n] * (std::exp(row[v] - mx) / sum - (v == targets[n] ? 1.0 : 0.0));
    }
  }
  return dl;
}

std::vector<double> RefRope(const std::vector<double>& x, int64_t B, int64_t T, int64_t NH,
                            int64_t HS, double theta, double sign) {
  std::vector<double> y(x.size());
  const int64_t h = HS / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < NH; ++n)
        for (int64_t d = 0; d < h; ++d) {
          const int64_t i = ((b * T + t) * NH + n) * HS + d;
          const double a = t / std::pow(theta, 2.0 * d / HS);
          const double c = std::cos(a), s = sign * std::sin(a);
          y[i] = x[i] * c - x[i + h] * s;
          y[i + h] = x[i + h] * c + x[i] * s;
        }
  return y;
}

void RefAdamW(std::vector<double>* p, const std::vector<double>& g, std::vector<double>* m,
              std::vector<double>* v, double lr, double b1, double b2, double eps,
              double weight_decay, int64_t step) {
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
  for (size_t i = 0; i < p->size(); ++i) {
    double& mi = (*m)[i];
    double& vi = (*v)[i];
    double& pi = (*p)[i];
    mi = b1 * mi + (1 - b1) * g[i];
    vi = b2 * vi + (1 - b2) * g[i] * g[i];
    pi -= lr * ((mi / bc1) / (std::sqrt(vi / bc2) + eps) + weight_decay * pi);
  }
}

namespace {

// C[r, c] = A[r, k]·B[k, c], packed.
std::vector<double> MatMul(const std::vector<double>& A, const std::vector<double>& B, int64_t r,
                           int64_t k, int64_t c) {
  std::vector<double> C(r * c, 0.0);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < c; ++j) C[i * c + j] += A[i * k + p] * B[p * c + j];
  return C;
}

std::vector<double> Transpose(const std::vector<double>& A, int64_t r, int64_t c) {
  std::vector<double> T(r * c);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) T[j * r + i] = A[i * c + j];
  return T;
}

}  // namespace

std::vector<double> RefNewtonSchulz(const std::vector<double>& G, int64_t M, int64_t N,
                                    const std::vector<std::array<double, 3>>& abc) {
  double norm = 0;
  for (double g : G) norm += g * g;
  norm = std::sqrt(norm) + 1e-7;
  std::vector<double> X(G.size());
  for (size_t i = 0; i < G.size(); ++i) X[i] = G[i] / norm;
  // Written without the explicit transposes: for M > N, A = XᵀX [N, N] and
  // the polynomial multiplies from the right.
  const bool wide = M <= N;
  const int64_t R = wide ? M : N;
  for (const auto& [a, b, c] : abc) {
    std::vector<double> Xt = Transpose(X, M, N);
    std::vector<double> A = wide ? MatMul(X, Xt, M, N, M) : MatMul(Xt, X, N, M, N);
    std::vector<double> P = MatMul(A, A, R, R, R);
    for (size_t i = 0; i < P.size(); ++i) P[i] = b * A[i] + c * P[i];
    std::vector<double> PX = wide ? MatMul(P, X, M, M, N) : MatMul(X, P, M, N, N);
    for (size_t i = 0; i < X.size(); ++i) X[i] = a * X[i] + PX[i];
  }
  return X;
}

std::vector<double> SymmetricEigenvalues(std::vector<double> A, int64_t n) {
  // Cyclic Jacobi: rotate away each off-diagonal element until they vanish.
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, total = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        total += A[i * n + j] * A[i * n + j];
        if (i != j) off += A[i * n + j] * A[i * n + j];
      }
    }
    if (off <= 1e-30 * total) break;
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t q = p + 1; q < n; ++q) {
        double apq = A[p * n + q];
        if (apq == 0) continue;
        double theta = (A[q * n + q] - A[p * n + p]) / (2 * apq);
        double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int64_t k = 0; k < n; ++k) {  // A ← A·J
          double akp = A[k * n + p], akq = A[k * n + q];
          A[k * n + p] = c * akp - s * akq;
          A[k * n + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {  // A ← Jᵀ·A
          double apk = A[p * n + k], aqk = A[q * n + k];
          A[p * n + k] = c * apk - s * aqk;
          A[q * n + k] = s * apk + c * aqk;
        }
      }
    }
  }
  std::vector<double> eig(n);
  for (int64_t i = 0; i < n; ++i) eig[i] = A[i * n + i];
  std::sort(eig.begin(), eig.end());
  return eig;
}

}  // namespace gtp::kernels::testing
