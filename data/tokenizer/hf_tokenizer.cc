#include "data/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/status.h"
#include "data/tokenizer/internal/json.h"
#include "data/tokenizer/internal/nfc.h"
#include "data/tokenizer/internal/unicode.h"
#include "data/tokenizer/pretokenizer.h"

namespace gtp::data {
namespace {

using tokenizer_internal::AppendUtf8;
using tokenizer_internal::CharClass;
using tokenizer_internal::ClassifyCodePoint;
using tokenizer_internal::DecodeUtf8;
using tokenizer_internal::HfConfig;
using tokenizer_internal::HfDecoder;
using tokenizer_internal::HfNormalizer;
using tokenizer_internal::HfPreTokenizer;
using tokenizer_internal::PrependScheme;

using tokenizer_internal::BpePairKey;

std::string ByteFallbackToken(int b) { return absl::StrFormat("<0x%02X>", b); }

// The GPT-2 byte-alphabet spelling of `bytes` (ByteLevel's output).
std::string ByteSpell(absl::string_view bytes) {
  std::string out;
  for (char c : bytes) AppendUtf8(Gpt2ByteToCodePoint(static_cast<uint8_t>(c)), &out);
  return out;
}

bool IsSpace(absl::string_view text, size_t pos, size_t* len) {
  tokenizer_internal::Utf8Char c = DecodeUtf8(text, pos);
  *len = c.length;
  return ClassifyCodePoint(c.code_point) == CharClass::kSpace;
}

// The start of the character that ends at `pos` > 0 (pos - 1 for an invalid byte).
size_t PrevCharStart(absl::string_view text, size_t pos) {
  for (size_t back = 2; back <= 4 && back <= pos; ++back) {
    if (DecodeUtf8(text, pos - back).length == back) return pos - back;
  }
  return pos - 1;
}

// The length of the character starting at `pos` (1 for an invalid byte).
size_t CharLen(absl::string_view text, size_t pos) { return DecodeUtf8(text, pos).length; }

using tokenizer_internal::ReadFile;

}  // namespace

absl::StatusOr<HfTokenizer> HfTokenizer::Load(const std::string& tokenizer_json_path) {
  GTP_ASSIGN_OR_RETURN(std::string json, ReadFile(tokenizer_json_path));
  absl::StatusOr<HfTokenizer> tok = FromString(json);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat(tokenizer_json_path, ": ", tok.status().message()));
  }
  return tok;
}

absl::StatusOr<HfTokenizer> HfTokenizer::FromString(absl::string_view tokenizer_json) {
  GTP_ASSIGN_OR_RETURN(tokenizer_internal::HfConfig config,
                       tokenizer_internal::ParseHfConfig(tokenizer_json));
  HfTokenizer t;
  GTP_RETURN_IF_ERROR(t.Build(std::move(config)));
  return t;
}

