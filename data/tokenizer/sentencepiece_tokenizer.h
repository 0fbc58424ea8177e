// data/tokenizer/sentencepiece_tokenizer.h — SentencePiece `tokenizer.model`
// files (Llama-2, Mistral, Gemma, T5 and other SentencePiece BPE and Unigram
// models): encode text to the ids `sentencepiece` gives, decode them back.
//
//   GTP_ASSIGN_OR_RETURN(SentencePieceTokenizer tok,
//                        SentencePieceTokenizer::Load("llama2/tokenizer.model"));
//   std::vector<int32_t> ids = tok.Encode("Hello world");   // {15043, 3186}
//   GTP_ASSIGN_OR_RETURN(std::string text, tok.Decode(ids)); // "Hello world"
//   std::optional<int32_t> eos = tok.eos_id();                // 2 ("</s>")
//
// The file is a serialized sentencepiece.ModelProto, read without a protobuf
// library (internal/spm_model.h). Encode is `SentencePieceProcessor::Encode`
// (Python: `sp.encode(text)`, no BOS/EOS; they are the caller's to add):
//  1. the normalizer: the precompiled rules of the file (none for Llama-2's
//     "identity"; NFKC-style tables for "nmt_nfkc" and kin), invalid UTF-8
//     bytes read as U+FFFD, remove_extra_whitespaces (leading, trailing and
//     repeated spaces dropped), add_dummy_prefix (a space in front),
//     escape_whitespaces (' ' → U+2581 "▁");
//  2. the model: BPE — from single characters (user-defined pieces whole),
//     repeatedly merge the adjacent pair whose concatenation is the piece with
//     the highest score (the leftmost among equals), UNUSED pieces split back
//     into the pair that made them; or Unigram — the Viterbi path of the
//     highest total score over all pieces that spell the text, a character
//     no piece covers costing (lowest score − 10);
//  3. characters no piece covers: with byte_fallback, one <0xNN> piece per
//     UTF-8 byte; without, one unk_id per run of them.
// Decode is `SentencePieceProcessor::DecodeIds`: "▁" → ' ', the leading space
// of the first piece dropped when the normalizer adds one (add_dummy_prefix or
// remove_extra_whitespaces), control pieces (<s>, </s>) give nothing, unk_id
// gives trainer_spec.unk_surface (" ⁇ "), runs of byte pieces are assembled
// into UTF-8 with U+FFFD for each byte that is not part of a valid character.
// So Decode(Encode(x)) == x for valid UTF-8 x that the normalizer keeps as it
// is (identity rules, no extra-whitespace removal, no "▁" in x, every
// character covered or byte_fallback); leading spaces come back.
//
// Load/FromString refuse, naming the field and what works, whatever they do
// not implement or is malformed: a truncated or non-ModelProto file, no
// pieces, model_type WORD or CHAR (or an unknown one), an empty, NUL-holding
// or duplicate piece, a piece type outside NORMAL..BYTE, no UNKNOWN piece or
// two, a BYTE piece that is not <0xNN> or without byte_fallback,
// byte_fallback without all 256 byte pieces, a NaN score, trainer_spec ids
// outside the pieces, unk_id not the UNKNOWN piece,
// treat_whitespace_as_suffix, a denormalizer_spec with rules, a malformed
// precompiled_charsmap, and a self-test sample (self_test_data) that does not
// encode as the file says.
//
// Load/FromString return Status (InvalidArgumentError naming the file and the
// field; NotFoundError for a missing file); Decode returns Status for an id
// outside the vocabulary. A loaded tokenizer is immutable: every const method
// is thread-safe and non-blocking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data/tokenizer/internal/spm_charsmap.h"
#include "data/tokenizer/internal/spm_model.h"

namespace gtp::data {

class SentencePieceTokenizer {
 public:
  enum class ModelType { kUnigram = 1, kBpe = 2 };

  // Reads and validates a tokenizer.model (blocks on I/O). Errors name the file.
  static absl::StatusOr<SentencePieceTokenizer> Load(const std::string& tokenizer_model_path);
  // The same from the file's bytes.
  static absl::StatusOr<SentencePieceTokenizer> FromString(absl::string_view model_proto);

  // Token ids of `text` (any bytes; invalid UTF-8 reads as U+FFFD).
  std::vector<int32_t> Encode(absl::string_view text) const;
  // Appends the ids of `text` to `out`.
  void EncodeAppend(absl::string_view text, std::vector<int32_t>* out) const;
  // The pieces of `text` as Encode gives them ("▁Hello", "<0x0A>").
  std::vector<std::string> EncodeAsPieces(absl::string_view text) const;

