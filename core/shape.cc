#include "core/shape.h"

#include "absl/strings/str_join.h"
#include "core/status.h"

namespace gtp {

Shape::Shape(std::initializer_list<int64_t> dims) {
  GTP_CHECK(static_cast<int>(dims.size()) <= kMaxDims, "too many dims: ", dims.size());
  for (int64_t d : dims) {
    GTP_CHECK(d >= 0, "negative extent ", d);
    dims_[rank_++] = d;
  }
}

Shape::Shape(const std::vector<int64_t>& dims) {
  GTP_CHECK(static_cast<int>(dims.size()) <= kMaxDims, "too many dims: ", dims.size());
  for (int64_t d : dims) {
    GTP_CHECK(d >= 0, "negative extent ", d);
    dims_[rank_++] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

Shape Shape::ContiguousStrides() const {
  Shape s;
  s.rank_ = rank_;
  int64_t acc = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    s.dims_[i] = acc;
    acc *= dims_[i];
  }
  return s;
}

std::string Shape::ToString() const { return "[" + absl::StrJoin(begin(), end(), ", ") + "]"; }

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

}  // namespace gtp