absl::Status HfTokenizer::Build(HfConfig c) {
  normalizers_ = std::move(c.normalizers);
  pre_tokenizers_ = std::move(c.pre_tokenizers);
  decoders_ = std::move(c.decoders);
  added_ = std::move(c.added_tokens);
  ignore_merges_ = c.ignore_merges;
  fuse_unk_ = c.fuse_unk;
  byte_level_ =
      !pre_tokenizers_.empty() && pre_tokenizers_.back().kind == HfPreTokenizer::Kind::kByteLevel;

  auto grow = [&](int32_t id) {
    if (static_cast<size_t>(id) >= id_kind_.size()) {
      id_kind_.resize(static_cast<size_t>(id) + 1, IdKind::kAbsent);
      id_token_.resize(id_kind_.size());
      id_added_.resize(id_kind_.size(), -1);
    }
  };
  token_to_id_.reserve(c.vocab.size());
  for (auto& [token, id] : c.vocab) {
    grow(id);
    if (id_kind_[id] != IdKind::kAbsent) {
      return absl::InvalidArgumentError(absl::StrCat("model.vocab: id ", id, " appears twice (\"",
                                                     id_token_[id], "\" and \"", token, "\")"));
    }
    if (!token_to_id_.emplace(token, id).second) {
      return absl::InvalidArgumentError(absl::StrCat("model.vocab: \"", token, "\" appears twice"));
    }
    id_kind_[id] = IdKind::kModel;
    id_token_[id] = std::move(token);
  }
  // Hugging Face's `tokenizers` does not read an added token's id from the
  // file: loading adds the tokens in file order, a token in model.vocab keeps
  // its vocab id, any other takes vocab.size() or, once an added id reaches
  // that, the largest added id so far + 1 (and only warns when that differs
  // from the file). A file whose ids disagree with that numbering would give
  // other ids here than in transformers, so it is refused.
  const int64_t vocab_count = static_cast<int64_t>(c.vocab.size());
  int64_t max_added = -1;
  for (size_t i = 0; i < added_.size(); ++i) {
    const tokenizer_internal::HfAddedToken& a = added_[i];
    const std::string where =
        absl::StrCat("added_tokens[", i, "] (\"", a.content, "\", id ", a.id, ")");
    grow(a.id);
    if (id_kind_[a.id] == IdKind::kAdded) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the id appears twice"));
    }
    if (id_kind_[a.id] == IdKind::kModel && id_token_[a.id] != a.content) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": model.vocab gives id ", a.id, " to \"", id_token_[a.id], "\""));
    }
    if (auto it = token_to_id_.find(a.content); it != token_to_id_.end() && it->second != a.id) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": model.vocab gives it id ", it->second));
    }
    if (!token_to_id_.contains(a.content) && !added_to_id_.contains(a.content)) {
      const int64_t hf_id =
          max_added < 0 ? vocab_count
                        : (max_added >= vocab_count || vocab_count == 0 ? max_added + 1 : vocab_count);
      if (a.id != hf_id) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": not in model.vocab, so Hugging Face's tokenizers gives it id ", hf_id,
            " (the next id after the vocabulary's ", vocab_count,
            " tokens and the added tokens before it), not ", a.id,
            "; renumber added_tokens from ", hf_id, " in file order"));
      }
    }
    if (!added_to_id_.emplace(a.content, a.id).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the content appears twice"));
    }
    id_kind_[a.id] = IdKind::kAdded;
    id_added_[a.id] = static_cast<int32_t>(i);
    max_added = std::max<int64_t>(max_added, a.id);
  }

  if (c.unk_token) {
    auto it = token_to_id_.find(*c.unk_token);
    if (it == token_to_id_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.unk_token: \"", *c.unk_token, "\" is not in model.vocab"));
    }
    unk_id_ = it->second;
  }
  // Every character must map to some token: HF drops one that maps to none.
  std::fill(std::begin(byte_fallback_id_), std::end(byte_fallback_id_), -1);
  for (int b = 0; b < 256; ++b) {
    if (c.byte_fallback) {
      auto it = token_to_id_.find(ByteFallbackToken(b));
      if (it != token_to_id_.end()) {
        byte_fallback_id_[b] = it->second;
      } else if (unk_id_ < 0 && !byte_level_) {
        return absl::InvalidArgumentError(
            absl::StrCat("model.byte_fallback: model.vocab has no \"", ByteFallbackToken(b),
                         "\" and there is no unk_token: HF would drop characters with that byte"));
      }
    }
    if (byte_level_) {
      std::string spelled;
      AppendUtf8(Gpt2ByteToCodePoint(static_cast<uint8_t>(b)), &spelled);
      auto it = token_to_id_.find(spelled);
      if (it == token_to_id_.end() && unk_id_ < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("model.vocab: no ByteLevel token for byte ", b, " (\"", spelled,
                         "\") and no unk_token: HF would drop that byte"));
      }
      byte_id_[b] = it == token_to_id_.end() ? unk_id_ : it->second;
    }
  }
  if (!byte_level_ && !c.byte_fallback && unk_id_ < 0) {
    return absl::InvalidArgumentError(
        "model: no ByteLevel pre-tokenizer, no byte_fallback and no unk_token: HF would drop "
        "every character that is not in model.vocab");
  }

  merges_.reserve(c.merges.size());
  for (size_t rank = 0; rank < c.merges.size(); ++rank) {
    const auto& [a, b] = c.merges[rank];
    auto ia = token_to_id_.find(a), ib = token_to_id_.find(b),
         iab = token_to_id_.find(absl::StrCat(a, b));
    if (ia == token_to_id_.end() || ib == token_to_id_.end() || iab == token_to_id_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("model.merges[", rank, "]: [\"", a, "\", \"",
                                                     b, "\"] names a token not in model.vocab"));
    }
    // A repeated pair keeps its first rank, as HF does.
    merges_.emplace(BpePairKey(ia->second, ib->second),
                    tokenizer_internal::BpeMerge{static_cast<int32_t>(rank), iab->second});
  }

  GTP_RETURN_IF_ERROR(CheckDecoder(c.byte_fallback));
  return BuildMatchers();
}

