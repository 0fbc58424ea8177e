#include "data/token_source.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status.h"

namespace gtp::data {

uint64_t TokenSource::num_tokens() const {
  uint64_t n = 0;
  for (size_t d = 0; d < num_documents(); ++d) n += document_length(d);
  return n;
}

std::vector<int32_t> TokenSource::Document(size_t doc) const {
  std::vector<int32_t> out(document_length(doc));
  Read(doc, 0, out.size(), out.data());
  return out;
}

absl::StatusOr<std::vector<DocumentRange>> SplitDocuments(size_t num_documents,
                                                          const std::vector<double>& weights) {
  if (weights.empty()) return absl::InvalidArgumentError("split: no weights given");
  double total = 0;
  for (double w : weights) {
    if (!std::isfinite(w) || w < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("split: weight ", w, " is not a finite number >= 0"));
    }
    total += w;
  }
  if (!(total > 0)) return absl::InvalidArgumentError("split: the weights sum to 0");
  std::vector<DocumentRange> out;
  double cumulative = 0;
  size_t begin = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    cumulative += weights[i];
    size_t end = i + 1 == weights.size()
                     ? num_documents
                     : static_cast<size_t>(
                           std::llround(cumulative / total * static_cast<double>(num_documents)));
    if (end < begin) end = begin;
    if (end > num_documents) end = num_documents;
    out.push_back({begin, end});
    begin = end;
  }
  return out;
}

absl::StatusOr<std::vector<double>> ParseSplitWeights(absl::string_view text) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    double w = 0;
    if (!absl::SimpleAtod(part, &w)) {
      return absl::InvalidArgumentError(
          absl::StrCat("split \"", text, "\": \"", part, "\" is not a number"));
    }
    out.push_back(w);
  }
  return out;
}

VectorTokenSource::VectorTokenSource(const std::vector<std::vector<int32_t>>& documents) {
  offsets_.reserve(documents.size() + 1);
  offsets_.push_back(0);
  for (const auto& d : documents) {
    tokens_.insert(tokens_.end(), d.begin(), d.end());
    offsets_.push_back(tokens_.size());
  }
}

size_t VectorTokenSource::document_length(size_t doc) const {
  GTP_CHECK(doc < num_documents(), "document ", doc, " of ", num_documents());
  return offsets_[doc + 1] - offsets_[doc];
}

void VectorTokenSource::Read(size_t doc, size_t offset, size_t count, int32_t* out) const {
  size_t len = document_length(doc);
  GTP_CHECK(offset <= len && count <= len - offset, "read [", offset, ", +", count,
            ") of document ", doc, " with ", len, " tokens");
  const int32_t* src = tokens_.data() + offsets_[doc] + offset;
  std::copy(src, src + count, out);
}

ByteTokenSource::ByteTokenSource(std::shared_ptr<const std::string> bytes,
                                 std::vector<size_t> offsets)
    : bytes_(std::move(bytes)), offsets_(std::move(offsets)) {
  GTP_CHECK(bytes_ != nullptr);
  GTP_CHECK(!offsets_.empty() && offsets_.front() == 0 && offsets_.back() == bytes_->size(),
            "document offsets must run from 0 to ", bytes_->size());
  for (size_t i = 1; i < offsets_.size(); ++i) {
    GTP_CHECK(offsets_[i - 1] <= offsets_[i], "document offsets decrease at ", i);
  }
}

size_t ByteTokenSource::document_length(size_t doc) const {
  GTP_CHECK(doc < num_documents(), "document ", doc, " of ", num_documents());
  return offsets_[doc + 1] - offsets_[doc];
}

void ByteTokenSource::Read(size_t doc, size_t offset, size_t count, int32_t* out) const {
  size_t len = document_length(doc);
  GTP_CHECK(offset <= len && count <= len - offset, "read [", offset, ", +", count,
            ") of document ", doc, " with ", len, " tokens");
  const unsigned char* src =
      reinterpret_cast<const unsigned char*>(bytes_->data()) + offsets_[doc] + offset;
  for (size_t i = 0; i < count; ++i) out[i] = src[i];
}

}  // namespace gtp::data
