#include "data/tokenizer/sentencepiece_tokenizer.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status.h"
#include "data/tokenizer/internal/json.h"
#include "data/tokenizer/internal/unicode.h"

namespace gtp::data {

using tokenizer_internal::SpmModel;
using tokenizer_internal::SpmPieceType;

namespace {

constexpr absl::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"
constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
constexpr size_t kMaxPieceBytes = 8000;  // sentencepiece refuses longer pieces
constexpr float kUnkPenalty = 10.0f;     // Unigram: an uncovered character's cost below the lowest score

// sentencepiece's OneCharLen: a character's length from its first byte alone
// (the normalizer has already made the text valid UTF-8), cut at the end.
size_t CharLen(absl::string_view text, size_t pos) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return std::min<size_t>(kLen[static_cast<uint8_t>(text[pos]) >> 4], text.size() - pos);
}

// "<0x41>" → 0x41; -1 for anything else (sentencepiece's PieceToByte: upper-case hex).
int PieceToByte(absl::string_view piece) {
  if (piece.size() != 6 || !absl::StartsWith(piece, "<0x") || piece[5] != '>') return -1;
  int v = 0;
  for (char c : piece.substr(3, 2)) {
    if (c >= '0' && c <= '9') {
      v = v * 16 + (c - '0');
    } else if (c >= 'A' && c <= 'F') {
      v = v * 16 + (c - 'A' + 10);
    } else {
      return -1;
    }
  }
  return v;
}

bool IsModelPiece(SpmPieceType t) {
  return t == SpmPieceType::kNormal || t == SpmPieceType::kUserDefined || t == SpmPieceType::kUnused;
}

// Appends `bytes` as sentencepiece's decoder does: each valid UTF-8 character
// as it is, each byte that starts none U+FFFD.
void AppendBytes(absl::string_view bytes, std::string* out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const tokenizer_internal::Utf8Char c = tokenizer_internal::DecodeUtf8(bytes, pos);
    if (c.code_point < 0) {
      out->append(kReplacement.data(), kReplacement.size());
      pos += 1;
    } else {
      out->append(bytes.data() + pos, c.length);
      pos += c.length;
    }
  }
}

}  // namespace

absl::StatusOr<SentencePieceTokenizer> SentencePieceTokenizer::Load(const std::string& path) {
  GTP_ASSIGN_OR_RETURN(std::string bytes, tokenizer_internal::ReadFile(path));
  absl::StatusOr<SentencePieceTokenizer> tok = FromString(bytes);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(), absl::StrCat(path, ": ", tok.status().message()));
  }
  return tok;
}

absl::StatusOr<SentencePieceTokenizer> SentencePieceTokenizer::FromString(
    absl::string_view model_proto) {
  if (absl::StartsWith(model_proto, "{")) {  // field 15 as a start-group: never a ModelProto
    return absl::InvalidArgumentError(
        "this is JSON, not a SentencePiece model (a serialized ModelProto): a Hugging Face "
        "tokenizer.json loads with --tokenizer_json / data.tokenizer_json");
  }
  if (model_proto.empty()) {
    return absl::InvalidArgumentError("the file is empty: a tokenizer.model holds a serialized "
                                      "sentencepiece ModelProto");
  }
  GTP_ASSIGN_OR_RETURN(SpmModel model, tokenizer_internal::ParseSpmModel(model_proto));
  SentencePieceTokenizer tok;
  GTP_RETURN_IF_ERROR(tok.Build(std::move(model)));
  return tok;
}

