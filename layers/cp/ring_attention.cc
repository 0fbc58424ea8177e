#include "layers/cp/ring_attention.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/status.h"
#include "layers/cp/cuda/ring_attention_cuda.h"

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
  for (int r = 0; r < size_; ++r) {
    std::vector<int32_t> p = GlobalPositions(T, size_, r);
    Tensor t = e.Empty({Tl_}, DType::kI32);
    GTP_CHECK_OK(Copy(Tensor::Wrap(p.data(), {Tl_}, DType::kI32, Device::Cpu()), t, e.stream, true));
    pos_.push_back(t);
  }
}

absl::Status RingAttention::Rotate(const std::vector<Tensor>& out, const std::vector<Tensor>& in,
                                   int tag) {
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  std::vector<comm::WorkPtr> sends;
  for (size_t i = 0; i < out.size(); ++i) {
    GTP_ASSIGN_OR_RETURN(comm::WorkPtr w, cp_->Send(out[i].raw_data(), out[i].numel(), DType::kF32,
                                                    next, tag + static_cast<int>(i)));
    sends.push_back(std::move(w));
  }
  for (size_t i = 0; i < in.size(); ++i) {
    GTP_RETURN_IF_ERROR(comm::Run(
        cp_->Recv(in[i].raw_data(), in[i].numel(), DType::kF32, prev, tag + static_cast<int>(i))));
  }
  for (auto& w : sends) GTP_RETURN_IF_ERROR(w->Wait());
  return absl::OkStatus();
}

absl::Status RingAttention::Forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& y) {
  if (q.dtype() != DType::kF32) {
    return absl::InvalidArgumentError("RingAttention takes f32 q/k/v (cast bf16 first)");
  }
  const kernels::Exec& e = exec_;
  const bool gpu = e.is_cuda();
  const int64_t nq = B_ * Tl_ * NH_;
  Tensor m = e.Empty({nq}, DType::kF32), l = e.Zeros({nq}, DType::kF32),
         acc = e.Zeros({nq * HS_}, DType::kF32);
  kernels::ops::Fill(e, m, -std::numeric_limits<float>::infinity());
  Tensor kb = e.Empty(k.shape(), DType::kF32), vb = e.Empty(v.shape(), DType::kF32);
  kernels::ops::CopyInto(e, k, kb);
  kernels::ops::CopyInto(e, v, vb);
  Tensor kn = e.Empty(k.shape(), DType::kF32), vn = e.Empty(v.shape(), DType::kF32);
  const int tag = (calls_++ % 1024) * 16;
  int owner = rank_;
  for (int step = 0; step < size_; ++step) {
    const int32_t* qp = pos_[rank_].data<int32_t>();
    const int32_t* kp = pos_[owner].data<int32_t>();
    if (gpu) {
      cuda::BlockForward(q.data<float>(), kb.data<float>(), vb.data<float>(), qp, kp, B_, Tl_, Tl_,
                         NH_, NKV_, HS_, m.data<float>(), l.data<float>(), acc.data<float>(), e.stream);
    } else {
      BlockForward(q.data<float>(), kb.data<float>(), vb.data<float>(), qp, kp, B_, Tl_, Tl_, NH_,
                   NKV_, HS_, m.data<float>(), l.data<float>(), acc.data<float>());
    }
    if (step + 1 < size_) {
      // NCCL orders its sends after the compute stream and the compute
      // stream after its receives (no host wait); a host backend reads the
      // blocks from the host, so the kernels must have finished.
      if (HostWaits()) GTP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(e.stream));
      GTP_RETURN_IF_ERROR(Rotate({kb, vb}, {kn, vn}, tag));
      std::swap(kb, kn);
      std::swap(vb, vn);
      owner = (owner + size_ - 1) % size_;
    }
  }
  lse_ = e.Empty({nq}, DType::kF32);
  if (gpu) {
    cuda::Finalize(m.data<float>(), l.data<float>(), acc.data<float>(), y.data<float>(),
                   lse_.data<float>(), nq, HS_, e.stream);
  } else {
    float* out = y.data<float>();
    for (int64_t r = 0; r < nq; ++r) {
      lse_.data<float>()[r] = m.data<float>()[r] + std::log(l.data<float>()[r]);
      for (int64_t x = 0; x < HS_; ++x) out[r * HS_ + x] = acc.data<float>()[r * HS_ + x] / l.data<float>()[r];
    }
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
  const kernels::Exec& e = exec_;
  const bool gpu = e.is_cuda();
  const int64_t nq = B_ * Tl_ * NH_;
  Tensor D = e.Empty({nq}, DType::kF32);
  if (gpu) {
    cuda::RowDot(dy.data<float>(), y_.data<float>(), D.data<float>(), nq, HS_, e.stream);
  } else {
    for (int64_t r = 0; r < nq; ++r) {
      float s = 0;
      for (int64_t x = 0; x < HS_; ++x) s += dy.data<float>()[r * HS_ + x] * y_.data<float>()[r * HS_ + x];
      D.data<float>()[r] = s;
    }
  }
  kernels::ops::Fill(e, dq, 0.0f);
  Tensor kb = e.Empty(k_.shape(), DType::kF32), vb = e.Empty(v_.shape(), DType::kF32);
  kernels::ops::CopyInto(e, k_, kb);
  kernels::ops::CopyInto(e, v_, vb);
  Tensor dkb = e.Zeros(k_.shape(), DType::kF32), dvb = e.Zeros(v_.shape(), DType::kF32);
  Tensor kn = e.Empty(k_.shape(), DType::kF32), vn = e.Empty(v_.shape(), DType::kF32),
         dkn = e.Empty(k_.shape(), DType::kF32), dvn = e.Empty(v_.shape(), DType::kF32);
  const int tag = (calls_++ % 1024) * 16;
  int owner = rank_;
  for (int step = 0; step < size_; ++step) {
    const int32_t* qp = pos_[rank_].data<int32_t>();
    const int32_t* kp = pos_[owner].data<int32_t>();
    if (gpu) {
      cuda::BlockBackward(q_.data<float>(), kb.data<float>(), vb.data<float>(), qp, kp,
                          dy.data<float>(), lse_.data<float>(), D.data<float>(), B_, Tl_, Tl_, NH_,
                          NKV_, HS_, dq.data<float>(), dkb.data<float>(), dvb.data<float>(), e.stream);
    } else {
      BlockBackward(q_.data<float>(), kb.data<float>(), vb.data<float>(), qp, kp, dy.data<float>(),
                    lse_.data<float>(), D.data<float>(), B_, Tl_, Tl_, NH_, NKV_, HS_,
                    dq.data<float>(), dkb.data<float>(), dvb.data<float>());
    }
    if (size_ == 1) break;
    if (HostWaits()) GTP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(e.stream));
    if (step + 1 < size_) {
      GTP_RETURN_IF_ERROR(Rotate({kb, vb, dkb, dvb}, {kn, vn, dkn, dvn}, tag));
      std::swap(kb, kn);
      std::swap(vb, vn);
    } else {  // the last hop: only the gradients, home to their owner
      GTP_RETURN_IF_ERROR(Rotate({dkb, dvb}, {dkn, dvn}, tag + 8));
    }
    std::swap(dkb, dkn);
    std::swap(dvb, dvn);
    owner = (owner + size_ - 1) % size_;
  }
  kernels::ops::CopyInto(e, dkb, dk);
  kernels::ops::CopyInto(e, dvb, dv);
  DropActivations();
  return absl::OkStatus();
}

}  // namespace gtp::layers::cp
