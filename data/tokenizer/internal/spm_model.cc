#include "data/tokenizer/internal/spm_model.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::data::tokenizer_internal {
namespace {

enum WireType : int { kVarint = 0, kFixed64 = 1, kLen = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

const char* WireTypeName(int wire) {
  switch (wire) {
    case kVarint: return "varint";
    case kFixed64: return "64-bit";
    case kLen: return "length-delimited";
    case kStartGroup: return "start-group";
    case kEndGroup: return "end-group";
    case kFixed32: return "32-bit";
  }
  return "invalid";
}

// Reads one message's bytes. `where` names the message for errors
// ("ModelProto", "ModelProto.pieces[3]"); `base` is its offset in the file.
class WireReader {
 public:
  WireReader(absl::string_view data, size_t base, std::string where)
      : data_(data), base_(base), where_(std::move(where)) {}

  bool done() const { return pos_ >= data_.size(); }
  const std::string& where() const { return where_; }
  size_t offset() const { return base_ + pos_; }

  // The next field's number and wire type.
  absl::Status Tag(uint32_t* field, int* wire) {
    const size_t at = offset();
    GTP_ASSIGN_OR_RETURN(uint64_t tag, Varint("a field tag"));
    *field = static_cast<uint32_t>(tag >> 3);
    *wire = static_cast<int>(tag & 7);
    if (*field == 0 || tag >> 3 > 0x1FFFFFFF || *wire == kStartGroup || *wire == kEndGroup ||
        *wire > kFixed32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "not a serialized sentencepiece ModelProto: ", where_, " has a field tag at byte ", at,
          " with field number ", tag >> 3, " and wire type ", *wire, " (", WireTypeName(*wire),
          "), which protobuf files of this kind never hold"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Varint(absl::string_view what) {
    uint64_t v = 0;
    const size_t at = offset();
    for (int shift = 0; shift < 70; shift += 7) {
      if (done()) return Truncated(what, at);
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      if (shift == 63 && b > 1) break;
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    return absl::InvalidArgumentError(absl::StrCat("not a serialized sentencepiece ModelProto: ",
                                                   where_, " has a varint longer than 64 bits at byte ",
                                                   at, " (", what, ")"));
  }

  absl::StatusOr<uint32_t> Fixed32(absl::string_view what) {
    if (data_.size() - pos_ < 4) return Truncated(what, offset());
    uint32_t v;
    std::memcpy(&v, data_.data() + pos_, 4);  // little-endian on every platform we build for
    pos_ += 4;
    return v;
  }

  // A length-delimited field's bytes; `*at` receives their offset in the file.
  absl::StatusOr<absl::string_view> Bytes(absl::string_view what, size_t* at = nullptr) {
    const size_t tag_at = offset();
    GTP_ASSIGN_OR_RETURN(uint64_t len, Varint(what));
    if (len > data_.size() - pos_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "truncated file: ", where_, " ", what, " at byte ", tag_at, " claims ", len,
          " bytes but ", data_.size() - pos_, " remain", base_ == 0 ? " in the file" : " in the message"));
    }
    if (at != nullptr) *at = offset();
    absl::string_view v = data_.substr(pos_, len);
    pos_ += len;
    return v;
  }

  absl::Status Skip(int wire) {
    switch (wire) {
      case kVarint: return Varint("an unknown varint field").status();
      case kFixed64:
        if (data_.size() - pos_ < 8) return Truncated("an unknown 64-bit field", offset());
        pos_ += 8;
        return absl::OkStatus();
      case kLen: return Bytes("an unknown field").status();
      case kFixed32: return Fixed32("an unknown 32-bit field").status();
    }
    return absl::InternalError("unreachable wire type");
  }

  // A known field that came with another wire type: not this kind of file.
  absl::Status WrongWire(uint32_t field, absl::string_view name, int wire, int want) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a serialized sentencepiece ModelProto: ", where_, " field ", field, " (", name,
        ") has wire type ", wire, " (", WireTypeName(wire), ") at byte ", offset(), ", want ", want,
        " (", WireTypeName(want), ")"));
  }

 private:
  absl::Status Truncated(absl::string_view what, size_t at) const {
    return absl::InvalidArgumentError(absl::StrCat("truncated file: ", where_, " ends inside ",
                                                   what, " at byte ", at));
  }