absl::Status SentencePieceTokenizer::Build(SpmModel m) {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (m.pieces.empty()) {
    return bad("ModelProto has no pieces (field 1): not a trained SentencePiece model, or the "
               "file was cut short");
  }
  if (m.pieces.size() > static_cast<size_t>(INT32_MAX)) return bad("too many pieces");
  if (!m.trainer_spec_present) {
    return bad("ModelProto has ", m.pieces.size(), " pieces but no trainer_spec (field 2), which "
               "every trained model has: the file was cut short");
  }
  if (m.model_type == 3 || m.model_type == 4) {
    return bad("trainer_spec.model_type is ", tokenizer_internal::SpmModelTypeName(m.model_type),
               ": only BPE (Llama-2, Mistral) and UNIGRAM (T5, Gemma-style) SentencePiece models "
               "are supported; convert the model to a tokenizer.json, or retrain it as BPE");
  }
  if (m.model_type != 1 && m.model_type != 2) {
    return bad("trainer_spec.model_type is ", m.model_type,
               ", not a SentencePiece model type (UNIGRAM=1, BPE=2, WORD=3, CHAR=4)");
  }
  model_type_ = m.model_type == 2 ? ModelType::kBpe : ModelType::kUnigram;
  if (m.treat_whitespace_as_suffix) {
    return bad("trainer_spec.treat_whitespace_as_suffix is true (\"▁\" after words, not before): "
               "not supported; models whose pieces start with \"▁\" are");
  }
  if (m.denormalizer.present && !m.denormalizer.precompiled_charsmap.empty()) {
    return bad("denormalizer_spec has decoding rules (",
               m.denormalizer.precompiled_charsmap.size(), " bytes of precompiled_charsmap",
               m.denormalizer.name.empty() ? "" : absl::StrCat(", \"", m.denormalizer.name, "\""),
               "): not supported");
  }
  byte_fallback_ = m.byte_fallback;
  std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
  int32_t unk = -1;
  min_score_ = FLT_MAX;
  max_score_ = FLT_MIN;  // sentencepiece's starting value (a positive number), kept for equal scores
  bool has_unused = false;
  pieces_.resize(m.pieces.size());
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    tokenizer_internal::SpmPiece& sp = m.pieces[i];
    const int32_t id = static_cast<int32_t>(i);
    auto name = [&] { return absl::StrCat("piece ", id, " (\"", absl::Utf8SafeCHexEscape(sp.piece), "\")"); };
    if (sp.piece.empty()) return bad("piece ", id, " is empty");
    if (sp.piece.size() >= kMaxPieceBytes) {
      return bad("piece ", id, " is ", sp.piece.size(), " bytes long; SentencePiece allows fewer than ",
                 kMaxPieceBytes);
    }
    if (sp.piece.find('\0') != std::string::npos) return bad(name(), " holds a NUL byte");
    if (sp.type < 1 || sp.type > 6) {
      return bad(name(), " has type ", sp.type,
                 ", not one of NORMAL=1, UNKNOWN=2, CONTROL=3, USER_DEFINED=4, UNUSED=5, BYTE=6");
    }
    const auto type = static_cast<SpmPieceType>(sp.type);
    if (std::isnan(sp.score)) return bad(name(), " has a NaN score");
    if (const std::optional<int32_t> first = TokenId(sp.piece)) {
      return bad(name(), " appears twice: ids ", *first, " and ", id);
    }
    auto& map = IsModelPiece(type) ? model_pieces_ : reserved_pieces_;
    map.emplace(sp.piece, id);
    if (type == SpmPieceType::kUnknown) {
      if (unk >= 0) return bad("two UNKNOWN pieces: ids ", unk, " and ", id, "; a model has one");
      unk = id;
    }
    if (type == SpmPieceType::kUserDefined) {
      user_defined_[static_cast<uint8_t>(sp.piece[0])].push_back(sp.piece);
    }
    if (type == SpmPieceType::kUnused) has_unused = true;
    if (type == SpmPieceType::kNormal) {
      min_score_ = std::min(min_score_, sp.score);
      max_score_ = std::max(max_score_, sp.score);
    }
    if (type == SpmPieceType::kByte) {
      if (!m.byte_fallback) {
        return bad(name(), " is a BYTE piece but trainer_spec.byte_fallback is false");
      }
      const int b = PieceToByte(sp.piece);
      if (b < 0) return bad(name(), " is a BYTE piece but not spelled <0xNN> (two upper-case hex digits)");
      byte_id_[b] = id;
    }
    pieces_[i] = Piece{std::move(sp.piece), sp.score, type};
  }
  if (unk < 0) {
    return bad("no piece has type UNKNOWN: a SentencePiece model needs its <unk> piece");
  }
  unk_id_ = unk;
  if (byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      if (byte_id_[b] < 0) {
        return bad("trainer_spec.byte_fallback is true but there is no BYTE piece ",
                   absl::StrFormat("<0x%02X>", b), " (a model with byte fallback has all 256)");
      }
    }
  }
  const int32_t n = vocab_size();
  const std::pair<const char*, int32_t> ids[] = {
      {"unk_id", m.unk_id}, {"bos_id", m.bos_id}, {"eos_id", m.eos_id}, {"pad_id", m.pad_id}};
  for (const auto& [field, v] : ids) {
    if (v < -1 || v >= n) {
      return bad("trainer_spec.", field, " is ", v, ", outside the ", n, " pieces (-1: none)");
    }
  }
  if (m.unk_id != unk_id_) {
    return bad("trainer_spec.unk_id is ", m.unk_id, " but the UNKNOWN piece is id ", unk_id_);
  }
  for (auto& group : user_defined_) {
    std::sort(group.begin(), group.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  }
  // sentencepiece's bos_id()/eos_id()/pad_id(): the CONTROL piece of that name.
  auto control = [&](const std::string& piece, const char* dflt) -> std::optional<int32_t> {
    const std::optional<int32_t> id = TokenId(piece.empty() ? dflt : piece);
    if (id && pieces_[*id].type == SpmPieceType::kControl) return id;
    return std::nullopt;
  };
  bos_id_ = control(m.bos_piece, "<s>");
  eos_id_ = control(m.eos_piece, "</s>");
  pad_id_ = control(m.pad_piece, "<pad>");
  unk_surface_ = m.unk_surface;
  // The normalizer.
  const tokenizer_internal::SpmNormalizerSpec& ns = m.normalizer;
  normalizer_name_ = ns.name;
  add_dummy_prefix_ = ns.add_dummy_prefix;
  remove_extra_whitespaces_ = ns.remove_extra_whitespaces;
  escape_whitespaces_ = ns.escape_whitespaces;
  if (!ns.precompiled_charsmap.empty()) {
    absl::StatusOr<tokenizer_internal::SpmCharsMap> cm =
        tokenizer_internal::SpmCharsMap::Load(ns.precompiled_charsmap);
    if (!cm.ok()) return cm.status();
    charsmap_ = std::make_unique<tokenizer_internal::SpmCharsMap>(*std::move(cm));
  }
  if (model_type_ == ModelType::kBpe) {
    // Merges never cross a "▁" that follows another character when no piece
    // holds one there (and no UNUSED piece makes the splits of its
    // resegmentation depend on other words).
    split_at_spaces_ = !has_unused;
    for (const auto& [piece_string, id] : model_pieces_) {
      const absl::string_view piece = piece_string;
      for (size_t k = kSpace.size(); split_at_spaces_ && k + kSpace.size() <= piece.size(); ++k) {
        if (piece.compare(k, kSpace.size(), kSpace) == 0 &&
            piece.compare(k - kSpace.size(), kSpace.size(), kSpace) != 0) {
          split_at_spaces_ = false;
        }
      }
    }
  } else {
    // Unigram: a byte trie over the model's pieces.
    trie_id_.assign(1, -1);
    for (int32_t id = 0; id < n; ++id) {
      if (!IsModelPiece(pieces_[id].type)) continue;
      size_t node = 0;
      for (unsigned char c : pieces_[id].text) {
        const uint64_t key = (static_cast<uint64_t>(node) << 8) | c;
        auto it = trie_next_.find(key);
        if (it == trie_next_.end()) {
          it = trie_next_.emplace(key, static_cast<int32_t>(trie_id_.size())).first;
          trie_id_.push_back(-1);
        }
        node = it->second;
      }
      trie_id_[node] = id;
    }
  }
  return RunSelfTest(m);
}