// The decoder must undo what the encoder does: map ByteLevel characters and
// <0xNN> tokens back to bytes, and strip a leading space only where the
// encoder put a prefix (Prepend, Metaspace).
absl::Status HfTokenizer::CheckDecoder(bool byte_fallback) {
  for (const HfNormalizer& n : normalizers_)
    prefix_every_ |= n.kind == HfNormalizer::Kind::kPrepend;
  for (const HfPreTokenizer& p : pre_tokenizers_) {
    if (p.kind != HfPreTokenizer::Kind::kMetaspace) continue;
    prefix_every_ |= p.prepend == PrependScheme::kAlways;
    prefix_first_ |= p.prepend == PrependScheme::kFirst;
  }
  bool byte_level = false, bytes = false;
  for (size_t i = 0; i < decoders_.size(); ++i) {
    const HfDecoder& d = decoders_[i];
    byte_level |= d.kind == HfDecoder::Kind::kByteLevel;
    bytes |= d.kind == HfDecoder::Kind::kByteFallback;
    const bool strips =
        (d.kind == HfDecoder::Kind::kStrip && d.start > 0) ||
        (d.kind == HfDecoder::Kind::kMetaspace && d.prepend != PrependScheme::kNever);
    if (strips && !prefix_every_ && !prefix_first_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "decoder: its step ", i, " (", d.kind == HfDecoder::Kind::kStrip ? "Strip" : "Metaspace",
          ") removes a leading space that no normalizer or pre-tokenizer adds"));
    }
  }
  if (byte_level_ && !byte_level) {
    return absl::InvalidArgumentError(
        "decoder: has no ByteLevel step, so it cannot undo the ByteLevel pre-tokenizer");
  }
  if (byte_fallback && !bytes) {
    return absl::InvalidArgumentError(
        "decoder: has no ByteFallback step, so model.byte_fallback's <0xNN> tokens would decode "
        "as their names");
  }
  return absl::OkStatus();
}

absl::Status HfTokenizer::BuildMatchers() {
  for (AddedMatcher* m : {&raw_added_, &normalized_added_}) m->by_first_byte.assign(256, {});
  for (size_t i = 0; i < added_.size(); ++i) {
    const bool normalized = added_[i].normalized && !normalizers_.empty();
    AddedMatcher& m = normalized ? normalized_added_ : raw_added_;
    // HF matches a normalized added token by its normalized content.
    std::string pattern = normalized ? Normalize(added_[i].content) : added_[i].content;
    if (pattern.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("added_tokens[", i, "]: its content normalizes to nothing"));
    }
    m.patterns.push_back(std::move(pattern));
    m.added.push_back(static_cast<int>(i));
  }
  for (AddedMatcher* m : {&raw_added_, &normalized_added_}) {
    for (size_t p = 0; p < m->patterns.size(); ++p) {
      m->by_first_byte[static_cast<uint8_t>(m->patterns[p][0])].push_back(static_cast<int>(p));
    }
    for (auto& list : m->by_first_byte) {
      std::stable_sort(list.begin(), list.end(),
                       [&](int x, int y) { return m->patterns[x].size() > m->patterns[y].size(); });
    }
  }
  return absl::OkStatus();
}

