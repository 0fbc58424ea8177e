#include "data/gpt_dataset.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/philox.h"
#include "core/status.h"
#include "data/internal/permutation.h"

namespace gtp::data {

using data_internal::RandomPermutation;

// One epoch's stream: document slot i holds document DocumentAt(i) and covers
// stream positions [offsets[i], offsets[i + 1]).
struct GptDataset::Epoch {
  uint64_t epoch = 0;
  uint64_t document_key = 0;
  std::vector<uint64_t> offsets;
};

// Most recently used epochs; a sampler crosses an epoch boundary rarely, so a
// handful covers every reader.
struct GptDataset::Cache {
  static constexpr size_t kCapacity = 4;
  std::mutex mu;
  std::vector<std::shared_ptr<const Epoch>> epochs;  // most recent last
};

GptDataset::GptDataset(GptDataset&&) noexcept = default;
GptDataset& GptDataset::operator=(GptDataset&&) noexcept = default;
GptDataset::~GptDataset() = default;

absl::StatusOr<GptDataset> GptDataset::Create(std::shared_ptr<const TokenSource> source,
                                              const GptDatasetOptions& options) {
  if (source == nullptr) return absl::InvalidArgumentError("GPT dataset: no token source");
  if (options.seq_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPT dataset: seq_length ", options.seq_length, " must be >= 1"));
  }
  GptDataset ds;
  ds.options_ = options;
  DocumentRange& r = ds.options_.documents;
  const size_t n = source->num_documents();
  if (r.end == DocumentRange::kAll) r.end = n;
  if (r.begin > r.end || r.end > n) {
    return absl::InvalidArgumentError(absl::StrCat("GPT dataset: documents [", r.begin, ", ", r.end,
                                                   ") are not inside [0, ", n, ")"));
  }
  const uint64_t eod = options.eod_token >= 0 ? 1 : 0;
  for (size_t d = r.begin; d < r.end; ++d) ds.tokens_per_epoch_ += source->document_length(d) + eod;
  const uint64_t T = static_cast<uint64_t>(options.seq_length);
  if (ds.tokens_per_epoch_ < T + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPT dataset: documents [", r.begin, ", ", r.end, ") hold ", ds.tokens_per_epoch_,
        " tokens; one sample of seq_length ", T, " needs ", T + 1));
  }
  ds.samples_per_epoch_ = (ds.tokens_per_epoch_ - 1) / T;
  ds.key_ = KeyFromName("gtp.data.gpt", options.seed);
  ds.source_ = std::move(source);
  ds.cache_ = std::make_unique<Cache>();
  return ds;
}

size_t GptDataset::DocumentAt(const Epoch& e, size_t slot) const {
  const DocumentRange& r = options_.documents;
  if (!options_.shuffle) return r.begin + slot;
  return r.begin + RandomPermutation(r.size(), e.document_key)(slot);
}

std::shared_ptr<const GptDataset::Epoch> GptDataset::BuildEpoch(uint64_t epoch) const {
  auto e = std::make_shared<Epoch>();
  e->epoch = epoch;
  e->document_key = MixKey(MixKey(key_, 1), epoch);
  const size_t n = options_.documents.size();
  const uint64_t eod = options_.eod_token >= 0 ? 1 : 0;
  e->offsets.resize(n + 1);
  e->offsets[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    e->offsets[i + 1] = e->offsets[i] + source_->document_length(DocumentAt(*e, i)) + eod;
  }
  return e;
}

std::shared_ptr<const GptDataset::Epoch> GptDataset::GetEpoch(uint64_t epoch) const {
  // Unshuffled epochs are all alike: build one and reuse it.
  if (!options_.shuffle) epoch = 0;
  std::lock_guard<std::mutex> lock(cache_->mu);
  auto& v = cache_->epochs;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i]->epoch == epoch) {
      std::shared_ptr<const Epoch> e = v[i];
      v.erase(v.begin() + i);
      v.push_back(e);
      return e;
    }
  }
  std::shared_ptr<const Epoch> e = BuildEpoch(epoch);
  if (v.size() == Cache::kCapacity) v.erase(v.begin());
  v.push_back(e);
  return e;
}

void GptDataset::GetSample(uint64_t index, int32_t* out) const {
  const uint64_t epoch = index / samples_per_epoch_, j = index % samples_per_epoch_;
  std::shared_ptr<const Epoch> e = GetEpoch(epoch);
  const uint64_t w = options_.shuffle
                         ? RandomPermutation(samples_per_epoch_, MixKey(MixKey(key_, 2), epoch))(j)
                         : j;
  const uint64_t T = static_cast<uint64_t>(options_.seq_length);
  uint64_t pos = w * T;
  size_t remaining = T + 1;
  // The slot whose span holds `pos`: the last one starting at or before it.
  size_t slot = static_cast<size_t>(std::upper_bound(e->offsets.begin(), e->offsets.end(), pos) -
                                    e->offsets.begin() - 1);
  while (remaining > 0) {
    GTP_CHECK(slot + 1 < e->offsets.size(), "sample ", index, " runs past its epoch");
    const size_t doc = DocumentAt(*e, slot);
    const uint64_t len = source_->document_length(doc);
    uint64_t offset = pos - e->offsets[slot];
    if (offset < len) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(remaining, len - offset));
      source_->Read(doc, offset, n, out);
      out += n;
      remaining -= n;
      pos += n;
      offset += n;
    }
    if (remaining > 0 && options_.eod_token >= 0 && offset == len) {
      *out++ = options_.eod_token;
      --remaining;
      ++pos;
    }
    ++slot;
  }
}

std::vector<int32_t> GptDataset::GetSample(uint64_t index) const {
  std::vector<int32_t> out(static_cast<size_t>(options_.seq_length) + 1);
  GetSample(index, out.data());
  return out;
}

void GptDataset::GetBatch(absl::Span<const uint64_t> samples, int32_t* tokens,
                          int32_t* targets) const {
  const size_t T = static_cast<size_t>(options_.seq_length);
  std::vector<int32_t> buf(T + 1);
  for (size_t b = 0; b < samples.size(); ++b) {
    GetSample(samples[b], buf.data());
    std::copy(buf.begin(), buf.begin() + T, tokens + b * T);
    std::copy(buf.begin() + 1, buf.end(), targets + b * T);
  }
}

}  // namespace gtp::data