// The samples trainers may store in the file (self_test_data): sentencepiece
// refuses to load a model that does not reproduce them, and so do we.
absl::Status SentencePieceTokenizer::RunSelfTest(const SpmModel& m) const {
  for (size_t i = 0; i < m.self_test.size(); ++i) {
    const auto& s = m.self_test[i];
    const std::string got = absl::StrJoin(EncodeAsPieces(s.input), " ");
    if (got == s.expected) continue;
    if (model_type_ == ModelType::kUnigram) {
      // sentencepiece accepts a Unigram segmentation of the same total score.
      auto score = [&](absl::string_view pieces) {
        double total = 0;
        for (absl::string_view p : absl::StrSplit(pieces, ' ')) {
          const int32_t id = PieceToId(p);
          if (id == unk_id_) {
            total += min_score_ - kUnkPenalty;
          } else if (pieces_[id].type == SpmPieceType::kUserDefined) {
            total += p.size() * max_score_ - 0.1;
          } else {
            total += pieces_[id].score;
          }
        }
        return total;
      };
      if (std::abs(score(got) - score(s.expected)) <= 1e-7) continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "self_test_data sample ", i, " (\"", absl::Utf8SafeCHexEscape(s.input), "\") encodes as \"",
        absl::Utf8SafeCHexEscape(got), "\" but the file expects \"", absl::Utf8SafeCHexEscape(s.expected),
        "\": this model needs something this tokenizer does not do"));
  }
  return absl::OkStatus();
}

