// core/tensor.h — a typed, device-tagged, reference-counted n-d array.
//
// A Tensor is a view (shape, strides in elements, element offset) onto a
// shared Storage. Copying a Tensor copies the view, not the data. Views made by
// Slice / View / Strided share storage with their source and keep it alive.
//
//   HeapAllocator host;
//   Tensor x = Tensor::Empty({B, T, C}, DType::kF32, host);
//   Tensor rows = x.Slice(2, 5);          // rows 2..4 of dim 0, no copy
//   float* p = x.data<float>();           // checks dtype
//
// Kernels take raw pointers; Tensor is the ownership and bookkeeping layer.
// Not thread-safe for concurrent mutation of one Tensor object; distinct
// Tensor objects sharing a Storage may be used from different threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/status.h"

namespace gtp {

// A block of memory, freed through its allocator (if any) when the last
// Tensor referring to it goes away.
class Storage {
 public:
  Storage(void* data, size_t bytes, Device device, Allocator* allocator)
      : data_(data), bytes_(bytes), device_(device), allocator_(allocator) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  Allocator* allocator_;  // not owned; nullptr for borrowed memory
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor

  // Uninitialised contiguous tensor from `alloc`. Aborts with the allocator's
  // message on out-of-memory; use TryEmpty to handle that as a Status.
  static Tensor Empty(const Shape& shape, DType dtype, Allocator& alloc);
  static absl::StatusOr<Tensor> TryEmpty(const Shape& shape, DType dtype, Allocator& alloc);
  // Zero-filled (memset; synchronous for CUDA).
  static Tensor Zeros(const Shape& shape, DType dtype, Allocator& alloc);
  // Non-owning view over memory the caller keeps alive.
  static Tensor Wrap(void* data, const Shape& shape, DType dtype, Device device);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * SizeOf(dtype_); }
  int64_t offset() const { return offset_; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Pointer to element 0 of this view.
  void* raw_data() const;
  template <typename T>
  T* data() const {
    GTP_CHECK(DTypeOf<T>::value == dtype_, "tensor is ", DTypeName(dtype_), ", asked for ",
              DTypeName(DTypeOf<T>::value));
    return static_cast<T*>(raw_data());
  }

  // Rows [start, stop) of dim 0; shares storage.
  Tensor Slice(int64_t start, int64_t stop) const;
  // Same elements, new shape (this must be contiguous, numel must match).
  Tensor View(const Shape& shape) const;
  // General strided view: element (i0, i1, ...) of the result is element
  // offset + Σ i_k·strides[k] of this view's storage (in elements from this
  // view's element 0). Bounds are checked against the storage.
  Tensor Strided(const Shape& shape, const Shape& strides, int64_t offset = 0) const;
  // Swaps two dims (a strided view).
  Tensor Transpose(int a, int b) const;

  std::string ToString() const;  // "f32[2, 3] cuda:0"

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::kF32;
  Device device_;
};

// Copies src into dst (same shape and dtype; any device pair). Unless both
// are on the CPU, each must be contiguous or row-pitched: its dims after the
// first packed, dim 0 with any stride at least a row (a column block of a
// matrix, or one chunk of each sequence of a batch: one 2-D copy). When either is on a GPU the copy is
// enqueued on `stream` (nullptr: legacy default stream) and synchronised when
// `sync` is true. Returns Status: CUDA failures are external.
absl::Status Copy(const Tensor& src, const Tensor& dst, void* cuda_stream = nullptr,
                  bool sync = true);

// Convenience for tests and tools: a new tensor on `alloc` holding src's data.
absl::StatusOr<Tensor> CopyTo(const Tensor& src, Allocator& alloc);

}  // namespace gtp