  absl::string_view data_;
  size_t pos_ = 0;
  size_t base_;
  std::string where_;
};

// Field readers: each checks the wire type and stores the value.
absl::Status ReadString(WireReader& r, uint32_t field, absl::string_view name, int wire,
                        std::string* out) {
  if (wire != kLen) return r.WrongWire(field, name, wire, kLen);
  GTP_ASSIGN_OR_RETURN(absl::string_view v, r.Bytes(name));
  out->assign(v.data(), v.size());
  return absl::OkStatus();
}

absl::Status ReadInt32(WireReader& r, uint32_t field, absl::string_view name, int wire,
                       int32_t* out) {
  if (wire != kVarint) return r.WrongWire(field, name, wire, kVarint);
  GTP_ASSIGN_OR_RETURN(uint64_t v, r.Varint(name));
  *out = static_cast<int32_t>(static_cast<uint32_t>(v));  // protobuf's int32: the low 32 bits
  return absl::OkStatus();
}

absl::Status ReadBool(WireReader& r, uint32_t field, absl::string_view name, int wire, bool* out) {
  if (wire != kVarint) return r.WrongWire(field, name, wire, kVarint);
  GTP_ASSIGN_OR_RETURN(uint64_t v, r.Varint(name));
  *out = v != 0;
  return absl::OkStatus();
}

absl::Status ParsePiece(WireReader r, SpmPiece* p) {
  while (!r.done()) {
    uint32_t field;
    int wire;
    GTP_RETURN_IF_ERROR(r.Tag(&field, &wire));
    if (field == 1) {
      GTP_RETURN_IF_ERROR(ReadString(r, field, "piece", wire, &p->piece));
    } else if (field == 2) {
      if (wire != kFixed32) return r.WrongWire(field, "score", wire, kFixed32);
      GTP_ASSIGN_OR_RETURN(uint32_t bits, r.Fixed32("score"));
      std::memcpy(&p->score, &bits, 4);
    } else if (field == 3) {
      GTP_RETURN_IF_ERROR(ReadInt32(r, field, "type", wire, &p->type));
    } else {
      GTP_RETURN_IF_ERROR(r.Skip(wire));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTrainerSpec(WireReader r, SpmModel* m) {
  while (!r.done()) {
    uint32_t field;
    int wire;
    GTP_RETURN_IF_ERROR(r.Tag(&field, &wire));
    switch (field) {
      case 3: GTP_RETURN_IF_ERROR(ReadInt32(r, field, "model_type", wire, &m->model_type)); break;
      case 4: GTP_RETURN_IF_ERROR(ReadInt32(r, field, "vocab_size", wire, &m->vocab_size)); break;
      case 24:
        GTP_RETURN_IF_ERROR(ReadBool(r, field, "treat_whitespace_as_suffix", wire,
                                     &m->treat_whitespace_as_suffix));
        break;
      case 35: GTP_RETURN_IF_ERROR(ReadBool(r, field, "byte_fallback", wire, &m->byte_fallback)); break;
      case 40: GTP_RETURN_IF_ERROR(ReadInt32(r, field, "unk_id", wire, &m->unk_id)); break;
      case 41: GTP_RETURN_IF_ERROR(ReadInt32(r, field, "bos_id", wire, &m->bos_id)); break;
      case 42: GTP_RETURN_IF_ERROR(ReadInt32(r, field, "eos_id", wire, &m->eos_id)); break;
      case 43: GTP_RETURN_IF_ERROR(ReadInt32(r, field, "pad_id", wire, &m->pad_id)); break;
      case 44: GTP_RETURN_IF_ERROR(ReadString(r, field, "unk_surface", wire, &m->unk_surface)); break;
      case 45: GTP_RETURN_IF_ERROR(ReadString(r, field, "unk_piece", wire, &m->unk_piece)); break;
      case 46: GTP_RETURN_IF_ERROR(ReadString(r, field, "bos_piece", wire, &m->bos_piece)); break;
      case 47: GTP_RETURN_IF_ERROR(ReadString(r, field, "eos_piece", wire, &m->eos_piece)); break;
      case 48: GTP_RETURN_IF_ERROR(ReadString(r, field, "pad_piece", wire, &m->pad_piece)); break;
      default: GTP_RETURN_IF_ERROR(r.Skip(wire));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseNormalizerSpec(WireReader r, SpmNormalizerSpec* n) {
  n->present = true;
  while (!r.done()) {
    uint32_t field;
    int wire;
    GTP_RETURN_IF_ERROR(r.Tag(&field, &wire));
    switch (field) {
      case 1: GTP_RETURN_IF_ERROR(ReadString(r, field, "name", wire, &n->name)); break;
      case 2:
        GTP_RETURN_IF_ERROR(
            ReadString(r, field, "precompiled_charsmap", wire, &n->precompiled_charsmap));
        break;
      case 3:
        GTP_RETURN_IF_ERROR(ReadBool(r, field, "add_dummy_prefix", wire, &n->add_dummy_prefix));
        break;
      case 4:
        GTP_RETURN_IF_ERROR(ReadBool(r, field, "remove_extra_whitespaces", wire,
                                     &n->remove_extra_whitespaces));
        break;
      case 5:
        GTP_RETURN_IF_ERROR(
            ReadBool(r, field, "escape_whitespaces", wire, &n->escape_whitespaces));
        break;
      default: GTP_RETURN_IF_ERROR(r.Skip(wire));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseSelfTest(WireReader r, std::vector<SpmSelfTestSample>* out) {
  while (!r.done()) {
    uint32_t field;
    int wire;
    GTP_RETURN_IF_ERROR(r.Tag(&field, &wire));
    if (field != 1) {
      GTP_RETURN_IF_ERROR(r.Skip(wire));
      continue;
    }
    if (wire != kLen) return r.WrongWire(field, "samples", wire, kLen);
    size_t at = 0;
    GTP_ASSIGN_OR_RETURN(absl::string_view bytes, r.Bytes("samples", &at));
    WireReader s(bytes, at, absl::StrCat(r.where(), ".samples[", out->size(), "]"));
    SpmSelfTestSample sample;
    while (!s.done()) {
      uint32_t f;
      int w;
      GTP_RETURN_IF_ERROR(s.Tag(&f, &w));
      if (f == 1) {
        GTP_RETURN_IF_ERROR(ReadString(s, f, "input", w, &sample.input));
      } else if (f == 2) {
        GTP_RETURN_IF_ERROR(ReadString(s, f, "expected", w, &sample.expected));
      } else {
        GTP_RETURN_IF_ERROR(s.Skip(w));
      }
    }
    out->push_back(std::move(sample));
  }
  return absl::OkStatus();
}

}  // namespace

std::string SpmModelTypeName(int32_t model_type) {
  switch (model_type) {
    case 1: return "UNIGRAM";
    case 2: return "BPE";
    case 3: return "WORD";
    case 4: return "CHAR";
  }
  return absl::StrCat(model_type);
}

std::string SpmPieceTypeName(int32_t type) {
  switch (type) {
    case 1: return "NORMAL";
    case 2: return "UNKNOWN";
    case 3: return "CONTROL";
    case 4: return "USER_DEFINED";
    case 5: return "UNUSED";
    case 6: return "BYTE";
  }
  return absl::StrCat(type);
}

absl::StatusOr<SpmModel> ParseSpmModel(absl::string_view bytes) {
  SpmModel m;
  WireReader r(bytes, 0, "ModelProto");
  while (!r.done()) {
    uint32_t field;
    int wire;
    GTP_RETURN_IF_ERROR(r.Tag(&field, &wire));
    if (field < 1 || field > 5) {
      GTP_RETURN_IF_ERROR(r.Skip(wire));
      continue;
    }
    static const char* const kNames[] = {"", "pieces", "trainer_spec", "normalizer_spec",
                                         "self_test_data", "denormalizer_spec"};
    if (wire != kLen) return r.WrongWire(field, kNames[field], wire, kLen);
    size_t at = 0;
    GTP_ASSIGN_OR_RETURN(absl::string_view sub, r.Bytes(kNames[field], &at));
    switch (field) {
      case 1: {
        SpmPiece p;
        GTP_RETURN_IF_ERROR(
            ParsePiece(WireReader(sub, at, absl::StrCat("ModelProto.pieces[", m.pieces.size(), "]")), &p));
        m.pieces.push_back(std::move(p));
        break;
      }
      case 2:
        m.trainer_spec_present = true;
        GTP_RETURN_IF_ERROR(ParseTrainerSpec(WireReader(sub, at, "ModelProto.trainer_spec"), &m));
        break;
      case 3:
        GTP_RETURN_IF_ERROR(
            ParseNormalizerSpec(WireReader(sub, at, "ModelProto.normalizer_spec"), &m.normalizer));
        break;
      case 4:
        GTP_RETURN_IF_ERROR(
            ParseSelfTest(WireReader(sub, at, "ModelProto.self_test_data"), &m.self_test));
        break;
      case 5:
        GTP_RETURN_IF_ERROR(ParseNormalizerSpec(WireReader(sub, at, "ModelProto.denormalizer_spec"),
                                                &m.denormalizer));
        break;
    }
  }
  return m;
}

}  // namespace gtp::data::tokenizer_internal