std::optional<int32_t> SentencePieceTokenizer::TokenId(absl::string_view piece) const {
  if (auto it = reserved_pieces_.find(piece); it != reserved_pieces_.end()) return it->second;
  if (auto it = model_pieces_.find(piece); it != model_pieces_.end()) return it->second;
  return std::nullopt;
}

std::optional<int32_t> SentencePieceTokenizer::SpecialTokenId(absl::string_view piece) const {
  const std::optional<int32_t> id = TokenId(piece);
  if (!id) return std::nullopt;
  const SpmPieceType t = pieces_[*id].type;
  if (t == SpmPieceType::kControl || t == SpmPieceType::kUnknown || t == SpmPieceType::kUserDefined) {
    return id;
  }
  return std::nullopt;
}

const std::string& SentencePieceTokenizer::IdToPiece(int32_t id) const {
  static const std::string* const kNone = new std::string();
  return id >= 0 && id < vocab_size() ? pieces_[id].text : *kNone;
}

int32_t SentencePieceTokenizer::PieceToId(absl::string_view piece) const {
  const std::optional<int32_t> id = TokenId(piece);
  return id ? *id : unk_id_;
}

size_t SentencePieceTokenizer::MatchUserDefined(absl::string_view text) const {
  if (text.empty()) return 0;
  for (const std::string& p : user_defined_[static_cast<uint8_t>(text[0])]) {  // longest first
    if (absl::StartsWith(text, p)) return p.size();
  }
  return 0;
}

std::string SentencePieceTokenizer::Normalize(absl::string_view text) const {
  std::string out;
  if (text.empty()) return out;
  // One step of sentencepiece's NormalizePrefix: a user-defined piece as it
  // is, else the longest rule of the charsmap, else one character (an
  // invalid byte reads as U+FFFD).
  auto step = [&](size_t pos, absl::string_view* piece) -> size_t {
    const absl::string_view rest = text.substr(pos);
    if (const size_t n = MatchUserDefined(rest)) {
      *piece = rest.substr(0, n);
      return n;
    }
    size_t n = 0;
    if (charsmap_ != nullptr && charsmap_->LongestMatch(rest, &n, piece)) return n;
    const tokenizer_internal::Utf8Char c = tokenizer_internal::DecodeUtf8(text, pos);
    if (c.code_point < 0) {
      *piece = kReplacement;
      return 1;
    }
    *piece = rest.substr(0, c.length);
    return c.length;
  };
  const absl::string_view space = escape_whitespaces_ ? kSpace : " ";
  size_t pos = 0;
  absl::string_view piece;
  if (remove_extra_whitespaces_) {
    while (pos < text.size()) {
      const size_t n = step(pos, &piece);
      if (piece != " ") break;
      pos += n;
    }
    if (pos == text.size()) return out;
  }
  out.reserve(text.size() * 3);
  if (add_dummy_prefix_) out.append(space.data(), space.size());
  bool prev_space = remove_extra_whitespaces_;
  while (pos < text.size()) {
    pos += step(pos, &piece);
    while (prev_space && absl::ConsumePrefix(&piece, " ")) {
    }
    if (!piece.empty()) {
      for (char c : piece) {
        if (c == ' ' && escape_whitespaces_) {
          out.append(kSpace.data(), kSpace.size());
        } else {
          out.push_back(c);
        }
      }
      prev_space = absl::EndsWith(piece, " ");
    }
    if (!remove_extra_whitespaces_) prev_space = false;
  }
  if (remove_extra_whitespaces_) {
    while (absl::EndsWith(out, space)) out.resize(out.size() - space.size());
  }
  return out;
}

