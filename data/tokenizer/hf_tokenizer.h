// data/tokenizer/hf_tokenizer.h — Hugging Face `tokenizer.json` BPE
// tokenizers (Llama-3, Qwen2/Qwen3, GPT-2, Llama-2 and Mistral-style files):
// encode text to the ids HF gives, decode ids back to the text.
//
//   GTP_ASSIGN_OR_RETURN(HfTokenizer tok, HfTokenizer::Load("llama3/tokenizer.json"));
//   BpeCache cache;                                        // one per thread
//   std::vector<int32_t> ids = tok.Encode("Hello world", &cache);  // {9906, 1917}
//   GTP_ASSIGN_OR_RETURN(std::string text, tok.Decode(ids));      // "Hello world"
//   std::optional<int32_t> eos = tok.SpecialTokenId("<|end_of_text|>");  // 128001
//
// Encode is HF's `tokenizer.encode(text, add_special_tokens=False)`:
//  1. added tokens (`added_tokens`, special or not) are cut out of the text
//     first, leftmost-longest: those with normalized=false in the raw text,
//     then those with normalized=true in each normalized remaining segment;
//     lstrip/rstrip make a match take the whitespace beside it;
//  2. each remaining segment goes through the normalizer (NFC, Prepend,
//     Replace), the pre-tokenizer (Split with GPT-2's, Llama-3's or Qwen2's
//     regex, ByteLevel, Metaspace) and the BPE model (merges by rank;
//     ignore_merges, byte_fallback, unk_token, fuse_unk);
//  3. the post-processor is not applied: BOS/EOS are the caller's to add.
// Everything else a tokenizer.json can say is refused by Load with an error
// naming the field and its value (internal/hf_config.h), so a file is either
// encoded as HF encodes it or not loaded: other Unicode normalizers (NFKC,
// NFD, ...), other models (WordPiece, Unigram), other Split regexes,
// single_word added tokens, BPE dropout, subword prefixes/suffixes,
// truncation and padding.
//
// Decode inverts Encode: added tokens give their content; each run of model
// tokens between them goes through the decoder (ByteLevel, Metaspace,
// ByteFallback, Fuse, Strip, Replace, Sequence) on its own, and a Strip or a
// Metaspace decoder removes a leading space only from a run whose segment
// Encode prefixed (every segment under a Prepend normalizer or Metaspace
// "always", the one at the start of the text under Metaspace "first"). HF's
// decode runs the decoder over the whole sequence instead, so the two differ
// only beside added tokens (HF gives "a</s> b" for Llama-2's "a</s>b"). Bytes come
// back as they are (HF substitutes U+FFFD for invalid UTF-8). Decode(Encode(x))
// == x for every byte string x under ByteLevel files; Metaspace and
// Prepend/Replace files are lossy where the tokenizer itself is (a "▁" in the
// text reads back as a space; Metaspace does not prepend to a segment that
// starts with a space, so that space is lost).
//
// Load/FromString return Status (InvalidArgumentError naming the field;
// NotFoundError for a missing file); Decode returns Status for an id outside
// the vocabulary. A loaded tokenizer is immutable: every const method is
// thread-safe and non-blocking. A BpeCache is not thread-safe.
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
#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/internal/hf_config.h"

namespace gtp::data {

class HfTokenizer {
 public:
  // Reads and validates a tokenizer.json (blocks on I/O). Errors name the file.
  static absl::StatusOr<HfTokenizer> Load(const std::string& tokenizer_json_path);
  // The same from the file's contents.
  static absl::StatusOr<HfTokenizer> FromString(absl::string_view tokenizer_json);

  // Token ids of `text` (any bytes; invalid UTF-8 is encoded byte by byte).
  // `cache` may be null (slower on repetitive text).
  std::vector<int32_t> Encode(absl::string_view text, BpeCache* cache = nullptr) const;
  // Appends the ids of `text` to `out`.
  void EncodeAppend(absl::string_view text, BpeCache* cache, std::vector<int32_t>* out) const;

  // The text the ids stand for. InvalidArgumentError for an id that is
  // negative, past the vocabulary, or a gap in it.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const;

  // The id of an added token's content or of a model vocabulary entry as
  // spelled in tokenizer.json ("Ġthe", "<|end_of_text|>"), if present.
  std::optional<int32_t> TokenId(absl::string_view token) const;
  // The id of an added token with "special": true, by its content
  // ("<|end_of_text|>", "<|endoftext|>", "</s>"): BOS/EOS lookup by name.
  std::optional<int32_t> SpecialTokenId(absl::string_view content) const;

  // One past the largest id (model and added tokens): the embedding rows a
  // model needs.
  int32_t vocab_size() const { return static_cast<int32_t>(id_kind_.size()); }
  size_t num_merges() const { return merges_.size(); }
  size_t num_added_tokens() const { return added_.size(); }
  // One line: the model's size and the pipeline, for logs.
  std::string Summary() const;

 private:
  // Added tokens matched in one kind of text (raw or normalized).
  struct AddedMatcher {
    std::vector<std::string> patterns;
    std::vector<int> added;                       // index into added_ per pattern
    std::vector<std::vector<int>> by_first_byte;  // pattern indices, longest first
  };
  struct Segment {
    absl::string_view text;
    int added = -1;  // index into added_, or -1 for text to encode
    size_t offset = 0;
  };
  enum class IdKind : uint8_t { kAbsent, kModel, kAdded };

  HfTokenizer() = default;
  absl::Status Build(tokenizer_internal::HfConfig config);
  absl::Status CheckDecoder(bool byte_fallback);
  absl::Status BuildMatchers();
  // Whether the encoder prefixed the segment of a run (so Decode strips it).
  bool StripsPrefix(bool run_at_start) const {
    return prefix_every_ || (prefix_first_ && run_at_start);
  }

  std::vector<Segment> SplitAdded(absl::string_view text, const AddedMatcher& m) const;
  std::string Normalize(absl::string_view text) const;
  void EncodeSegment(absl::string_view text, bool at_start, BpeCache* cache,
                     std::vector<int32_t>* out) const;
  void EncodePiece(absl::string_view piece, BpeCache* cache, std::vector<int32_t>* out) const;
  void MergePiece(absl::string_view piece, std::vector<int32_t>* out) const;
  std::string DecodeRun(std::vector<std::string> tokens, bool strip_prefix) const;

  std::vector<tokenizer_internal::HfNormalizer> normalizers_;
  std::vector<tokenizer_internal::HfPreTokenizer> pre_tokenizers_;
  std::vector<tokenizer_internal::HfDecoder> decoders_;
  std::vector<tokenizer_internal::HfAddedToken> added_;
  AddedMatcher raw_added_, normalized_added_;

  bool byte_level_ = false;    // the pre-tokenizer ends in ByteLevel
  bool prefix_every_ = false;  // every segment gets a prefix (Prepend, Metaspace always)
  bool prefix_first_ = false;  // the segment at the start does (Metaspace first)
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  int32_t unk_id_ = -1;
  int32_t byte_id_[256] = {};                              // byte-level: the token of each byte
  int32_t byte_fallback_id_[256] = {};                     // byte_fallback: <0xNN>, or -1
  absl::flat_hash_map<std::string, int32_t> token_to_id_;  // the model's vocab
  absl::flat_hash_map<std::string, int32_t> added_to_id_;  // added contents
  std::vector<std::string> id_token_;                      // model token string per id
  std::vector<IdKind> id_kind_;
  std::vector<int32_t> id_added_;                // index into added_ per id, or -1
  tokenizer_internal::BpeMerges merges_;  // BpePairKey(left id, right id)
};

}  // namespace gtp::data
