#include "layers/cp/ring_attention.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::layers::cp {

int64_t GlobalPosition(int64_t T, int cp, int rank, int64_t t) {
  const int64_t c = T / (2 * cp);
  return t < c ? rank * c + t : (2 * cp - 1 - rank) * c + (t - c);
}

std::vector<int32_t> GlobalPositions(int64_t T, int cp, int rank) {
  std::vector<int32_t> p(T / cp);
  for (int64_t t = 0; t < T / cp; ++t) p[t] = static_cast<int32_t>(GlobalPosition(T, cp, rank, t));
  return p;
}

void BlockForward(const float* q, const float* k, const float* v, const int32_t* qpos,
                  const int32_t* kpos, int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int64_t NKV,
                  int64_t HS, float* m, float* l, float* acc) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t group = NH / NKV;
  std::vector<float> s(Tk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t h = 0; h < NH; ++h) {
        const float* qi = q + ((b * Tq + i) * NH + h) * HS;
        const int64_t kh = h / group;
        float bm = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < Tk; ++j) {
          if (kpos[j] > qpos[i]) continue;
          const float* kj = k + ((b * Tk + j) * NKV + kh) * HS;
          float d = 0;
          for (int64_t x = 0; x < HS; ++x) d += qi[x] * kj[x];
          s[j] = d * scale;
          bm = std::max(bm, s[j]);
        }
        if (bm == -std::numeric_limits<float>::infinity()) continue;  // nothing visible
        const int64_t r = (b * Tq + i) * NH + h;
        float* a = acc + r * HS;
        const float m_new = std::max(m[r], bm);
        const float rescale = std::exp(m[r] - m_new);  // 0 when m was −inf
        l[r] *= rescale;
        for (int64_t x = 0; x < HS; ++x) a[x] *= rescale;
        for (int64_t j = 0; j < Tk; ++j) {
          if (kpos[j] > qpos[i]) continue;
          const float p = std::exp(s[j] - m_new);
          l[r] += p;
          const float* vj = v + ((b * Tk + j) * NKV + kh) * HS;
          for (int64_t x = 0; x < HS; ++x) a[x] += p * vj[x];
        }
        m[r] = m_new;
      }
}

void BlockBackward(const float* q, const float* k, const float* v, const int32_t* qpos,
                   const int32_t* kpos, const float* dy, const float* lse, const float* D,
                   int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int64_t NKV, int64_t HS,
                   float* dq, float* dk, float* dv) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t group = NH / NKV;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t h = 0; h < NH; ++h) {
        const int64_t r = (b * Tq + i) * NH + h, kh = h / group;
        const float* qi = q + r * HS;
        const float* dyi = dy + r * HS;
        float* dqi = dq + r * HS;
        for (int64_t j = 0; j < Tk; ++j) {
          if (kpos[j] > qpos[i]) continue;
          const int64_t c = (b * Tk + j) * NKV + kh;
          const float* kj = k + c * HS;
          const float* vj = v + c * HS;
          float d = 0, dp = 0;
          for (int64_t x = 0; x < HS; ++x) {
            d += qi[x] * kj[x];
            dp += dyi[x] * vj[x];
          }
          const float p = std::exp(d * scale - lse[r]);
          const float ds = p * (dp - D[r]) * scale;
          float* dkj = dk + c * HS;
          float* dvj = dv + c * HS;
          for (int64_t x = 0; x < HS; ++x) {
            dvj[x] += p * dyi[x];
            dqi[x] += ds * kj[x];
            dkj[x] += ds * qi[x];
          }
        }
      }
}

RingAttention::RingAttention(comm::Communicator* cp, int64_t B, int64_t T, int64_t NH,
                             int64_t NKV, int64_t HS, const kernels::Exec& e)
    : cp_(cp), B_(B), T_(T), NH_(NH), NKV_(NKV), HS_(HS), exec_(e) {
  size_ = cp ? cp->size() : 1;
  rank_ = cp ? cp->rank() : 0;
  Tl_ = T / size_;
  for (int r = 0; r < size_; ++r) pos_.push_back(GlobalPositions(T, size_, r));
}

absl::Status RingAttention::Rotate(const std::vector<const float*>& out,
                                   const std::vector<float*>& in, int64_t n_each, int tag) {
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  std::vector<comm::WorkPtr> sends;
  for (size_t i = 0; i < out.size(); ++i) {
    GTP_ASSIGN_OR_RETURN(comm::WorkPtr w, cp_->Send(out[i], n_each, DType::kF32, next,
                                                    tag + static_cast<int>(i)));
    sends.push_back(std::move(w));
  }
  for (size_t i = 0; i < in.size(); ++i) {
    GTP_RETURN_IF_ERROR(comm::Run(cp_->Recv(in[i], n_each, DType::kF32, prev, tag + static_cast<int>(i))));
  }
  for (auto& w : sends) GTP_RETURN_IF_ERROR(w->Wait());
  return absl::OkStatus();
}

