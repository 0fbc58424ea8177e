// data/token_source.h — documents of token ids, the input of every dataset view.
//
// A TokenSource is a read-only list of documents, each a sequence of token
// ids (int32). The embedded corpus (corpus.h), mock data (mock.h) and Megatron
// indexed datasets (indexed_dataset.h) are TokenSources; GptDataset
// (gpt_dataset.h) turns any of them into fixed-length training samples.
//
//   auto src = std::make_shared<VectorTokenSource>(
//       std::vector<std::vector<int32_t>>{{1, 2, 3}, {4, 5}});
//   int32_t buf[2];
//   src->Read(/*doc=*/0, /*offset=*/1, /*count=*/2, buf);   // {2, 3}
//
// Splits: SplitDocuments() cuts [0, num_documents) into contiguous ranges by
// weight, as Megatron-LM's "--split 969,30,1" does; a dataset view takes one
// range (train, validation, test).
//
// Thread safety: every TokenSource is immutable after construction; all const
// methods are thread-safe and do not block (reads of memory-mapped files may
// page-fault). No method returns Status: sources validate their input when
// they are built, and out-of-range reads are programmer errors (GTP_CHECK).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gtp::data {

// A read-only collection of documents of token ids.
class TokenSource {
 public:
  virtual ~TokenSource() = default;

  // Number of documents.
  virtual size_t num_documents() const = 0;

  // Number of tokens in document `doc` (< num_documents()).
  virtual size_t document_length(size_t doc) const = 0;

  // Copies tokens [offset, offset + count) of document `doc` into `out`.
  // Aborts (GTP_CHECK) when the range is outside the document.
  virtual void Read(size_t doc, size_t offset, size_t count, int32_t* out) const = 0;

  // Tokens in all documents. The default sums document_length(): O(documents).
  virtual uint64_t num_tokens() const;

  // OK while Read may go on; an error naming the file when a source backed
  // by files saw them change under it (IndexedDataset: a file that shrank
  // would fault on read). Cheap (a stat): callers check once per batch.
  virtual absl::Status CheckIntact() const { return absl::OkStatus(); }

  // The whole of document `doc`, for tests and tools.
  std::vector<int32_t> Document(size_t doc) const;
};

// Documents [begin, end) of a TokenSource. The default means "all documents"
// wherever a range is accepted (end is clamped to num_documents()).
struct DocumentRange {
  static constexpr size_t kAll = std::numeric_limits<size_t>::max();
  size_t begin = 0;
  size_t end = kAll;

  size_t size() const { return end - begin; }
  bool operator==(const DocumentRange& o) const { return begin == o.begin && end == o.end; }
};

// Splits [0, num_documents) into weights.size() contiguous ranges whose sizes
// are proportional to `weights` (boundaries are the rounded cumulative
// fractions, so the ranges are disjoint and cover every document). Weights
// must be finite, >= 0, with a positive sum (InvalidArgumentError otherwise).
// A range may be empty when its weight is small. Pure; thread-safe.
absl::StatusOr<std::vector<DocumentRange>> SplitDocuments(size_t num_documents,
                                                          const std::vector<double>& weights);

// Parses Megatron-style split weights, "969,30,1" or "0.95,0.05"
// (InvalidArgumentError naming the text on bad input). Pure; thread-safe.
absl::StatusOr<std::vector<double>> ParseSplitWeights(absl::string_view text);

// Documents held in memory as token vectors; for tests and small data.
class VectorTokenSource final : public TokenSource {
 public:
  explicit VectorTokenSource(const std::vector<std::vector<int32_t>>& documents);

  size_t num_documents() const override { return offsets_.size() - 1; }
  size_t document_length(size_t doc) const override;
  void Read(size_t doc, size_t offset, size_t count, int32_t* out) const override;
  uint64_t num_tokens() const override { return tokens_.size(); }

 private:
  std::vector<int32_t> tokens_;  // all documents back to back
  std::vector<size_t> offsets_;  // document d is [offsets_[d], offsets_[d + 1])
};

// Byte-level documents (token = byte value, vocabulary 256) over a shared
// byte string, without copying it.
class ByteTokenSource final : public TokenSource {
 public:
  // Document d is bytes[offsets[d], offsets[d + 1]). Aborts unless offsets is
  // non-empty, starts at 0, ends at bytes->size() and never decreases.
  ByteTokenSource(std::shared_ptr<const std::string> bytes, std::vector<size_t> offsets);

  size_t num_documents() const override { return offsets_.size() - 1; }
  size_t document_length(size_t doc) const override;
  void Read(size_t doc, size_t offset, size_t count, int32_t* out) const override;
  uint64_t num_tokens() const override { return bytes_->size(); }

 private:
  std::shared_ptr<const std::string> bytes_;
  std::vector<size_t> offsets_;
};

}  // namespace gtp::data
