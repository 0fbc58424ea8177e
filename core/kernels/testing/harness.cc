#include "core/kernels/testing/harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace gtp::kernels::testing {

std::vector<float> Rng::Uniform(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& v : out) v = dist(gen_);
  return out;
}

std::vector<float> Rng::Normal(size_t n, float mean, float stddev) {
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> out(n);
  for (float& v : out) v = dist(gen_);
  return out;
}

std::vector<int32_t> Rng::Ints(size_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> out(n);
  for (int32_t& v : out) v = dist(gen_);
  return out;
}

std::vector<double> ToDouble(const std::vector<float>& x) {
  return std::vector<double>(x.begin(), x.end());
}

std::vector<double> ToDouble(const std::vector<bf16>& x) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = BF16BitsToF32(x[i].bits);
  return out;
}

std::vector<float> ToFloat(const std::vector<bf16>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = BF16BitsToF32(x[i].bits);
  return out;
}

std::vector<bf16> ToBF16(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i].bits = F32ToBF16Bits(x[i]);
  return out;
}

std::vector<float> RoundToBF16(const std::vector<float>& x) { return ToFloat(ToBF16(x)); }

std::vector<uint8_t> StoreAs(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> out(v.size() * SizeOf(t));
  if (t == DType::kF32) {
    if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  } else {
    std::vector<bf16> b = ToBF16(v);
    if (!b.empty()) std::memcpy(out.data(), b.data(), out.size());
  }
  return out;
}

std::vector<float> LoadAs(const std::vector<uint8_t>& bytes, DType t) {
  std::vector<float> out(bytes.size() / SizeOf(t));
  if (t == DType::kF32) {
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = BF16BitsToF32(bits);
    }
  }
  return out;
}

std::vector<bf16> BytesAsBF16(const std::vector<uint8_t>& bytes) {
  std::vector<bf16> out(bytes.size() / 2);
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<float> NaNs(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

double RelativeError(const float* out, const double* ref, size_t n) {
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i]) || !std::isfinite(ref[i])) {
      return std::numeric_limits<double>::quiet_NaN();
    }
    double d = static_cast<double>(out[i]) - ref[i];
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
  }
  return ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
}

::testing::AssertionResult RelClose(const float* out, const double* ref, size_t n, double tol) {
  double err = RelativeError(out, ref, n);
  if (err <= tol) return ::testing::AssertionSuccess();
  // Worst element: the first non-finite one, else the largest |out − ref|.
  size_t worst = 0;
  double worst_d = -1;
  for (size_t i = 0; i < n; ++i) {
    double d = std::fabs(static_cast<double>(out[i]) - ref[i]);
    if (!std::isfinite(d)) {
      worst = i;
      break;
    }
    if (d > worst_d) {
      worst_d = d;
      worst = i;
    }
  }
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  r << "relative error " << err << " > tol " << tol << " over " << n << " elements";
  if (n > 0) r << "; worst at [" << worst << "]: out " << out[worst] << " vs ref " << ref[worst];
  return r;
}

::testing::AssertionResult RelClose(const std::vector<float>& out, const std::vector<double>& ref,
                                    double tol) {
  if (out.size() != ref.size()) {
    return ::testing::AssertionFailure()
           << "size mismatch: out " << out.size() << " vs ref " << ref.size();
  }
  return RelClose(out.data(), ref.data(), out.size(), tol);
}

::testing::AssertionResult RoundedOnce(const std::vector<bf16>& out, const std::vector<double>& ref,
                                       double max_fraction) {
  if (out.size() != ref.size()) {
    return ::testing::AssertionFailure()
           << "size mismatch: out " << out.size() << " vs ref " << ref.size();
  }
  double max_ref = 0;
  for (double r : ref) max_ref = std::max(max_ref, std::fabs(r));
  size_t mismatches = 0, first = out.size();
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::fabs(ref[i]) < 1e-3 * max_ref) continue;  // NaN ref: not skipped
    const float o = BF16BitsToF32(out[i].bits);
    const float want = BF16BitsToF32(F32ToBF16Bits(static_cast<float>(ref[i])));
    if (!(o == want) || !std::isfinite(ref[i])) {  // NaN compares unequal; ±0 match
      if (mismatches++ == 0) first = i;
    }
  }
  if (mismatches <= max_fraction * out.size() + 1) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << mismatches << " of " << out.size() << " elements differ from the reference rounded to "
         << "bf16 (allowed " << max_fraction << "·n + 1); first at [" << first << "]: out "
         << BF16BitsToF32(out[first].bits) << " vs ref " << ref[first];
}

std::vector<double> FiniteDifferenceGradient(const VectorFn& f, const std::vector<double>& x,
                                             const std::vector<double>& w, double eps) {
  auto loss = [&](const std::vector<double>& xp) {
    std::vector<double> y = f(xp);
    EXPECT_EQ(y.size(), w.size()) << "weights must match the output size";
    double l = 0;
    for (size_t i = 0; i < std::min(y.size(), w.size()); ++i) l += w[i] * y[i];
    return l;
  };
  std::vector<double> grad(x.size());
  std::vector<double> xp = x;
  for (size_t j = 0; j < x.size(); ++j) {
    double h = eps * std::max(1.0, std::fabs(x[j]));
    xp[j] = x[j] + h;
    double lp = loss(xp);
    xp[j] = x[j] - h;
    double lm = loss(xp);
    xp[j] = x[j];
    grad[j] = (lp - lm) / (2 * h);
  }
  return grad;
}

namespace {
constexpr uint32_t kGuardBits = 0x7fc0beefu;  // a quiet NaN no op produces by arithmetic
}  // namespace

GuardedBuffer::GuardedBuffer(size_t n, size_t guard) : n_(n), buf_(n + guard) {
  for (size_t i = n; i < buf_.size(); ++i) buf_[i] = BitsFloat(kGuardBits);
}

::testing::AssertionResult GuardedBuffer::GuardIntact() const {
  for (size_t i = n_; i < buf_.size(); ++i) {
    if (FloatBits(buf_[i]) != kGuardBits) {
      return ::testing::AssertionFailure()
             << "write past the end: element " << i << " of a " << n_ << "-element buffer";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace gtp::kernels::testing