absl::Status RingAttention::Forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& y) {
  if (exec_.is_cuda() || q.dtype() != DType::kF32) {
    return absl::UnimplementedError(
        "context-parallel attention runs on the CPU in f32 only so far (train.device=cpu, "
        "train.precision=f32)");
  }
  const int64_t nq = B_ * Tl_ * NH_, nkv = B_ * Tl_ * NKV_ * HS_;
  std::vector<float> m(nq, -std::numeric_limits<float>::infinity()), l(nq, 0.0f),
      acc(nq * HS_, 0.0f);
  std::vector<float> kb(k.data<float>(), k.data<float>() + nkv), vb(v.data<float>(), v.data<float>() + nkv);
  std::vector<float> kn(nkv), vn(nkv);
  const int tag = (calls_++ % 1024) * 16;
  int owner = rank_;
  for (int step = 0; step < size_; ++step) {
    BlockForward(q.data<float>(), kb.data(), vb.data(), pos_[rank_].data(), pos_[owner].data(), B_,
                 Tl_, Tl_, NH_, NKV_, HS_, m.data(), l.data(), acc.data());
    if (step + 1 < size_) {
      GTP_RETURN_IF_ERROR(Rotate({kb.data(), vb.data()}, {kn.data(), vn.data()}, nkv, tag));
      kb.swap(kn);
      vb.swap(vn);
      owner = (owner + size_ - 1) % size_;
    }
  }
  lse_.resize(nq);
  float* out = y.data<float>();
  for (int64_t r = 0; r < nq; ++r) {
    lse_[r] = m[r] + std::log(l[r]);
    for (int64_t x = 0; x < HS_; ++x) out[r * HS_ + x] = acc[r * HS_ + x] / l[r];
  }
  q_ = q;
  k_ = k;
  v_ = v;
  y_ = y;
  return absl::OkStatus();
}

absl::Status RingAttention::Backward(const Tensor& dy, const Tensor& dq, const Tensor& dk,
                                     const Tensor& dv) {
  if (!q_.defined()) return absl::FailedPreconditionError("RingAttention::Backward without Forward");
  const int64_t nq = B_ * Tl_ * NH_, nkv = B_ * Tl_ * NKV_ * HS_;
  std::vector<float> D(nq);
  const float* g = dy.data<float>();
  const float* yy = y_.data<float>();
  for (int64_t r = 0; r < nq; ++r) {
    float s = 0;
    for (int64_t x = 0; x < HS_; ++x) s += g[r * HS_ + x] * yy[r * HS_ + x];
    D[r] = s;
  }
  std::fill(dq.data<float>(), dq.data<float>() + dq.numel(), 0.0f);
  std::vector<float> kb(k_.data<float>(), k_.data<float>() + nkv), vb(v_.data<float>(), v_.data<float>() + nkv);
  std::vector<float> dkb(nkv, 0.0f), dvb(nkv, 0.0f), kn(nkv), vn(nkv), dkn(nkv), dvn(nkv);
  const int tag = (calls_++ % 1024) * 16;
  int owner = rank_;
  for (int step = 0; step < size_; ++step) {
    BlockBackward(q_.data<float>(), kb.data(), vb.data(), pos_[rank_].data(), pos_[owner].data(), g,
                  lse_.data(), D.data(), B_, Tl_, Tl_, NH_, NKV_, HS_, dq.data<float>(), dkb.data(),
                  dvb.data());
    if (size_ == 1) break;
    if (step + 1 < size_) {
      GTP_RETURN_IF_ERROR(Rotate({kb.data(), vb.data(), dkb.data(), dvb.data()},
                                 {kn.data(), vn.data(), dkn.data(), dvn.data()}, nkv, tag));
      kb.swap(kn);
      vb.swap(vn);
    } else {  // the last hop: only the gradients, home to their owner
      GTP_RETURN_IF_ERROR(Rotate({dkb.data(), dvb.data()}, {dkn.data(), dvn.data()}, nkv, tag + 8));
    }
    dkb.swap(dkn);
    dvb.swap(dvn);
    owner = (owner + size_ - 1) % size_;
  }
  std::copy(dkb.begin(), dkb.end(), dk.data<float>());
  std::copy(dvb.begin(), dvb.end(), dv.data<float>());
  DropActivations();
  return absl::OkStatus();
}

}  // namespace gtp::layers::cp