  // The text the ids stand for. InvalidArgumentError for an id that is
  // negative or past the vocabulary.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const;

  // The id of a piece as spelled in the file ("▁the", "<0x0A>", "</s>"), if present.
  std::optional<int32_t> TokenId(absl::string_view piece) const;
  // The id of a CONTROL, UNKNOWN or USER_DEFINED piece ("</s>", "<unk>"):
  // BOS/EOS lookup by name, as HfTokenizer::SpecialTokenId.
  std::optional<int32_t> SpecialTokenId(absl::string_view piece) const;
  // The piece of an id ("" for an id outside the vocabulary).
  const std::string& IdToPiece(int32_t id) const;

  // sentencepiece's bos_id()/eos_id()/pad_id(): the CONTROL piece named by
  // trainer_spec.bos_piece/eos_piece/pad_piece ("<s>", "</s>", "<pad>"), if any.
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  // The UNKNOWN piece (every file has exactly one).
  int32_t unk_id() const { return unk_id_; }

  // The number of pieces: the embedding rows a model needs.
  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }
  ModelType model_type() const { return model_type_; }
  bool byte_fallback() const { return byte_fallback_; }
  // One line: the model, its size and the normalizer, for logs.
  std::string Summary() const;

 private:
  // The pieces of `normalized` as (byte offset, length, id), before byte
  // fallback and unknown runs (EncodeNormalized).
  struct Span {
    uint32_t begin, length;
    int32_t id;
  };

  SentencePieceTokenizer() = default;
  absl::Status Build(tokenizer_internal::SpmModel model);
  absl::Status RunSelfTest(const tokenizer_internal::SpmModel& model) const;

  std::string Normalize(absl::string_view text) const;
  // The longest user-defined piece at the start of `text`: its length, or 0.
  size_t MatchUserDefined(absl::string_view text) const;
  // PieceToId of sentencepiece: reserved pieces first, then the model's; unk_id otherwise.
  int32_t PieceToId(absl::string_view piece) const;
  void EncodeBpe(absl::string_view normalized, size_t base, std::vector<Span>* out) const;
  void EncodeBpeChunk(absl::string_view chunk, size_t base, std::vector<Span>* out) const;
  void EncodeUnigram(absl::string_view normalized, std::vector<Span>* out) const;
  // Normalizes and runs the model: the pieces' spans in `*normalized`.
  std::vector<Span> EncodeNormalized(absl::string_view text, std::string* normalized) const;
  template <typename Emit>
  void EmitIds(absl::string_view normalized, const std::vector<Span>& spans, Emit emit) const;

  struct Piece {
    std::string text;
    float score = 0;
    tokenizer_internal::SpmPieceType type = tokenizer_internal::SpmPieceType::kNormal;
  };
  std::vector<Piece> pieces_;
  ModelType model_type_ = ModelType::kBpe;
  // NORMAL, USER_DEFINED and UNUSED pieces (the model's), and the others
  // (CONTROL, UNKNOWN, BYTE: never produced from text by the model).
  absl::flat_hash_map<std::string, int32_t> model_pieces_, reserved_pieces_;
  // USER_DEFINED pieces by their first byte, longest first.
  std::vector<std::vector<std::string>> user_defined_ = std::vector<std::vector<std::string>>(256);
  int32_t unk_id_ = 0;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  bool byte_fallback_ = false;
  int32_t byte_id_[256] = {};  // <0xNN> per byte (byte_fallback)
  std::string unk_surface_;
  // Normalizer.
  std::string normalizer_name_;
  std::unique_ptr<tokenizer_internal::SpmCharsMap> charsmap_;  // null: no rules (identity)
  bool add_dummy_prefix_ = true, remove_extra_whitespaces_ = true, escape_whitespaces_ = true;
  // BPE: no piece joins a character to a following "▁", so the text splits
  // before every "▁" that follows another character and each part merges alone.
  bool split_at_spaces_ = false;
  // Unigram: a byte trie over the model's pieces (child of (node, byte)), the
  // piece id at each node (-1: none), the score bounds of NORMAL pieces.
  absl::flat_hash_map<uint64_t, int32_t> trie_next_;
  std::vector<int32_t> trie_id_;
  float min_score_ = 0, max_score_ = 0;
};

}  // namespace gtp::data
