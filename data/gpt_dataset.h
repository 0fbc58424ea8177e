// data/gpt_dataset.h — fixed-length language-model samples over a TokenSource.
//
// An epoch is the documents of a range, in an order shuffled per epoch,
// concatenated into one token stream (with an optional end-of-document token
// after each). Sample w of the stream is its T+1 tokens starting at w·T
// (consecutive samples share one token, as in Megatron-LM): the model reads
// the first T, the targets are the last T. Samples are shuffled within the
// epoch; epochs follow each other without end, so a sample index is any
// uint64 and epoch = index / samples_per_epoch():
//
//   GptDatasetOptions o;
//   o.seq_length = 64;
//   o.documents = EmbeddedCorpusSplit(CorpusSplit::kTrain);
//   o.seed = 1234;
//   GTP_ASSIGN_OR_RETURN(GptDataset train, GptDataset::Create(EmbeddedCorpusSource(), o));
//   train.GetBatch(sampler.MicroBatch(m), tokens, targets);   // (B, T) each
//
// A sample is a pure function of (source, options, index): any rank computes
// any sample without talking to the others, and a resumed run reads exactly
// what an uninterrupted one would. Every rank must use the same seed (it is
// the data seed, not a per-rank stream); DistributedSampler picks which
// indices a rank reads.
//
// Thread safety: const methods are thread-safe. Reading a sample of an epoch
// not among the few most recently used builds that epoch's document offsets
// (O(documents) time and 8 bytes per document) under a mutex; other reads
// only do O(log documents) work plus the copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/token_source.h"

namespace gtp::data {

struct GptDatasetOptions {
  // T: tokens the model sees per sample; a sample holds T+1 tokens.
  int64_t seq_length = 0;
  // The documents this view reads (a split; default all).
  DocumentRange documents;
  // Data seed: the document order and sample order of every epoch.
  uint64_t seed = 0;
  // false: documents in order and samples in order in every epoch (evaluation
  // over a fixed stream, debugging).
  bool shuffle = true;
  // >= 0: this token follows every document in the stream. Byte-level data
  // usually has none (-1): documents end with a newline.
  int32_t eod_token = -1;
};

class GptDataset {
 public:
  // InvalidArgumentError when seq_length < 1, the range is not inside the
  // source, or the range holds fewer than T+1 tokens (including EOD tokens).
  // O(documents) to count tokens; does not block otherwise.
  static absl::StatusOr<GptDataset> Create(std::shared_ptr<const TokenSource> source,
                                           const GptDatasetOptions& options);

  GptDataset(GptDataset&&) noexcept;
  GptDataset& operator=(GptDataset&&) noexcept;
  ~GptDataset();

  const GptDatasetOptions& options() const { return options_; }
  int64_t seq_length() const { return options_.seq_length; }
  // Tokens in one epoch's stream (document tokens plus EOD tokens).
  uint64_t tokens_per_epoch() const { return tokens_per_epoch_; }
  // Samples in one epoch: (tokens_per_epoch - 1) / T; the tail is dropped.
  uint64_t samples_per_epoch() const { return samples_per_epoch_; }
  uint64_t epoch_of(uint64_t index) const { return index / samples_per_epoch_; }

  // Copies the T+1 tokens of sample `index` into `out`.
  // The source's CheckIntact (call before a batch's GetSample/GetBatch).
  absl::Status CheckSource() const { return source_->CheckIntact(); }
  void GetSample(uint64_t index, int32_t* out) const;
  std::vector<int32_t> GetSample(uint64_t index) const;

  // For samples[b], b < B: tokens[b·T + t] = sample[t] and
  // targets[b·T + t] = sample[t + 1], t < T. Both buffers are (B, T).
  void GetBatch(absl::Span<const uint64_t> samples, int32_t* tokens, int32_t* targets) const;

 private:
  struct Epoch;
  struct Cache;
  GptDataset() = default;
  std::shared_ptr<const Epoch> GetEpoch(uint64_t epoch) const;
  std::shared_ptr<const Epoch> BuildEpoch(uint64_t epoch) const;
  size_t DocumentAt(const Epoch& e, size_t slot) const;

  std::shared_ptr<const TokenSource> source_;
  GptDatasetOptions options_;
  uint64_t tokens_per_epoch_ = 0;
  uint64_t samples_per_epoch_ = 0;
  uint64_t key_ = 0;
  std::unique_ptr<Cache> cache_;
};

}  // namespace gtp::data
