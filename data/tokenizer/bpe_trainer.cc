#include "data/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <queue>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/internal/unicode.h"
#include "data/tokenizer/pretokenizer.h"

namespace gtp::data {
namespace {

// Bytes sorted by their code point in the byte alphabet: id → byte.
const std::array<uint8_t, 256>& ByteOfId() {
  static const std::array<uint8_t, 256> table = [] {
    std::array<uint8_t, 256> t;
    for (int b = 0; b < 256; ++b) t[b] = static_cast<uint8_t>(b);
    std::sort(t.begin(), t.end(),
              [](uint8_t a, uint8_t b) { return Gpt2ByteToCodePoint(a) < Gpt2ByteToCodePoint(b); });
    return t;
  }();
  return table;
}

uint64_t Key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// A heap entry: a pair and its count when pushed (an upper bound of its
// count now: after a pair first appears its count only falls, except
// through a merge that reuses a token, which pushes it again).
struct Candidate {
  int64_t count;
  int32_t left, right;
};
// Priority: higher count, then the smaller (left, right).
struct LowerPriority {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.count != b.count) return a.count < b.count;
    return std::tie(a.left, a.right) > std::tie(b.left, b.right);
  }
};

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

void AppendJsonString(absl::string_view s, std::string* out) {
  out->push_back('"');
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot create ", path));
  f << contents;
  f.close();
  if (!f) return absl::DataLossError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

uint8_t Gpt2ByteOfId(int32_t id) { return ByteOfId()[static_cast<uint8_t>(id)]; }

std::string Gpt2SpellBytes(absl::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    tokenizer_internal::AppendUtf8(Gpt2ByteToCodePoint(static_cast<uint8_t>(c)), &out);
  }
  return out;
}

void BpeWordCounts::AddText(absl::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = Gpt2NextPreTokenEnd(text, pos);
    AddWord(text.substr(pos, end - pos));
    pos = end;
  }
}

void BpeWordCounts::AddWord(absl::string_view word, int64_t count) {
  if (word.empty() || count <= 0) return;
  auto it = counts_.find(word);
  if (it == counts_.end()) {
    counts_.emplace(std::string(word), count);
  } else {
    it->second += count;
  }
  num_words_ += count;
  num_bytes_ += count * static_cast<int64_t>(word.size());
}

std::string BpeVocab::VocabJson() const {
  std::string out = "{";
  const int32_t first_special = vocab_size() - num_special;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (id > 0) out.push_back(',');
    AppendJsonString(id < first_special ? Gpt2SpellBytes(token_bytes[id]) : token_bytes[id], &out);
    absl::StrAppend(&out, ":", id);
  }
  out += "}";
  return out;
}

std::string BpeVocab::MergesTxt() const {
  std::string out = "#version: 0.2\n";
  for (const auto& [a, b] : merges)
    absl::StrAppend(&out, Gpt2SpellBytes(a), " ", Gpt2SpellBytes(b), "\n");
  return out;
}

std::string BpeVocab::TokenizerJson() const {
  const int32_t first_special = vocab_size() - num_special;
  std::string added;
  for (int32_t id = first_special; id < vocab_size(); ++id) {
    absl::StrAppend(&added, id > first_special ? "," : "", "\n  {\"id\":", id, ",\"content\":");
    AppendJsonString(token_bytes[id], &added);
    added +=
        ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
        "\"normalized\":false,\"special\":true}";
  }
  std::string merge_list;
  for (size_t i = 0; i < merges.size(); ++i) {
    merge_list += i > 0 ? ",[" : "[";
    AppendJsonString(Gpt2SpellBytes(merges[i].first), &merge_list);
    merge_list.push_back(',');
    AppendJsonString(Gpt2SpellBytes(merges[i].second), &merge_list);
    merge_list.push_back(']');
  }
  return absl::StrCat(
      "{\n \"version\": \"1.0\",\n \"truncation\": null,\n \"padding\": null,\n"
      " \"added_tokens\": [",
      added,
      "],\n \"normalizer\": null,\n"
      " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
      "\"trim_offsets\": true, \"use_regex\": true},\n"
      " \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
      "\"trim_offsets\": false, \"use_regex\": true},\n"
      " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
      "\"trim_offsets\": true, \"use_regex\": true},\n"
      " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
      "\"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\", \"fuse_unk\": false, "
      "\"byte_fallback\": false, \"ignore_merges\": false,\n  \"vocab\": ",
      VocabJson(), ",\n  \"merges\": [", merge_list, "]}\n}\n");
}

absl::Status BpeVocab::Write(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  if (absl::Status s = WriteFile(dir + "/vocab.json", VocabJson()); !s.ok()) return s;
  if (absl::Status s = WriteFile(dir + "/merges.txt", MergesTxt()); !s.ok()) return s;
  return WriteFile(dir + "/tokenizer.json", TokenizerJson());
}

