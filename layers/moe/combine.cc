#include "layers/moe/combine.h"

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status.h"

namespace gtp::layers::moe {

namespace {

template <typename T>
float Load(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, float>) {
    return p[i];
  } else {
    return ToF32(p[i]);
  }
}

template <typename T>
void Store(T* p, int64_t i, float v) {
  if constexpr (std::is_same_v<T, float>) {
    p[i] = v;
  } else {
    p[i] = ToBF16(v);
  }
}

template <typename T>
void CpuForward(const T* ye, const int32_t* pos, const float* w, T* y, int64_t n, int k, int64_t C) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) {
        const int32_t p = pos[t * k + j];
        if (p >= 0) acc += w[t * k + j] * Load(ye, p * C + c);
      }
      Store(y, t * C + c, acc);
    }
  }
}

template <typename T>
void CpuBackward(const T* dy, const T* ye, const int32_t* pos, const float* w, T* dye, float* dw,
                 int64_t n, int k, int64_t M, int64_t C) {
  for (int64_t i = 0; i < M * C; ++i) Store(dye, i, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    for (int j = 0; j < k; ++j) {
      const int64_t s = t * k + j;
      const int32_t p = pos[s];
      if (p < 0) {
        dw[s] = 0.0f;
        continue;
      }
      float acc = 0.0f;
      for (int64_t c = 0; c < C; ++c) {
        const float g = Load(dy, t * C + c);
        acc += Load(ye, p * C + c) * g;
        Store(dye, p * C + c, w[s] * g);
      }
      dw[s] = acc;
    }
  }
}

void Check(const kernels::Exec& e, const Tensor& rows_a, const Tensor& rows_b, const Tensor& pos,
           const Tensor& w, const char* what) {
  for (const Tensor* t : {&rows_a, &rows_b, &pos, &w}) {
    GTP_CHECK(t->device() == e.device, what, ": tensor on ", t->device().ToString(), ", exec on ",
              e.device.ToString());
  }
  GTP_CHECK(rows_a.dtype() == rows_b.dtype() &&
                (rows_a.dtype() == DType::kF32 || rows_a.dtype() == DType::kBF16),
            what, ": row tensors must share f32 or bf16");
  GTP_CHECK(pos.dtype() == DType::kI32 && w.dtype() == DType::kF32 && pos.numel() == w.numel(),
            what, ": pos i32 and w f32 of one size");
}

}  // namespace

void CombineForward(const kernels::Exec& e, const Tensor& ye, const Tensor& pos, const Tensor& w,
                    const Tensor& y) {
  Check(e, ye, y, pos, w, "moe::CombineForward");
  const int64_t n = y.dim(0), C = y.dim(1);
  GTP_CHECK(n > 0 && pos.numel() % n == 0 && ye.dim(-1) == C, "moe::CombineForward: shapes");
  const int k = static_cast<int>(pos.numel() / n);
  const bool is_bf16 = y.dtype() == DType::kBF16;
  if (e.is_cuda()) {
    cuda::CombineForward(ye.raw_data(), pos.data<int32_t>(), w.data<float>(), y.raw_data(), n, k,
                         C, is_bf16, e.stream);
  } else if (is_bf16) {
    CpuForward(ye.data<bf16>(), pos.data<int32_t>(), w.data<float>(), y.data<bf16>(), n, k, C);
  } else {
    CpuForward(ye.data<float>(), pos.data<int32_t>(), w.data<float>(), y.data<float>(), n, k, C);
  }
}

void CombineBackward(const kernels::Exec& e, const Tensor& dy, const Tensor& ye, const Tensor& pos,
                     const Tensor& w, const Tensor& dye, const Tensor& dw) {
  Check(e, dy, ye, pos, w, "moe::CombineBackward");
  GTP_CHECK(dye.dtype() == ye.dtype() && dye.numel() == ye.numel() && dw.dtype() == DType::kF32 &&
                dw.numel() == w.numel(),
            "moe::CombineBackward: dye like ye, dw like w");
  const int64_t n = dy.dim(0), C = dy.dim(1), M = ye.numel() / C;
  GTP_CHECK(n > 0 && pos.numel() % n == 0, "moe::CombineBackward: shapes");
  const int k = static_cast<int>(pos.numel() / n);
  const bool is_bf16 = dy.dtype() == DType::kBF16;
  if (e.is_cuda()) {
    cuda::CombineBackward(dy.raw_data(), ye.raw_data(), pos.data<int32_t>(), w.data<float>(),
                          dye.raw_data(), dw.data<float>(), n, k, M, C, is_bf16, e.stream);
  } else if (is_bf16) {
    CpuBackward(dy.data<bf16>(), ye.data<bf16>(), pos.data<int32_t>(), w.data<float>(),
                dye.data<bf16>(), dw.data<float>(), n, k, M, C);
  } else {
    CpuBackward(dy.data<float>(), ye.data<float>(), pos.data<int32_t>(), w.data<float>(),
                dye.data<float>(), dw.data<float>(), n, k, M, C);
  }
}

}  // namespace gtp::layers::moe