// Leftmost-longest matches of the added tokens, with lstrip/rstrip taking
// the whitespace beside a match (never past the previous match).
std::vector<HfTokenizer::Segment> HfTokenizer::SplitAdded(absl::string_view text,
                                                          const AddedMatcher& m) const {
  std::vector<Segment> out;
  size_t done = 0;  // end of the last match
  for (size_t pos = 0; pos < text.size();) {
    int found = -1;
    for (int p : m.by_first_byte[static_cast<uint8_t>(text[pos])]) {
      if (absl::StartsWith(text.substr(pos), m.patterns[p])) {
        found = p;
        break;
      }
    }
    if (found < 0) {
      ++pos;
      continue;
    }
    const tokenizer_internal::HfAddedToken& a = added_[m.added[found]];
    size_t start = pos, stop = pos + m.patterns[found].size(), len;
    if (a.lstrip) {
      while (start > done) {
        const size_t prev = PrevCharStart(text, start);
        if (!IsSpace(text, prev, &len)) break;
        start = prev;
      }
    }
    if (a.rstrip) {
      while (stop < text.size() && IsSpace(text, stop, &len)) stop += len;
    }
    if (start > done) out.push_back({text.substr(done, start - done), -1, done});
    out.push_back({text.substr(start, stop - start), m.added[found], start});
    done = pos = stop;
  }
  if (done < text.size()) out.push_back({text.substr(done), -1, done});
  return out;
}

std::string HfTokenizer::Normalize(absl::string_view text) const {
  std::string s(text);
  for (const HfNormalizer& n : normalizers_) {
    if (n.kind == HfNormalizer::Kind::kNfc) {
      s = tokenizer_internal::Nfc(s);
    } else if (n.kind == HfNormalizer::Kind::kPrepend) {
      if (!s.empty()) s = n.to + s;
    } else {
      s = absl::StrReplaceAll(s, {{n.from, n.to}});
    }
  }
  return s;
}

void HfTokenizer::EncodeAppend(absl::string_view text, BpeCache* cache,
                               std::vector<int32_t>* out) const {
  for (const Segment& seg : SplitAdded(text, raw_added_)) {
    if (seg.added >= 0) {
      out->push_back(added_[seg.added].id);
      continue;
    }
    if (normalizers_.empty()) {
      EncodeSegment(seg.text, seg.offset == 0, cache, out);
      continue;
    }
    const std::string normalized = Normalize(seg.text);
    for (const Segment& sub : SplitAdded(normalized, normalized_added_)) {
      if (sub.added >= 0) {
        out->push_back(added_[sub.added].id);
      } else {
        EncodeSegment(sub.text, seg.offset == 0 && sub.offset == 0, cache, out);
      }
    }
  }
}

std::vector<int32_t> HfTokenizer::Encode(absl::string_view text, BpeCache* cache) const {
  std::vector<int32_t> out;
  EncodeAppend(text, cache, &out);
  return out;
}

// The pre-tokenizer (none, [Split..., ByteLevel] or [Metaspace], as
// hf_config checks), then the model on each piece.
void HfTokenizer::EncodeSegment(absl::string_view text, bool at_start, BpeCache* cache,
                                std::vector<int32_t>* out) const {
  if (text.empty()) return;
  if (pre_tokenizers_.empty()) return EncodePiece(text, cache, out);
  const HfPreTokenizer& last = pre_tokenizers_.back();
  if (last.kind == HfPreTokenizer::Kind::kMetaspace) {
    std::string s = absl::StrReplaceAll(text, {{" ", last.replacement}});
    const bool prepend = last.prepend == PrependScheme::kAlways ||
                         (last.prepend == PrependScheme::kFirst && at_start);
    if (prepend && !absl::StartsWith(s, last.replacement)) s = last.replacement + s;
    if (!last.split) return EncodePiece(s, cache, out);
    // MergedWithNext: each replacement character starts a piece.
    size_t begin = 0;
    for (size_t pos = s.find(last.replacement, 1); pos != std::string::npos;
         pos = s.find(last.replacement, pos + 1)) {
      EncodePiece(absl::string_view(s).substr(begin, pos - begin), cache, out);
      begin = pos;
    }
    return EncodePiece(absl::string_view(s).substr(begin), cache, out);
  }
  // ByteLevel last, Splits before it.
  std::string prefixed;
  if (last.add_prefix_space && text[0] != ' ') {
    prefixed = absl::StrCat(" ", text);
    text = prefixed;
  }
  std::vector<absl::string_view> pieces = {text}, next;
  for (const HfPreTokenizer& p : pre_tokenizers_) {
    if (p.kind == HfPreTokenizer::Kind::kByteLevel && !p.use_regex) continue;
    next.clear();
    for (absl::string_view piece : pieces) {
      for (size_t pos = 0; pos < piece.size();) {
        const size_t end = NextPreTokenEnd(p.regex, piece, pos);
        next.push_back(piece.substr(pos, end - pos));
        pos = end;
      }
    }
    pieces.swap(next);
  }
  for (absl::string_view piece : pieces) EncodePiece(piece, cache, out);
}