absl::StatusOr<BpeVocab> TrainBpe(const BpeWordCounts& words, const BpeTrainerOptions& options) {
  const auto& specials = options.special_tokens;
  {
    absl::flat_hash_set<std::string> seen;
    for (const std::string& s : specials) {
      if (s.empty() || !seen.insert(s).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("special token \"", s, "\" is empty or repeated"));
      }
    }
  }
  const int64_t max_tokens = int64_t{options.vocab_size} - static_cast<int64_t>(specials.size());
  if (max_tokens < 256) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", options.vocab_size,
                                                   " is below 256 byte tokens + ", specials.size(),
                                                   " special tokens"));
  }

  BpeVocab v;
  absl::flat_hash_map<std::string, int32_t> id_of;  // token bytes → id
  int32_t id_of_byte[256];
  for (int32_t id = 0; id < 256; ++id) {
    const uint8_t b = Gpt2ByteOfId(id);
    v.token_bytes.emplace_back(1, static_cast<char>(b));
    id_of[v.token_bytes.back()] = id;
    id_of_byte[b] = id;
  }

  // Words of two or more bytes (shorter ones have no pairs), sorted so the
  // bookkeeping below runs the same way every time.
  std::vector<const std::pair<const std::string, int64_t>*> sorted;
  for (const auto& e : words.counts()) {
    if (e.first.size() >= 2) sorted.push_back(&e);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  std::vector<Word> ws(sorted.size());
  absl::flat_hash_map<uint64_t, int64_t> pair_count;
  // Every word that holds the pair (and possibly some that no longer do).
  absl::flat_hash_map<uint64_t, std::vector<int32_t>> where;
  for (size_t w = 0; w < sorted.size(); ++w) {
    ws[w].count = sorted[w]->second;
    for (char c : sorted[w]->first) ws[w].symbols.push_back(id_of_byte[static_cast<uint8_t>(c)]);
    const auto& s = ws[w].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t k = Key(s[i], s[i + 1]);
      pair_count[k] += ws[w].count;
      auto& list = where[k];
      if (list.empty() || list.back() != static_cast<int32_t>(w))
        list.push_back(static_cast<int32_t>(w));
    }
  }
  std::vector<Candidate> initial;
  initial.reserve(pair_count.size());
  for (const auto& [k, c] : pair_count) {
    initial.push_back({c, static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xffffffffu)});
  }
  std::priority_queue<Candidate, std::vector<Candidate>, LowerPriority> heap(LowerPriority(),
                                                                             std::move(initial));

  std::vector<int32_t> merged;
  std::vector<uint8_t> fresh;  // per position of `merged`: the new token
  std::vector<uint64_t> touched, new_pairs;
  while (static_cast<int64_t>(v.token_bytes.size()) < max_tokens && !heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const uint64_t key = Key(top.left, top.right);
    auto pc = pair_count.find(key);
    const int64_t now = pc == pair_count.end() ? 0 : pc->second;
    if (now != top.count) {  // stale: put it back at its true count
      if (now > 0) heap.push({now, top.left, top.right});
      continue;
    }
    const int32_t left = top.left, right = top.right;
    std::string bytes = v.token_bytes[left] + v.token_bytes[right];
    int32_t id;
    if (auto it = id_of.find(bytes); it != id_of.end()) {
      id = it->second;
    } else {
      id = static_cast<int32_t>(v.token_bytes.size());
      id_of.emplace(bytes, id);
      v.token_bytes.push_back(std::move(bytes));
    }
    v.merges.emplace_back(v.token_bytes[left], v.token_bytes[right]);
    v.merge_counts.push_back(top.count);

    std::vector<int32_t> list = std::move(where[key]);
    where.erase(key);
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    touched.clear();
    for (int32_t w : list) {
      std::vector<int32_t>& s = ws[w].symbols;
      bool has = false;
      for (size_t i = 0; i + 1 < s.size() && !has; ++i) has = s[i] == left && s[i + 1] == right;
      if (!has) continue;
      // Only pairs that touch a merged position change: those of the old
      // symbols go out, those of the new token's positions come in (the
      // rest are the same pairs before and after). Only the latter can gain:
      // they are the ones to index and push.
      const int64_t c = ws[w].count;
      merged.clear();
      fresh.clear();
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
          if (i > 0) pair_count[Key(s[i - 1], s[i])] -= c;
          pair_count[key] -= c;
          // The pair on the right, unless it starts the next merge (then
          // that merge takes it out as its left pair).
          if (i + 2 < s.size() && !(i + 3 < s.size() && s[i + 2] == left && s[i + 3] == right)) {
            pair_count[Key(s[i + 1], s[i + 2])] -= c;
          }
          merged.push_back(id);
          fresh.push_back(1);
          i += 2;
        } else {
          merged.push_back(s[i++]);
          fresh.push_back(0);
        }
      }
      s.swap(merged);
      new_pairs.clear();
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (!fresh[i] && !fresh[i + 1]) continue;
        const uint64_t k = Key(s[i], s[i + 1]);
        pair_count[k] += c;
        new_pairs.push_back(k);
      }
      std::sort(new_pairs.begin(), new_pairs.end());
      new_pairs.erase(std::unique(new_pairs.begin(), new_pairs.end()), new_pairs.end());
      for (uint64_t k : new_pairs) {
        auto& l = where[k];
        if (l.empty() || l.back() != w) l.push_back(w);
        touched.push_back(k);
      }
    }
    pair_count.erase(key);  // every occurrence is merged: its count is 0
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t k : touched) {
      auto it = pair_count.find(k);
      if (it != pair_count.end() && it->second > 0) {
        heap.push(
            {it->second, static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xffffffffu)});
      }
    }
    if (options.on_merge) options.on_merge(static_cast<int64_t>(v.merges.size()), top.count);
  }

  absl::flat_hash_set<std::string> spelled;
  for (const std::string& t : v.token_bytes) spelled.insert(Gpt2SpellBytes(t));
  for (const std::string& s : specials) {
    if (spelled.contains(s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("special token \"", s, "\" is spelled like a learned token"));
    }
    v.token_bytes.push_back(s);
  }
  v.num_special = static_cast<int32_t>(specials.size());
  return v;
}

}  // namespace gtp::data