void SentencePieceTokenizer::EncodeBpe(absl::string_view normalized, size_t base,
                                       std::vector<Span>* out) const {
  if (!split_at_spaces_) return EncodeBpeChunk(normalized, base, out);
  size_t begin = 0;
  for (size_t k = kSpace.size(); k + kSpace.size() <= normalized.size(); ++k) {
    if (normalized.compare(k, kSpace.size(), kSpace) == 0 &&
        normalized.compare(k - kSpace.size(), kSpace.size(), kSpace) != 0) {
      EncodeBpeChunk(normalized.substr(begin, k - begin), base + begin, out);
      begin = k;
    }
  }
  EncodeBpeChunk(normalized.substr(begin), base + begin, out);
}

// sentencepiece's bpe::Model::Encode on one chunk: symbols are characters
// (user-defined pieces whole and frozen); a max-heap of adjacent pairs that
// spell a model piece, by score, the leftmost first among equals; a pair is
// stale once either side has changed (its length no longer adds up).
void SentencePieceTokenizer::EncodeBpeChunk(absl::string_view text, size_t base,
                                            std::vector<Span>* out) const {
  if (text.empty()) return;
  struct Symbol {
    int prev, next;
    bool freeze;
    uint32_t begin, length;
  };
  struct Pair {
    int left, right;
    float score;
    uint32_t length;
  };
  struct Lower {  // priority order: higher score, then smaller left
    bool operator()(const Pair& a, const Pair& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < text.size();) {
    size_t n = MatchUserDefined(text.substr(pos));
    const bool freeze = n > 0;
    if (!freeze) n = CharLen(text, pos);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back(Symbol{index - 1, pos + n < text.size() ? index + 1 : -1, freeze,
                             static_cast<uint32_t>(pos), static_cast<uint32_t>(n)});
    pos += n;
  }
  auto view = [&](uint32_t begin, uint32_t length) { return text.substr(begin, length); };
  std::priority_queue<Pair, std::vector<Pair>, Lower> agenda;
  // UNUSED pieces: the pair that last made each (resegmented at the end).
  absl::flat_hash_map<absl::string_view, std::pair<absl::string_view, absl::string_view>> made_of;
  auto maybe_add = [&](int left, int right) {
    if (left < 0 || right < 0 || symbols[left].freeze || symbols[right].freeze) return;
    const uint32_t length = symbols[left].length + symbols[right].length;
    const absl::string_view merged = view(symbols[left].begin, length);
    const auto it = model_pieces_.find(merged);
    if (it == model_pieces_.end()) return;
    const Piece& p = pieces_[it->second];
    agenda.push(Pair{left, right, p.score, length});
    if (p.type == SpmPieceType::kUnused) {
      made_of[merged] = {view(symbols[left].begin, symbols[left].length),
                         view(symbols[right].begin, symbols[right].length)};
    }
  };
  for (size_t i = 1; i < symbols.size(); ++i) maybe_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol& l = symbols[top.left];
    Symbol& r = symbols[top.right];
    if (l.length == 0 || r.length == 0 || l.length + r.length != top.length) continue;
    l.length += r.length;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = top.left;
    r.length = 0;
    maybe_add(l.prev, top.left);
    maybe_add(top.left, l.next);
  }
  // An UNUSED piece is split back into the pair that made it, recursively.
  auto emit = [&](auto&& self, absl::string_view w) -> void {
    const int32_t id = PieceToId(w);
    if (pieces_[id].type == SpmPieceType::kUnused) {
      if (auto it = made_of.find(w); it != made_of.end()) {
        self(self, it->second.first);
        self(self, it->second.second);
        return;
      }
    }
    out->push_back(Span{static_cast<uint32_t>(base + (w.data() - text.data())),
                        static_cast<uint32_t>(w.size()), id});
  };
  for (int i = 0; i >= 0; i = symbols[i].next) emit(emit, view(symbols[i].begin, symbols[i].length));
}