void HfTokenizer::EncodePiece(absl::string_view piece, BpeCache* cache,
                              std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (byte_level_ && piece.size() == 1) {
    out->push_back(byte_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (cache == nullptr) return MergePiece(piece, out);
  if (auto it = cache->map_.find(piece); it != cache->map_.end()) {
    out->insert(out->end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<int32_t> ids;
  MergePiece(piece, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
  if (cache->map_.size() >= cache->max_entries_) cache->map_.clear();
  cache->map_.emplace(piece, std::move(ids));
}

// HF's BPE model on one pre-token.
void HfTokenizer::MergePiece(absl::string_view piece, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    // A piece that is a vocabulary entry is that token, merges or not.
    auto it = token_to_id_.find(byte_level_ ? ByteSpell(piece) : std::string(piece));
    if (it != token_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> word;
  word.reserve(piece.size());
  if (byte_level_) {
    for (char c : piece) word.push_back(byte_id_[static_cast<uint8_t>(c)]);
  } else {
    // Characters: a vocabulary entry, else its bytes as <0xNN> tokens
    // (byte_fallback), else unk (consecutive ones fused with fuse_unk).
    bool last_unk = false;
    for (size_t pos = 0; pos < piece.size();) {
      const size_t len = CharLen(piece, pos);
      const absl::string_view ch = piece.substr(pos, len);
      pos += len;
      if (auto it = token_to_id_.find(ch); it != token_to_id_.end()) {
        word.push_back(it->second);
        last_unk = false;
        continue;
      }
      bool bytes_ok = true;
      for (char b : ch) bytes_ok &= byte_fallback_id_[static_cast<uint8_t>(b)] >= 0;
      if (bytes_ok) {
        for (char b : ch) word.push_back(byte_fallback_id_[static_cast<uint8_t>(b)]);
        last_unk = false;
        continue;
      }
      if (!(fuse_unk_ && last_unk)) word.push_back(unk_id_);
      last_unk = true;
    }
  }
  // GPT-2's loop: merge every occurrence of the lowest-ranked adjacent pair,
  // left to right, until no pair has a rank.
  tokenizer_internal::ApplyBpeMerges(merges_, &word);
  out->insert(out->end(), word.begin(), word.end());
}

absl::StatusOr<std::string> HfTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  std::vector<std::string> run;
  bool run_at_start = true;  // the current run began with ids[0]
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size() || id_kind_[id] == IdKind::kAbsent) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is not in the vocabulary (size ", vocab_size(), ")"));
    }
    if (id_kind_[id] == IdKind::kAdded) {
      if (!run.empty()) out += DecodeRun(std::move(run), StripsPrefix(run_at_start));
      run.clear();
      out += added_[id_added_[id]].content;
      run_at_start = false;
    } else {
      run.push_back(id_token_[id]);
    }
  }
  if (!run.empty()) out += DecodeRun(std::move(run), StripsPrefix(run_at_start));
  return out;
}

// The decoder chain over one run of model tokens; `strip_prefix` enables the
// steps that remove the prefix Encode put on the run's segment.
std::string HfTokenizer::DecodeRun(std::vector<std::string> tokens, bool strip_prefix) const {
  for (const HfDecoder& d : decoders_) {
    switch (d.kind) {
      case HfDecoder::Kind::kByteLevel: {
        // Each token's characters through the inverse byte map; a token with
        // a character outside it stands for its own UTF-8 bytes (as HF has it).
        static const std::vector<int> kByteOf = [] {
          std::vector<int> v(0x144, -1);  // code point -> byte (Gpt2ByteToCodePoint < 0x144)
          for (int b = 0; b < 256; ++b) v[Gpt2ByteToCodePoint(static_cast<uint8_t>(b))] = b;
          return v;
        }();
        std::string bytes;
        for (const std::string& t : tokens) {
          std::string mapped;
          bool ok = true;
          for (size_t pos = 0; pos < t.size() && ok;) {
            tokenizer_internal::Utf8Char c = DecodeUtf8(t, pos);
            pos += c.length;
            const int b = c.code_point >= 0 && c.code_point < 0x144 ? kByteOf[c.code_point] : -1;
            ok = b >= 0;
            mapped.push_back(static_cast<char>(b));
          }
          bytes += ok ? mapped : t;
        }
        tokens.assign(1, std::move(bytes));
        break;
      }
      case HfDecoder::Kind::kMetaspace: {
        const bool strip = strip_prefix && d.prepend != PrependScheme::kNever;
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = absl::StrReplaceAll(tokens[i], {{d.from, " "}});
          if (i == 0 && strip && absl::StartsWith(tokens[i], " ")) tokens[i].erase(0, 1);
        }
        break;
      }
      case HfDecoder::Kind::kByteFallback: {
        // Runs of <0xNN> tokens become their bytes.
        std::vector<std::string> merged;
        bool in_bytes = false;
        for (std::string& t : tokens) {
          int value = -1;
          if (t.size() == 6 && absl::StartsWith(t, "<0x") && t[5] == '>') {
            unsigned v;
            if (absl::SimpleHexAtoi(t.substr(3, 2), &v)) value = static_cast<int>(v);
          }
          if (value < 0) {
            merged.push_back(std::move(t));
            in_bytes = false;
          } else {
            if (!in_bytes) merged.emplace_back();
            merged.back().push_back(static_cast<char>(value));
            in_bytes = true;
          }
        }
        tokens.swap(merged);
        break;
      }
      case HfDecoder::Kind::kFuse:
        tokens.assign(1, absl::StrJoin(tokens, ""));
        break;
      case HfDecoder::Kind::kStrip:
        if (!strip_prefix) break;
        for (std::string& t : tokens) {
          size_t begin = 0;
          for (int k = 0; k < d.start && absl::StartsWith(t.substr(begin), d.from); ++k) {
            begin += d.from.size();
          }
          t.erase(0, begin);
        }
        break;
      case HfDecoder::Kind::kReplace:
        for (std::string& t : tokens) t = absl::StrReplaceAll(t, {{d.from, d.to}});
        break;
    }
  }
  return absl::StrJoin(tokens, "");
}

std::optional<int32_t> HfTokenizer::TokenId(absl::string_view token) const {
  if (auto it = added_to_id_.find(token); it != added_to_id_.end()) return it->second;
  if (auto it = token_to_id_.find(token); it != token_to_id_.end()) return it->second;
  return std::nullopt;
}

std::optional<int32_t> HfTokenizer::SpecialTokenId(absl::string_view content) const {
  auto it = added_to_id_.find(content);
  if (it == added_to_id_.end() || !added_[id_added_[it->second]].special) return std::nullopt;
  return it->second;
}

std::string HfTokenizer::Summary() const {
  std::vector<std::string> pre;
  for (const HfPreTokenizer& p : pre_tokenizers_) {
    switch (p.kind) {
      case HfPreTokenizer::Kind::kSplit:
        pre.push_back(p.regex == SplitRegex::kLlama3  ? "Split(Llama-3)"
                      : p.regex == SplitRegex::kQwen2 ? "Split(Qwen2)"
                                                      : "Split(GPT-2)");
        break;
      case HfPreTokenizer::Kind::kByteLevel:
        pre.push_back(p.use_regex ? "ByteLevel(GPT-2 regex)" : "ByteLevel");
        break;
      case HfPreTokenizer::Kind::kMetaspace:
        pre.push_back("Metaspace");
        break;
    }
  }
  return absl::StrCat(
      "BPE: ", token_to_id_.size(), " tokens, ", merges_.size(), " merges, ", added_.size(),
      " added tokens, vocab_size ", vocab_size(), ignore_merges_ ? ", ignore_merges" : "",
      unk_id_ >= 0 ? ", unk" : "", byte_fallback_id_[0] >= 0 ? ", byte_fallback" : "",
      "; normalizer: ", normalizers_.empty() ? "none" : absl::StrCat(normalizers_.size(), " steps"),
      "; pre-tokenizer: ", pre.empty() ? "none" : absl::StrJoin(pre, " + "));
}

}  // namespace gtp::data
