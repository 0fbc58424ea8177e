// data/mock.h — deterministic random token documents, for benchmarks and tests.
//
// Token i of document d is a pure function of (seed, d, i), computed on read,
// so a mock source of any size costs no memory and every rank sees the same
// data without communicating:
//
//   MockOptions mock;
//   mock.vocab_size = 50257;
//   mock.seed = 7;
//   GTP_ASSIGN_OR_RETURN(std::shared_ptr<MockTokenSource> src, MockTokenSource::Create(mock));
//   GTP_ASSIGN_OR_RETURN(GptDataset train, GptDataset::Create(src, options));
//
// Thread-safe and non-blocking (immutable after Create).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "data/token_source.h"

namespace gtp::data {

struct MockOptions {
  int64_t vocab_size = 256;  // tokens are uniform in [0, vocab_size)
  size_t num_documents = 1024;
  size_t min_document_length = 64;  // lengths are uniform in [min, max]
  size_t max_document_length = 1024;
  uint64_t seed = 0;
};

// Token `index` of document `doc` for `seed` and `vocab_size` (> 0).
// Pure; thread-safe.
int32_t MockToken(uint64_t seed, int64_t vocab_size, uint64_t doc, uint64_t index);

class MockTokenSource final : public TokenSource {
 public:
  // InvalidArgumentError unless 0 < vocab_size <= 2^31 - 1, num_documents > 0
  // and 0 < min_document_length <= max_document_length.
  static absl::StatusOr<std::shared_ptr<MockTokenSource>> Create(const MockOptions& options);

  const MockOptions& options() const { return options_; }

  size_t num_documents() const override { return options_.num_documents; }
  size_t document_length(size_t doc) const override;
  void Read(size_t doc, size_t offset, size_t count, int32_t* out) const override;

 private:
  explicit MockTokenSource(const MockOptions& options) : options_(options) {}
  MockOptions options_;
};

}  // namespace gtp::data
