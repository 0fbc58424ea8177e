#include "data/tokenizer/gpt2_tokenizer.h"

#include <climits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "data/tokenizer/internal/json.h"
#include "data/tokenizer/internal/unicode.h"
#include "data/tokenizer/pretokenizer.h"

namespace gtp::data {
namespace {

using tokenizer_internal::AppendUtf8;
using tokenizer_internal::DecodeUtf8;

bool Printable(uint8_t b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

using tokenizer_internal::ReadFile;

absl::Status Annotate(const absl::Status& s, absl::string_view where) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
}

// The bytes a vocab.json token spells: each character through the inverse
// byte map; a token with any character outside it is taken as its own UTF-8
// bytes (as HF's ByteLevel decoder does, e.g. for added special tokens).
std::string TokenBytes(absl::string_view token, const absl::flat_hash_map<uint32_t, uint8_t>& inv) {
  std::string out;
  for (size_t pos = 0; pos < token.size();) {
    tokenizer_internal::Utf8Char c = DecodeUtf8(token, pos);
    auto it = c.code_point < 0 ? inv.end() : inv.find(static_cast<uint32_t>(c.code_point));
    if (it == inv.end()) return std::string(token);
    out.push_back(static_cast<char>(it->second));
    pos += c.length;
  }
  return out;
}

using tokenizer_internal::BpePairKey;

}  // namespace

uint32_t Gpt2ByteToCodePoint(uint8_t byte) {
  if (Printable(byte)) return byte;
  // n = how many non-printable bytes precede this one.
  uint32_t n = 0;
  for (int b = 0; b < byte; ++b) n += Printable(static_cast<uint8_t>(b)) ? 0 : 1;
  return 256 + n;
}

absl::StatusOr<Gpt2Tokenizer> Gpt2Tokenizer::Load(const std::string& vocab_json_path,
                                                  const std::string& merges_txt_path) {
  GTP_ASSIGN_OR_RETURN(std::string vocab, ReadFile(vocab_json_path));
  GTP_ASSIGN_OR_RETURN(std::string merges, ReadFile(merges_txt_path));
  absl::StatusOr<Gpt2Tokenizer> tok = FromStrings(vocab, merges);
  if (!tok.ok()) {
    const bool in_merges = absl::StartsWith(tok.status().message(), "merges.txt");
    return Annotate(tok.status(), in_merges ? merges_txt_path : vocab_json_path);
  }
  return tok;
}

absl::StatusOr<Gpt2Tokenizer> Gpt2Tokenizer::FromStrings(absl::string_view vocab_json,
                                                         absl::string_view merges_txt) {
  Gpt2Tokenizer t;
  absl::flat_hash_map<uint32_t, uint8_t> inv;
  for (int b = 0; b < 256; ++b) inv[Gpt2ByteToCodePoint(static_cast<uint8_t>(b))] = b;

  absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> entries =
      tokenizer_internal::ParseStringIntObject(vocab_json);
  if (!entries.ok()) return Annotate(entries.status(), "vocab.json");
  for (auto& [token, id] : *entries) {
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("vocab.json: negative id ", id));
    if (static_cast<size_t>(id) >= t.id_bytes_.size()) {
      t.id_bytes_.resize(static_cast<size_t>(id) + 1);
      t.id_present_.resize(static_cast<size_t>(id) + 1, false);
    }
    if (t.id_present_[id]) {
      return absl::InvalidArgumentError(absl::StrCat("vocab.json: id ", id, " appears twice"));
    }
    t.id_present_[id] = true;
    t.id_bytes_[id] = TokenBytes(token, inv);
    if (!t.token_to_id_.emplace(std::move(token), id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab.json: token of id ", id, " appears twice"));
    }
  }
  for (int b = 0; b < 256; ++b) {
    std::string token;
    AppendUtf8(Gpt2ByteToCodePoint(static_cast<uint8_t>(b)), &token);
    auto it = t.token_to_id_.find(token);
    if (it == t.token_to_id_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab.json: no token for byte ", b, " (\"", token, "\")"));
    }
    t.byte_id_[b] = it->second;
  }

  int32_t rank = 0;
  size_t line_no = 0;
  for (size_t begin = 0; begin < merges_txt.size();) {
    size_t end = merges_txt.find('\n', begin);
    if (end == absl::string_view::npos) end = merges_txt.size();
    absl::string_view line = merges_txt.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || absl::StartsWith(line, "#version")) continue;
    const size_t sp = line.find(' ');
    if (sp == 0 || sp == absl::string_view::npos || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("merges.txt line ", line_no, ": want \"a b\", got \"", line, "\""));
    }
    const absl::string_view a = line.substr(0, sp), b = line.substr(sp + 1);
    auto ia = t.token_to_id_.find(a), ib = t.token_to_id_.find(b),
         iab = t.token_to_id_.find(absl::StrCat(a, b));
    if (ia == t.token_to_id_.end() || ib == t.token_to_id_.end() || iab == t.token_to_id_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("merges.txt line ", line_no, ": \"", line,
                                                     "\" names a token not in vocab.json"));
    }
    // A repeated pair takes its later rank, as GPT-2's dict and HF do.
    t.merges_[BpePairKey(ia->second, ib->second)] = tokenizer_internal::BpeMerge{rank++, iab->second};
  }
  return t;
}

void Gpt2Tokenizer::EncodePiece(absl::string_view piece, std::vector<int32_t>* out) const {
  std::vector<int32_t> word(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) word[i] = byte_id_[static_cast<uint8_t>(piece[i])];
  tokenizer_internal::ApplyBpeMerges(merges_, &word);
  out->insert(out->end(), word.begin(), word.end());
}

void Gpt2Tokenizer::EncodeAppend(absl::string_view text, BpeCache* cache,
                                 std::vector<int32_t>* out) const {
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = Gpt2NextPreTokenEnd(text, pos);
    const absl::string_view piece = text.substr(pos, end - pos);
    pos = end;
    if (piece.size() == 1) {
      out->push_back(byte_id_[static_cast<uint8_t>(piece[0])]);
    } else if (cache == nullptr) {
      EncodePiece(piece, out);
    } else if (auto it = cache->map_.find(piece); it != cache->map_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
    } else {
      std::vector<int32_t> ids;
      EncodePiece(piece, &ids);
      out->insert(out->end(), ids.begin(), ids.end());
      if (cache->map_.size() >= cache->max_entries_) cache->map_.clear();
      cache->map_.emplace(piece, std::move(ids));
    }
  }
}

std::vector<int32_t> Gpt2Tokenizer::Encode(absl::string_view text, BpeCache* cache) const {
  std::vector<int32_t> out;
  EncodeAppend(text, cache, &out);
  return out;
}

absl::StatusOr<std::string> Gpt2Tokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || !id_present_[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is not in the vocabulary (size ", vocab_size(), ")"));
    }
    out += id_bytes_[id];
  }
  return out;
}

std::optional<int32_t> Gpt2Tokenizer::TokenId(absl::string_view token) const {
  auto it = token_to_id_.find(token);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

}  // namespace gtp::data
