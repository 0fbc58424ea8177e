// data/tokenizer/gpt2_tokenizer.h — GPT-2 byte-level BPE: encode text to
// token ids and decode ids back to the exact bytes.
//
// Loads the standard pair of files: vocab.json ({"token": id, ...}, tokens
// spelled in GPT-2's byte→unicode alphabet) and merges.txt (an optional
// "#version" line, then one "a b" merge per line, rank = line order).
// Encoding: Gpt2PreTokenize (pretokenizer.h), then each piece's bytes as
// byte tokens merged by rank, lowest first, every occurrence left to right —
// the loop of GPT-2's encoder.py, which HF `tokenizers` BPE reproduces.
// Decoding concatenates each token's bytes, so decode(encode(x)) == x for
// every byte string x, valid UTF-8 or not.
//
//   GTP_ASSIGN_OR_RETURN(Gpt2Tokenizer tok,
//                        Gpt2Tokenizer::Load("/data/gpt2/vocab.json", "/data/gpt2/merges.txt"));
//   BpeCache cache;                                   // one per thread
//   std::vector<int32_t> ids = tok.Encode("Hello world", &cache);  // {15496, 995}
//   GTP_ASSIGN_OR_RETURN(std::string text, tok.Decode(ids));
//
// Special tokens ("<|endoftext|>") are ordinary vocab entries: Encode never
// produces them from text (it spells the text out); look their ids up with
// TokenId() and append them yourself.
//
// Load/FromStrings return Status (InvalidArgumentError naming the file and
// line or byte; NotFoundError for a missing file); Decode returns Status for
// ids outside the vocabulary. A loaded tokenizer is immutable: every const
// method is thread-safe and non-blocking. A BpeCache is not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data/tokenizer/internal/bpe_merge.h"

namespace gtp::data {

// GPT-2's bytes_to_unicode(): the 188 printable bytes ('!'..'~', '¡'..'¬',
// '®'..'ÿ') map to themselves, the other 68 to U+0100 + n in byte order
// (so ' ' is 'Ġ' U+0120, '\n' is 'Ċ' U+010A).
uint32_t Gpt2ByteToCodePoint(uint8_t byte);

// A memo of pre-token → ids for one thread's Encode calls. Bounded: it is
// cleared when it reaches max_entries. Not thread-safe.
class BpeCache {
 public:
  explicit BpeCache(size_t max_entries = size_t{1} << 18) : max_entries_(max_entries) {}
  size_t size() const { return map_.size(); }

 private:
  friend class Gpt2Tokenizer;
  friend class HfTokenizer;
  size_t max_entries_;
  absl::flat_hash_map<std::string, std::vector<int32_t>> map_;
};

class Gpt2Tokenizer {
 public:
  // Reads both files (blocks on I/O).
  static absl::StatusOr<Gpt2Tokenizer> Load(const std::string& vocab_json_path,
                                            const std::string& merges_txt_path);
  // The same from file contents. Every byte must have its token in the
  // vocabulary, and every merge's parts and result must be tokens.
  static absl::StatusOr<Gpt2Tokenizer> FromStrings(absl::string_view vocab_json,
                                                   absl::string_view merges_txt);

  // Token ids of `text`. `cache` may be null (slower on repetitive text).
  std::vector<int32_t> Encode(absl::string_view text, BpeCache* cache = nullptr) const;
  // Appends the ids of `text` to `out`.
  void EncodeAppend(absl::string_view text, BpeCache* cache, std::vector<int32_t>* out) const;
  // BPE of one pre-token (no pre-tokenization), appended to `out`.
  void EncodePiece(absl::string_view piece, std::vector<int32_t>* out) const;

  // The bytes the ids stand for. InvalidArgumentError for an id that is
  // negative, past the vocabulary, or a gap in it.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const;

  // The id of a vocabulary entry as spelled in vocab.json ("Ġthe",
  // "<|endoftext|>"), if present.
  std::optional<int32_t> TokenId(absl::string_view token) const;

  // One past the largest id: the embedding rows a model needs.
  int32_t vocab_size() const { return static_cast<int32_t>(id_bytes_.size()); }
  size_t num_merges() const { return merges_.size(); }

 private:
  Gpt2Tokenizer() = default;

  absl::flat_hash_map<std::string, int32_t> token_to_id_;
  std::vector<std::string> id_bytes_;  // decoded bytes per id
  std::vector<bool> id_present_;       // false for gaps in the id space
  int32_t byte_id_[256] = {};
  tokenizer_internal::BpeMerges merges_;  // BpePairKey(left id, right id)
};

}  // namespace gtp::data
