// data/tokenizer/bpe_trainer.h — trains a GPT-2-style byte-level BPE: the
// vocab.json + merges.txt that Gpt2Tokenizer (and HF `tokenizers`) load.
//
// The algorithm (Sennrich et al.; the loop of HF tokenizers' BpeTrainer):
//   1. split the text with Gpt2PreTokenize and count the distinct pieces
//      ("words"): merges never cross pieces, so only the counts matter;
//   2. spell every word as its bytes (token ids 0..255, see below);
//   3. repeatedly take the adjacent pair with the highest count (summed over
//      every position in every word, weighted by the word's count), add the
//      concatenation as a token and replace the pair left to right in every
//      word, until the vocabulary is full or no pair is left.
// Ties between equal counts go to the pair with the smaller (left id, right
// id), ids as in the output vocabulary — bytes in GPT-2's byte→unicode order,
// then merged tokens oldest first. That is HF BpeTrainer's rule, so both give
// the same merges.txt for the same words (with ByteLevel's full alphabet).
// Should a merge's result already be a token (spelled by another pair), the
// merge is listed and reuses that id, as HF does: the vocabulary does not grow.
//
// Output layout (GPT-2's): ids 0..255 are the byte tokens in byte→unicode
// order ('!' is 0, ' ' (Ġ) is 220), then merged tokens by rank, then the
// special tokens (by default only <|endoftext|>, the last id). Pair counts
// are updated incrementally: a merge revisits only the words that contain
// the pair (an index from pair to words), and a max-heap with lazily
// refreshed counts picks the next pair, so a merge costs about the length of
// the words it touches. Output is a pure function of the word counts:
// deterministic, independent of input order and hash seeds.
//
//   BpeWordCounts words;
//   words.AddText(text);                      // any number of times
//   BpeTrainerOptions o;
//   o.vocab_size = 8192;
//   GTP_ASSIGN_OR_RETURN(BpeVocab v, TrainBpe(words, o));
//   GTP_RETURN_IF_ERROR(v.Write("/data/my_bpe"));  // vocab.json, merges.txt, tokenizer.json
//
// TrainBpe returns InvalidArgumentError for a vocab_size below 256 + the
// special tokens, or a special token that is empty, repeated or spelled like
// a learned token; Write returns the I/O error naming the file. Everything
// here is single-threaded and blocks until done; no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gtp::data {

// The words of a corpus and their counts. Not thread-safe.
class BpeWordCounts {
 public:
  // Pre-tokenizes `text` (Gpt2PreTokenize) and counts every piece.
  void AddText(absl::string_view text);
  // Counts `word` as one pre-token `count` more times (count > 0).
  void AddWord(absl::string_view word, int64_t count = 1);

  const absl::flat_hash_map<std::string, int64_t>& counts() const { return counts_; }
  int64_t num_words() const { return num_words_; }  // pieces counted
  int64_t num_bytes() const { return num_bytes_; }  // their total length

 private:
  absl::flat_hash_map<std::string, int64_t> counts_;
  int64_t num_words_ = 0;
  int64_t num_bytes_ = 0;
};

struct BpeTrainerOptions {
  // The whole vocabulary: 256 byte tokens + merged tokens + special tokens.
  int32_t vocab_size = 50257;
  // Appended after the merged tokens, in this order (GPT-2: <|endoftext|>).
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
  // Called after every merge with (merges so far, the merge's pair count);
  // may be empty. For progress lines.
  std::function<void(int64_t merges, int64_t count)> on_merge;
};

// A trained vocabulary.
struct BpeVocab {
  // The bytes each id stands for: 256 byte tokens, merged tokens, then the
  // special tokens (their literal text).
  std::vector<std::string> token_bytes;
  int32_t num_special = 0;
  // Merges by rank as (left bytes, right bytes).
  std::vector<std::pair<std::string, std::string>> merges;
  // The count of each merge's pair when it was chosen (non-increasing
  // except after a merge that reused a token).
  std::vector<int64_t> merge_counts;

  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes.size()); }

  // {"token": id, ...} in id order, compact, tokens spelled in the byte
  // alphabet as raw UTF-8 (the layout of HF's BPE.save).
  std::string VocabJson() const;
  // "#version: 0.2" then one "left right" line per merge, rank order.
  std::string MergesTxt() const;
  // The same vocabulary as a Hugging Face tokenizer.json, GPT-2's pipeline
  // (ByteLevel pre-tokenizer with GPT-2's regex, no prefix space; ByteLevel
  // decoder; the special tokens as special added tokens), loadable by
  // HfTokenizer and by HF `tokenizers` with the ids of vocab.json + merges.txt.
  std::string TokenizerJson() const;
  // Writes dir/vocab.json, dir/merges.txt and dir/tokenizer.json (creating
  // dir). Blocks on I/O.
  absl::Status Write(const std::string& dir) const;
};

// The byte whose token has id `id` (0..255): GPT-2's byte→unicode order.
uint8_t Gpt2ByteOfId(int32_t id);

// A byte string spelled in GPT-2's byte alphabet (UTF-8), as in vocab.json.
std::string Gpt2SpellBytes(absl::string_view bytes);

absl::StatusOr<BpeVocab> TrainBpe(const BpeWordCounts& words, const BpeTrainerOptions& options);

}  // namespace gtp::data