// sentencepiece's unigram::Model::EncodeOptimized: for each character
// boundary, the best path ending there; the pieces starting at each boundary
// come from the trie, shorter first, a later candidate replacing an earlier
// only when strictly better. Scores add up in double and are kept in float,
// as there; a user-defined piece scores (its length in bytes × the highest
// NORMAL score − 0.1), a boundary no one-character piece leaves gets an
// unknown node of (lowest NORMAL score − 10).
void SentencePieceTokenizer::EncodeUnigram(absl::string_view text, std::vector<Span>* out) const {
  struct Best {
    int32_t id = -1;
    float score = 0;
    int64_t starts_at = -1;
  };
  const size_t size = text.size();
  std::vector<Best> best(size + 1);
  const float unk_score = min_score_ - kUnkPenalty;
  for (size_t start = 0; start < size;) {
    const float till_here = best[start].score;
    const size_t mblen = CharLen(text, start);
    bool has_single = false;
    size_t node = 0;
    for (size_t pos = start; pos < size;) {
      const auto it = trie_next_.find((static_cast<uint64_t>(node) << 8) |
                                      static_cast<uint8_t>(text[pos]));
      if (it == trie_next_.end()) break;
      node = it->second;
      ++pos;
      const int32_t id = trie_id_[node];
      if (id < 0 || pieces_[id].type == SpmPieceType::kUnused) continue;
      const size_t length = pos - start;
      const double score = pieces_[id].type == SpmPieceType::kUserDefined
                               ? static_cast<float>(length) * max_score_ - 0.1
                               : static_cast<double>(pieces_[id].score);
      const double candidate = score + till_here;
      Best& target = best[pos];
      if (target.starts_at == -1 || candidate > target.score) {
        target = Best{id, static_cast<float>(candidate), static_cast<int64_t>(start)};
      }
      if (length == mblen) has_single = true;
    }
    if (!has_single) {
      Best& target = best[start + mblen];
      const float candidate = unk_score + till_here;
      if (target.starts_at == -1 || candidate > target.score) {
        target = Best{unk_id_, candidate, static_cast<int64_t>(start)};
      }
    }
    start += mblen;
  }
  const size_t first = out->size();
  for (size_t end = size; end > 0;) {
    const Best& b = best[end];
    out->push_back(Span{static_cast<uint32_t>(b.starts_at), static_cast<uint32_t>(end - b.starts_at), b.id});
    end = static_cast<size_t>(b.starts_at);
  }
  std::reverse(out->begin() + first, out->end());
}

std::vector<SentencePieceTokenizer::Span> SentencePieceTokenizer::EncodeNormalized(
    absl::string_view text, std::string* normalized) const {
  *normalized = Normalize(text);
  std::vector<Span> spans;
  if (normalized->empty()) return spans;
  if (model_type_ == ModelType::kBpe) {
    EncodeBpe(*normalized, 0, &spans);
  } else {
    EncodeUnigram(*normalized, &spans);
  }
  return spans;
}

// sentencepiece's PopulateSentencePieceText: an unknown piece becomes its
// bytes' <0xNN> pieces (byte_fallback) or, with the unknown pieces right
// before it, one unk_id. emit(id, piece text) for each resulting token.
template <typename Emit>
void SentencePieceTokenizer::EmitIds(absl::string_view normalized, const std::vector<Span>& spans,
                                     Emit emit) const {
  bool prev_unk = false;
  std::string run;  // the text of the pending unknown run (no byte fallback)
  for (const Span& s : spans) {
    const absl::string_view w = normalized.substr(s.begin, s.length);
    const bool unk = pieces_[s.id].type == SpmPieceType::kUnknown;
    if (!unk && !run.empty()) {
      emit(unk_id_, run);
      run.clear();
    }
    if (unk && byte_fallback_) {
      for (unsigned char b : w) emit(byte_id_[b], pieces_[byte_id_[b]].text);
    } else if (unk) {
      if (!prev_unk && !run.empty()) {
        emit(unk_id_, run);
        run.clear();
      }
      run.append(w.data(), w.size());
    } else {
      emit(s.id, pieces_[s.id].type == SpmPieceType::kControl ? absl::string_view(pieces_[s.id].text) : w);
    }
    prev_unk = unk;
  }
  if (!run.empty()) emit(unk_id_, run);
}

