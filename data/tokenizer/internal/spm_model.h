// data/tokenizer/internal/spm_model.h — a SentencePiece `tokenizer.model`
// (a serialized sentencepiece.ModelProto, proto2) read into plain structs by a
// small protobuf wire-format reader: no protobuf library, no generated code.
//
// Field numbers are those of sentencepiece_model.proto (google/sentencepiece,
// src/sentencepiece_model.proto):
//   ModelProto      pieces=1 (repeated SentencePiece), trainer_spec=2,
//                   normalizer_spec=3, self_test_data=4, denormalizer_spec=5
//   SentencePiece   piece=1 (string), score=2 (float), type=3 (enum, default NORMAL)
//   TrainerSpec     model_type=3 (default UNIGRAM), vocab_size=4,
//                   treat_whitespace_as_suffix=24, byte_fallback=35,
//                   unk_id=40 bos_id=41 eos_id=42 pad_id=43 (defaults 0, 1, 2, -1),
//                   unk_surface=44, unk_piece=45 bos_piece=46 eos_piece=47 pad_piece=48
//   NormalizerSpec  name=1, precompiled_charsmap=2, add_dummy_prefix=3,
//                   remove_extra_whitespaces=4, escape_whitespaces=5 (defaults true)
//   SelfTestData    samples=1 (Sample: input=1, expected=2)
// Other fields are skipped, as protobuf does (readers tolerate added fields);
// a field seen twice keeps its last value and a message seen twice is merged,
// as protobuf does.
//
// ParseSpmModel checks the wire format only (truncation, wire types, a known
// field with the wrong wire type) and returns InvalidArgumentError naming the
// field and the byte offset. What the values mean is checked by
// SentencePieceTokenizer (sentencepiece_tokenizer.h). Internal to data/tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gtp::data::tokenizer_internal {

// ModelProto.SentencePiece.Type.
enum class SpmPieceType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct SpmPiece {
  std::string piece;
  float score = 0;
  int32_t type = 1;  // SpmPieceType; any value as read (checked by the tokenizer)
};

struct SpmNormalizerSpec {
  bool present = false;
  std::string name;
  std::string precompiled_charsmap;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

struct SpmSelfTestSample {
  std::string input, expected;
};

struct SpmModel {
  std::vector<SpmPiece> pieces;
  // TrainerSpec (trainers always write one; its absence means a cut file).
  bool trainer_spec_present = false;
  int32_t model_type = 1;  // UNIGRAM=1, BPE=2, WORD=3, CHAR=4
  int32_t vocab_size = 8000;
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  std::string unk_surface = " \xE2\x81\x87 ";  // " ⁇ "
  std::string unk_piece = "<unk>", bos_piece = "<s>", eos_piece = "</s>", pad_piece = "<pad>";
  SpmNormalizerSpec normalizer;
  SpmNormalizerSpec denormalizer;  // present only when the file has one
  std::vector<SpmSelfTestSample> self_test;
};

// Parses a serialized ModelProto (the whole contents of a tokenizer.model).
absl::StatusOr<SpmModel> ParseSpmModel(absl::string_view bytes);

// The name of a TrainerSpec.ModelType value ("BPE", "UNIGRAM", ...; "7" for
// an unknown one) and of a piece type ("NORMAL", ..., "BYTE").
std::string SpmModelTypeName(int32_t model_type);
std::string SpmPieceTypeName(int32_t type);

}  // namespace gtp::data::tokenizer_internal
