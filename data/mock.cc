#include "data/mock.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "core/philox.h"
#include "core/status.h"

namespace gtp::data {
namespace {

// Uniform integer in [0, n) from 32 random bits (multiply-shift).
uint64_t Below(uint32_t bits, uint64_t n) { return (static_cast<uint64_t>(bits) * n) >> 32; }

uint64_t TokenKey(uint64_t seed, uint64_t doc) {
  return MixKey(KeyFromName("gtp.data.mock.tokens", seed), doc);
}

}  // namespace

int32_t MockToken(uint64_t seed, int64_t vocab_size, uint64_t doc, uint64_t index) {
  return static_cast<int32_t>(
      Below(PhiloxRaw(TokenKey(seed, doc), index).v[0], static_cast<uint64_t>(vocab_size)));
}

absl::StatusOr<std::shared_ptr<MockTokenSource>> MockTokenSource::Create(const MockOptions& o) {
  if (o.vocab_size <= 0 || o.vocab_size > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mock data: vocab_size ", o.vocab_size, " is not in [1, 2^31 - 1]"));
  }
  if (o.num_documents == 0) return absl::InvalidArgumentError("mock data: num_documents is 0");
  if (o.min_document_length == 0 || o.min_document_length > o.max_document_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("mock data: document lengths [", o.min_document_length, ", ",
                     o.max_document_length, "] must satisfy 0 < min <= max"));
  }
  return std::shared_ptr<MockTokenSource>(new MockTokenSource(o));
}

size_t MockTokenSource::document_length(size_t doc) const {
  GTP_CHECK(doc < options_.num_documents, "document ", doc, " of ", options_.num_documents);
  uint64_t span = options_.max_document_length - options_.min_document_length + 1;
  uint64_t key = KeyFromName("gtp.data.mock.lengths", options_.seed);
  return options_.min_document_length + Below(PhiloxRaw(key, doc).v[0], span);
}

void MockTokenSource::Read(size_t doc, size_t offset, size_t count, int32_t* out) const {
  size_t len = document_length(doc);
  GTP_CHECK(offset <= len && count <= len - offset, "read [", offset, ", +", count,
            ") of mock document ", doc, " with ", len, " tokens");
  const uint64_t key = TokenKey(options_.seed, doc);
  const uint64_t vocab = static_cast<uint64_t>(options_.vocab_size);
  for (size_t i = 0; i < count; ++i) {
    out[i] = static_cast<int32_t>(Below(PhiloxRaw(key, offset + i).v[0], vocab));
  }
}

}  // namespace gtp::data