void SentencePieceTokenizer::EncodeAppend(absl::string_view text, std::vector<int32_t>* out) const {
  std::string normalized;
  const std::vector<Span> spans = EncodeNormalized(text, &normalized);
  EmitIds(normalized, spans, [&](int32_t id, absl::string_view) { out->push_back(id); });
}

std::vector<int32_t> SentencePieceTokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> ids;
  EncodeAppend(text, &ids);
  return ids;
}

std::vector<std::string> SentencePieceTokenizer::EncodeAsPieces(absl::string_view text) const {
  std::string normalized;
  const std::vector<Span> spans = EncodeNormalized(text, &normalized);
  std::vector<std::string> pieces;
  EmitIds(normalized, spans,
          [&](int32_t, absl::string_view piece) { pieces.emplace_back(piece.data(), piece.size()); });
  return pieces;
}

absl::StatusOr<std::string> SentencePieceTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string text, bytes;
  bool at_start = true;       // a leading "▁" may still be dropped
  bool dropped_space = false;  // the last non-byte piece dropped one
  const bool strips = add_dummy_prefix_ || remove_extra_whitespaces_;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is not in the vocabulary (size ", vocab_size(), ")"));
    }
    const Piece& p = pieces_[id];
    if (p.type == SpmPieceType::kByte) {
      bytes.push_back(static_cast<char>(PieceToByte(p.text)));
      continue;
    }
    AppendBytes(bytes, &text);
    bytes.clear();
    if (dropped_space || !text.empty()) at_start = false;
    dropped_space = false;
    if (p.type == SpmPieceType::kControl) continue;
    if (p.type == SpmPieceType::kUnknown) {
      text += unk_surface_;
      continue;
    }
    absl::string_view piece = p.text;
    if (at_start && strips) {
      dropped_space = absl::ConsumePrefix(&piece, kSpace);
      // Removing extra whitespace drops every leading space, not just the first.
      if (remove_extra_whitespaces_) dropped_space = false;
    }
    for (size_t k = 0; k < piece.size();) {
      if (piece.compare(k, kSpace.size(), kSpace) == 0) {
        text.push_back(' ');
        k += kSpace.size();
      } else {
        text.push_back(piece[k++]);
      }
    }
  }
  AppendBytes(bytes, &text);
  return text;
}

std::string SentencePieceTokenizer::Summary() const {
  int control = 0, bytes = 0, user = 0, unused = 0;
  for (const Piece& p : pieces_) {
    control += p.type == SpmPieceType::kControl;
    bytes += p.type == SpmPieceType::kByte;
    user += p.type == SpmPieceType::kUserDefined;
    unused += p.type == SpmPieceType::kUnused;
  }
  std::string normalizer = normalizer_name_.empty() ? "(unnamed)" : normalizer_name_;
  if (charsmap_ == nullptr) {
    absl::StrAppend(&normalizer, " (no rules)");
  } else {
    absl::StrAppend(&normalizer, " (", charsmap_->num_units(), " rule units)");
  }
  return absl::StrCat(
      "SentencePiece ", model_type_ == ModelType::kBpe ? "BPE" : "Unigram", ", ", vocab_size(),
      " pieces (", control, " control, ", bytes, " byte, ", user, " user-defined, ", unused,
      " unused), ", byte_fallback_ ? "byte fallback" : "no byte fallback", "; normalizer ",
      normalizer, add_dummy_prefix_ ? ", dummy prefix" : ", no dummy prefix",
      remove_extra_whitespaces_ ? ", extra whitespace removed" : ", whitespace kept",
      escape_whitespaces_ ? "" : ", spaces not escaped");
}

}  // namespace gtp::data
