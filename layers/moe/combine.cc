#include "layers/moe/combine.h"

#include <algorithm>
#include <vector>

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

// At most this many slots a token (the router's top_k limit; GatherAdd sorts
// a token's rows in registers on CUDA).
constexpr int kMaxGatherSlots = 8;

template <typename T, typename O>
void CpuGatherAdd(const T* xe, const int32_t* pos, const float* add, O* dx, int64_t n, int k,
                  int64_t C) {
  std::vector<int32_t> p;
  for (int64_t t = 0; t < n; ++t) {
    p.clear();
    for (int j = 0; j < k; ++j) {
      if (pos[t * k + j] >= 0) p.push_back(pos[t * k + j]);
    }
    std::sort(p.begin(), p.end());
    for (int64_t c = 0; c < C; ++c) {
      float acc = 0.0f;
      for (const int32_t r : p) acc += Load(xe, r * C + c);
      if (add != nullptr) acc = add[t * C + c] + acc;
      Store(dx, t * C + c, acc);
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

void GatherAdd(const kernels::Exec& e, const Tensor& xe, const Tensor& pos, const Tensor& add,
               const Tensor& dx) {
  for (const Tensor* t : {&xe, &pos, &dx}) {
    GTP_CHECK(t->device() == e.device, "moe::GatherAdd: tensor on ", t->device().ToString(),
              ", exec on ", e.device.ToString());
  }
  const bool xe_bf16 = xe.dtype() == DType::kBF16, dx_bf16 = dx.dtype() == DType::kBF16;
  GTP_CHECK((xe_bf16 || xe.dtype() == DType::kF32) && (dx_bf16 || dx.dtype() == DType::kF32),
            "moe::GatherAdd: xe and dx must be f32 or bf16");
  GTP_CHECK(
      pos.dtype() == DType::kI32 && dx.rank() == 2 && xe.rank() == 2 && xe.dim(1) == dx.dim(1),
      "moe::GatherAdd: want pos i32, xe [M, C] and dx [n, C]; got xe ", xe.ToString(), " dx ",
      dx.ToString());
  const int64_t n = dx.dim(0), C = dx.dim(1);
  GTP_CHECK(n > 0 && pos.numel() % n == 0, "moe::GatherAdd: ", pos.numel(), " slots for ", n,
            " tokens");
  const int k = static_cast<int>(pos.numel() / n);
  GTP_CHECK(k <= kMaxGatherSlots, "moe::GatherAdd: ", k, " slots a token, at most ",
            kMaxGatherSlots);
  const float* a = nullptr;
  if (add.defined()) {
    GTP_CHECK(add.device() == e.device && add.dtype() == DType::kF32 && add.numel() == dx.numel(),
              "moe::GatherAdd: add must be f32 like dx, got ", add.ToString());
    a = add.data<float>();
  }
  const int32_t* p = pos.data<int32_t>();
  if (e.is_cuda()) {
    cuda::GatherAdd(xe.raw_data(), p, a, dx.raw_data(), n, k, C, xe_bf16, dx_bf16, e.stream);
    return;
  }
  auto run = [&](auto* x) {
    if (dx_bf16) {
      CpuGatherAdd(x, p, a, dx.data<bf16>(), n, k, C);
    } else {
      CpuGatherAdd(x, p, a, dx.data<float>(), n, k, C);
    }
  };
  if (xe_bf16) {
    run(xe.data<bf16>());
  } else {
    run(xe.data<float>());
  }
}

}  // namespace gtp::layers::moe
