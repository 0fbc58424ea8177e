#include "core/tensor.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"

namespace gtp {

Storage::~Storage() {
  if (allocator_ != nullptr) allocator_->Free(data_);
}

absl::StatusOr<Tensor> Tensor::TryEmpty(const Shape& shape, DType dtype, Allocator& alloc) {
  size_t bytes = static_cast<size_t>(shape.numel()) * SizeOf(dtype);
  GTP_ASSIGN_OR_RETURN(void* p, alloc.Allocate(bytes));
  Tensor t;
  t.storage_ = std::make_shared<Storage>(p, bytes, alloc.device(), &alloc);
  t.shape_ = shape;
  t.strides_ = shape.ContiguousStrides();
  t.dtype_ = dtype;
  t.device_ = alloc.device();
  return t;
}

Tensor Tensor::Empty(const Shape& shape, DType dtype, Allocator& alloc) {
  auto t = TryEmpty(shape, dtype, alloc);
  GTP_CHECK(t.ok(), "allocating ", DTypeName(dtype), shape.ToString(), ": ", t.status().ToString());
  return *std::move(t);
}

Tensor Tensor::Zeros(const Shape& shape, DType dtype, Allocator& alloc) {
  Tensor t = Empty(shape, dtype, alloc);
  if (t.nbytes() == 0) return t;
  if (t.device().is_cpu()) {
    std::memset(t.raw_data(), 0, t.nbytes());
  } else {
    GTP_CUDA_CHECK(cudaSetDevice(t.device().index));
    GTP_CUDA_CHECK(cudaMemset(t.raw_data(), 0, t.nbytes()));
  }
  return t;
}

Tensor Tensor::Wrap(void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  size_t bytes = static_cast<size_t>(shape.numel()) * SizeOf(dtype);
  t.storage_ = std::make_shared<Storage>(data, bytes, device, nullptr);
  t.shape_ = shape;
  t.strides_ = shape.ContiguousStrides();
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expect) return false;
    expect *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  GTP_CHECK(defined(), "raw_data() of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(SizeOf(dtype_));
}

Tensor Tensor::Slice(int64_t start, int64_t stop) const {
  GTP_CHECK(rank() >= 1, "Slice of a rank-0 tensor");
  GTP_CHECK(0 <= start && start <= stop && stop <= shape_[0], "Slice [", start, ", ", stop,
            ") out of range for ", ToString());
  Tensor t = *this;
  t.shape_[0] = stop - start;
  t.offset_ += start * strides_[0];
  return t;
}

Tensor Tensor::View(const Shape& shape) const {
  GTP_CHECK(is_contiguous(), "View of a non-contiguous tensor ", ToString());
  GTP_CHECK(shape.numel() == numel(), "View ", shape.ToString(), " of ", ToString());
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = shape.ContiguousStrides();
  return t;
}

Tensor Tensor::Strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  GTP_CHECK(shape.rank() == strides.rank(), "Strided: shape/stride rank mismatch");
  int64_t lo = offset_ + offset, hi = offset_ + offset;
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] == 0) { hi = lo - 1; break; }
    int64_t span = (shape[i] - 1) * strides[i];
    (span >= 0 ? hi : lo) += span;
  }
  int64_t cap = static_cast<int64_t>(storage_->bytes() / SizeOf(dtype_));
  GTP_CHECK(hi < lo || (lo >= 0 && hi < cap), "Strided view out of storage bounds: ",
            shape.ToString(), " strides ", strides.ToString(), " on ", ToString());
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = strides;
  t.offset_ = offset_ + offset;
  return t;
}

Tensor Tensor::Transpose(int a, int b) const {
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

std::string Tensor::ToString() const {
  if (!defined()) return "undefined";
  return absl::StrCat(DTypeName(dtype_), shape_.ToString(), " ", device_.ToString());
}

namespace {
void CopyStridedCpu(const Tensor& src, const Tensor& dst) {
  const size_t es = SizeOf(src.dtype());
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(dst.raw_data());
  const int r = src.rank();
  int64_t idx[Shape::kMaxDims] = {0};
  for (int64_t n = 0, total = src.numel(); n < total; ++n) {
    int64_t so = 0, dof = 0;
    for (int k = 0; k < r; ++k) {
      so += idx[k] * src.strides()[k];
      dof += idx[k] * dst.strides()[k];
    }
    std::memcpy(d + dof * es, s + so * es, es);
    for (int k = r - 1; k >= 0; --k) {
      if (++idx[k] < src.shape()[k]) break;
      idx[k] = 0;
    }
  }
}
// Rows of `width` elements `pitch` apart: a view whose dims after the first
// are packed (each stride the product of the later sizes) — a column block
// of a row-major matrix, or one chunk of every sequence of a batch. A
// contiguous view is the case rows = 1.
struct Pitched {
  int64_t rows = 1, width = 0, pitch = 0;
};
bool AsPitched(const Tensor& t, Pitched* p) {
  if (t.rank() == 0) return false;
  int64_t packed = 1;
  for (int k = t.rank() - 1; k >= 1; --k) {
    if (t.shape()[k] != 1 && t.strides()[k] != packed) return false;
    packed *= t.shape()[k];
  }
  const int64_t pitch = t.shape()[0] == 1 ? packed : t.strides()[0];
  if (pitch < packed) return false;
  *p = Pitched{t.shape()[0], packed, pitch};
  return true;
}
}  // namespace

absl::Status Copy(const Tensor& src, const Tensor& dst, void* cuda_stream, bool sync) {
  if (src.shape() != dst.shape() || src.dtype() != dst.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Copy: ", src.ToString(), " into ", dst.ToString()));
  }
  if (src.numel() == 0) return absl::OkStatus();
  const size_t es = SizeOf(src.dtype());
  Pitched ps, pd;
  // Pitched both sides (the same shape gives the same rows and width): a
  // row copy, or one 2-D copy on a GPU.
  const bool pitched = AsPitched(src, &ps) && AsPitched(dst, &pd);
  if (src.device().is_cpu() && dst.device().is_cpu()) {
    if (src.is_contiguous() && dst.is_contiguous()) {
      std::memmove(dst.raw_data(), src.raw_data(), src.nbytes());
    } else if (pitched) {
      const char* s = static_cast<const char*>(src.raw_data());
      char* d = static_cast<char*>(dst.raw_data());
      for (int64_t r = 0; r < ps.rows; ++r) {
        std::memmove(d + r * pd.pitch * es, s + r * ps.pitch * es, ps.width * es);
      }
    } else {
      CopyStridedCpu(src, dst);
    }
    return absl::OkStatus();
  }
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (src.is_contiguous() && dst.is_contiguous()) {
    GTP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(),
                                             cudaMemcpyDefault, stream));
  } else if (pitched) {
    GTP_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst.raw_data(), pd.pitch * es, src.raw_data(),
                                               ps.pitch * es, ps.width * es, ps.rows,
                                               cudaMemcpyDefault, stream));
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "Copy to/from a GPU needs contiguous or row-pitched tensors (dims after the first "
        "packed): ", src.ToString(), " into ", dst.ToString()));
  }
  if (sync) {
    internal::CountHostSync();
    GTP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> CopyTo(const Tensor& src, Allocator& alloc) {
  GTP_ASSIGN_OR_RETURN(Tensor out, Tensor::TryEmpty(src.shape(), src.dtype(), alloc));
  GTP_RETURN_IF_ERROR(Copy(src, out));
  return out;
}

}  // namespace gtp
