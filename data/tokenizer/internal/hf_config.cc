#include "data/tokenizer/internal/hf_config.h"

#include <initializer_list>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "data/tokenizer/internal/json.h"

namespace gtp::data::tokenizer_internal {
namespace {

using Type = JsonValue::Type;

// A value as an error message shows it: strings quoted, containers named.
std::string Show(const JsonValue& v) {
  switch (v.type) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return v.boolean ? "true" : "false";
    case Type::kNumber:
      return v.integral ? absl::StrCat(v.integer) : absl::StrCat(v.number);
    case Type::kString: {
      std::string s = v.string.size() > 200 ? v.string.substr(0, 200) + "..." : v.string;
      std::string out = "\"";
      for (char c : s) {
        if (c == '"' || c == '\\') {
          out.push_back('\\');
          out.push_back(c);
        } else if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(&out, absl::StrFormat("\\u%04x", c));
        } else {
          out.push_back(c);
        }
      }
      return out + "\"";
    }
    case Type::kArray:
      return "an array";
    case Type::kObject:
      return "an object";
  }
  return "?";
}

absl::Status Refuse(absl::string_view path, const JsonValue& v, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", Show(v), " ", why));
}

// One JSON object of the file, at `path` ("pre_tokenizer.pretokenizers[1]").
class Obj {
 public:
  Obj(const JsonValue& v, std::string path) : v_(v), path_(std::move(path)) {}

  // Every member must be one of `allowed` and appear once.
  absl::Status Check(std::initializer_list<absl::string_view> allowed) const {
    if (v_.type != Type::kObject) return Refuse(path_, v_, "is not an object");
    absl::flat_hash_set<absl::string_view> seen;
    for (const std::string& key : v_.keys) {
      bool ok = false;
      for (absl::string_view a : allowed) ok = ok || key == a;
      if (!ok) {
        return absl::InvalidArgumentError(
            absl::StrCat(Path(key), " is not supported (this reader knows ",
                         absl::StrJoin(allowed, ", "), "; an unknown field could change the ids)"));
      }
      if (!seen.insert(key).second) {
        return absl::InvalidArgumentError(absl::StrCat(Path(key), " appears twice"));
      }
    }
    return absl::OkStatus();
  }
  std::string Path(absl::string_view key) const {
    return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
  }
  // Null when absent.
  const JsonValue& Get(absl::string_view key) const {
    static const JsonValue kNull;
    const JsonValue* v = v_.Find(key);
    return v ? *v : kNull;
  }
  absl::StatusOr<std::string> String(absl::string_view key) const {
    const JsonValue& v = Get(key);
    if (v.type != Type::kString) return Refuse(Path(key), v, "is not a string");
    return v.string;
  }
  absl::StatusOr<std::optional<std::string>> OptionalString(absl::string_view key) const {
    const JsonValue& v = Get(key);
    if (v.is_null()) return std::optional<std::string>();
    if (v.type != Type::kString) return Refuse(Path(key), v, "is not a string or null");
    return std::optional<std::string>(v.string);
  }
  absl::StatusOr<bool> Bool(absl::string_view key, bool absent) const {
    const JsonValue& v = Get(key);
    if (v.is_null()) return absent;
    if (v.type != Type::kBool) return Refuse(Path(key), v, "is not true or false");
    return v.boolean;
  }
  absl::StatusOr<int64_t> Int(absl::string_view key, int64_t lo, int64_t hi) const {
    const JsonValue& v = Get(key);
    if (v.type != Type::kNumber || !v.integral || v.integer < lo || v.integer > hi) {
      return Refuse(Path(key), v, absl::StrCat("is not an integer in [", lo, ", ", hi, "]"));
    }
    return v.integer;
  }
  // The "type" member, which must be one of `known`.
  absl::StatusOr<std::string> TypeOf(std::initializer_list<absl::string_view> known) const {
    if (v_.type != Type::kObject) return Refuse(path_, v_, "is not an object");
    const JsonValue& t = Get("type");
    for (absl::string_view k : known) {
      if (t.type == Type::kString && t.string == k) return t.string;
    }
    return Refuse(Path("type"), t,
                  absl::StrCat("is not supported (supported: ", absl::StrJoin(known, ", "), ")"));
  }

 private:
  const JsonValue& v_;
  std::string path_;
};

std::string Index(const std::string& path, size_t i) { return absl::StrCat(path, "[", i, "]"); }

// One character (Metaspace's replacement, Strip's content).
absl::Status OneChar(const std::string& path, const std::string& s) {
  size_t len = s.empty() ? 0
                         : (static_cast<unsigned char>(s[0]) < 0x80   ? 1
                            : static_cast<unsigned char>(s[0]) < 0xE0 ? 2
                            : static_cast<unsigned char>(s[0]) < 0xF0 ? 3
                                                                      : 4);
  if (s.empty() || s.size() != len) {
    JsonValue v;
    v.type = Type::kString;
    v.string = s;
    return Refuse(path, v, "is not one character");
  }
  return absl::OkStatus();
}

// A pattern {"String": s}; {"Regex": r} is refused by name.
absl::StatusOr<std::string> LiteralPattern(const Obj& parent) {
  const JsonValue& p = parent.Get("pattern");
  Obj o(p, parent.Path("pattern"));
  GTP_RETURN_IF_ERROR(o.Check({"String", "Regex"}));
  if (p.Find("Regex") != nullptr) {
    return Refuse(o.Path("Regex"), o.Get("Regex"),
                  "is not supported: only {\"String\": ...} patterns are implemented here");
  }
  GTP_ASSIGN_OR_RETURN(std::string s, o.String("String"));
  if (s.empty()) return Refuse(o.Path("String"), o.Get("String"), "is empty");
  return s;
}

absl::StatusOr<PrependScheme> ReadPrependScheme(const Obj& o) {
  const JsonValue& scheme = o.Get("prepend_scheme");
  if (scheme.is_null()) {
    // Files written before prepend_scheme existed say add_prefix_space.
    GTP_ASSIGN_OR_RETURN(bool add, o.Bool("add_prefix_space", true));
    return add ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  if (scheme.type == Type::kString) {
    if (scheme.string == "always") return PrependScheme::kAlways;
    if (scheme.string == "first") return PrependScheme::kFirst;
    if (scheme.string == "never") return PrependScheme::kNever;
  }
  return Refuse(o.Path("prepend_scheme"), scheme, "is not \"always\", \"first\" or \"never\"");
}

absl::StatusOr<std::string> MetaspaceReplacement(const Obj& o) {
  std::string r = "\xE2\x96\x81";  // U+2581 ▁, the default
  if (!o.Get("replacement").is_null()) {
    GTP_ASSIGN_OR_RETURN(r, o.String("replacement"));
    GTP_RETURN_IF_ERROR(OneChar(o.Path("replacement"), r));
  }
  if (!o.Get("str_rep").is_null()) {
    GTP_ASSIGN_OR_RETURN(std::string rep, o.String("str_rep"));
    if (rep != r) return Refuse(o.Path("str_rep"), o.Get("str_rep"), "differs from replacement");
  }
  return r;
}

absl::Status ReadNormalizer(const JsonValue& v, const std::string& path,
                            std::vector<HfNormalizer>* out) {
  if (v.is_null()) return absl::OkStatus();
  Obj o(v, path);
  GTP_ASSIGN_OR_RETURN(std::string type, o.TypeOf({"NFC", "Prepend", "Replace", "Sequence"}));
  if (type == "Sequence") {
    GTP_RETURN_IF_ERROR(o.Check({"type", "normalizers"}));
    const JsonValue& list = o.Get("normalizers");
    if (list.type != Type::kArray) return Refuse(o.Path("normalizers"), list, "is not an array");
    for (size_t i = 0; i < list.items.size(); ++i) {
      GTP_RETURN_IF_ERROR(ReadNormalizer(list.items[i], Index(o.Path("normalizers"), i), out));
    }
    return absl::OkStatus();
  }
  HfNormalizer n;
  if (type == "NFC") {
    GTP_RETURN_IF_ERROR(o.Check({"type"}));
    n.kind = HfNormalizer::Kind::kNfc;
  } else if (type == "Prepend") {
    GTP_RETURN_IF_ERROR(o.Check({"type", "prepend"}));
    n.kind = HfNormalizer::Kind::kPrepend;
    GTP_ASSIGN_OR_RETURN(n.to, o.String("prepend"));
  } else {
    GTP_RETURN_IF_ERROR(o.Check({"type", "pattern", "content"}));
    n.kind = HfNormalizer::Kind::kReplace;
    GTP_ASSIGN_OR_RETURN(n.from, LiteralPattern(o));
    GTP_ASSIGN_OR_RETURN(n.to, o.String("content"));
  }
  out->push_back(std::move(n));
  return absl::OkStatus();
}

absl::Status ReadPreTokenizer(const JsonValue& v, const std::string& path,
                              std::vector<HfPreTokenizer>* out) {
  if (v.is_null()) return absl::OkStatus();
  Obj o(v, path);
  GTP_ASSIGN_OR_RETURN(std::string type, o.TypeOf({"Split", "ByteLevel", "Metaspace", "Sequence"}));
  HfPreTokenizer p;
  if (type == "Sequence") {
    GTP_RETURN_IF_ERROR(o.Check({"type", "pretokenizers"}));
    const JsonValue& list = o.Get("pretokenizers");
    if (list.type != Type::kArray) return Refuse(o.Path("pretokenizers"), list, "is not an array");
    for (size_t i = 0; i < list.items.size(); ++i) {
      GTP_RETURN_IF_ERROR(ReadPreTokenizer(list.items[i], Index(o.Path("pretokenizers"), i), out));
    }
    return absl::OkStatus();
  } else if (type == "Split") {
    GTP_RETURN_IF_ERROR(o.Check({"type", "pattern", "behavior", "invert"}));
    p.kind = HfPreTokenizer::Kind::kSplit;
    Obj pattern(o.Get("pattern"), o.Path("pattern"));
    GTP_RETURN_IF_ERROR(pattern.Check({"String", "Regex"}));
    if (o.Get("pattern").Find("Regex") == nullptr) {
      return Refuse(o.Path("pattern"), o.Get("pattern"),
                    "is not supported: a Split needs one of the Regex patterns of GPT-2, Llama-3 "
                    "or Qwen2");
    }
    GTP_ASSIGN_OR_RETURN(std::string regex, pattern.String("Regex"));
    bool known = false;
    for (SplitRegex r : {SplitRegex::kGpt2, SplitRegex::kLlama3, SplitRegex::kQwen2}) {
      if (regex == SplitRegexPattern(r)) p.regex = r, known = true;
    }
    if (!known) {
      return Refuse(pattern.Path("Regex"), pattern.Get("Regex"),
                    "is not supported: the Split regexes implemented (as scanners, "
                    "pretokenizer.h) are GPT-2's, Llama-3's and Qwen2's, character for character");
    }
    GTP_ASSIGN_OR_RETURN(std::string behavior, o.String("behavior"));
    if (behavior != "Isolated") {
      return Refuse(o.Path("behavior"), o.Get("behavior"), "is not supported (only \"Isolated\")");
    }
    GTP_ASSIGN_OR_RETURN(bool invert, o.Bool("invert", false));
    if (invert) return Refuse(o.Path("invert"), o.Get("invert"), "is not supported (only false)");
  } else if (type == "ByteLevel") {
    GTP_RETURN_IF_ERROR(o.Check({"type", "add_prefix_space", "trim_offsets", "use_regex"}));
    p.kind = HfPreTokenizer::Kind::kByteLevel;
    // HF's defaults for absent fields.
    GTP_ASSIGN_OR_RETURN(p.add_prefix_space, o.Bool("add_prefix_space", true));
    GTP_ASSIGN_OR_RETURN(p.use_regex, o.Bool("use_regex", true));
    GTP_RETURN_IF_ERROR(o.Bool("trim_offsets", true).status());  // offsets only
  } else {
    GTP_RETURN_IF_ERROR(
        o.Check({"type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"}));
    p.kind = HfPreTokenizer::Kind::kMetaspace;
    GTP_ASSIGN_OR_RETURN(p.replacement, MetaspaceReplacement(o));
    GTP_ASSIGN_OR_RETURN(p.prepend, ReadPrependScheme(o));
    GTP_ASSIGN_OR_RETURN(p.split, o.Bool("split", true));
  }
  out->push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status ReadDecoder(const JsonValue& v, const std::string& path, std::vector<HfDecoder>* out) {
  Obj o(v, path);
  if (v.is_null()) {
    return Refuse(path, v,
                  "is not supported: without a decoder HF joins token strings with spaces, "
                  "which is not the text");
  }
  GTP_ASSIGN_OR_RETURN(std::string type, o.TypeOf({"ByteLevel", "Metaspace", "ByteFallback", "Fuse",
                                                   "Strip", "Replace", "Sequence"}));
  HfDecoder d;
  if (type == "Sequence") {
    GTP_RETURN_IF_ERROR(o.Check({"type", "decoders"}));
    const JsonValue& list = o.Get("decoders");
    if (list.type != Type::kArray) return Refuse(o.Path("decoders"), list, "is not an array");
    for (size_t i = 0; i < list.items.size(); ++i) {
      GTP_RETURN_IF_ERROR(ReadDecoder(list.items[i], Index(o.Path("decoders"), i), out));
    }
    return absl::OkStatus();
  } else if (type == "ByteLevel") {
    // Its fields concern offsets and encoding; decoding maps characters to bytes.
    GTP_RETURN_IF_ERROR(o.Check({"type", "add_prefix_space", "trim_offsets", "use_regex"}));
    d.kind = HfDecoder::Kind::kByteLevel;
  } else if (type == "Metaspace") {
    GTP_RETURN_IF_ERROR(
        o.Check({"type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"}));
    d.kind = HfDecoder::Kind::kMetaspace;
    GTP_ASSIGN_OR_RETURN(d.from, MetaspaceReplacement(o));
    GTP_ASSIGN_OR_RETURN(d.prepend, ReadPrependScheme(o));
    GTP_RETURN_IF_ERROR(o.Bool("split", true).status());
  } else if (type == "ByteFallback" || type == "Fuse") {
    GTP_RETURN_IF_ERROR(o.Check({"type"}));
    d.kind = type == "Fuse" ? HfDecoder::Kind::kFuse : HfDecoder::Kind::kByteFallback;
  } else if (type == "Strip") {
    GTP_RETURN_IF_ERROR(o.Check({"type", "content", "start", "stop"}));
    d.kind = HfDecoder::Kind::kStrip;
    GTP_ASSIGN_OR_RETURN(d.from, o.String("content"));
    GTP_RETURN_IF_ERROR(OneChar(o.Path("content"), d.from));
    GTP_ASSIGN_OR_RETURN(int64_t start, o.Int("start", 0, 1 << 20));
    GTP_ASSIGN_OR_RETURN(int64_t stop, o.Int("stop", 0, 1 << 20));
    if (stop != 0) {
      return Refuse(o.Path("stop"), o.Get("stop"),
                    "is not supported (only 0: no encoder step adds a suffix to strip)");
    }
    d.start = static_cast<int>(start);
  } else {
    GTP_RETURN_IF_ERROR(o.Check({"type", "pattern", "content"}));
    d.kind = HfDecoder::Kind::kReplace;
    GTP_ASSIGN_OR_RETURN(d.from, LiteralPattern(o));
    GTP_ASSIGN_OR_RETURN(d.to, o.String("content"));
  }
  out->push_back(std::move(d));
  return absl::OkStatus();
}

absl::Status ReadModel(const JsonValue& v, HfConfig* c) {
  Obj o(v, "model");
  GTP_ASSIGN_OR_RETURN(std::string type, o.TypeOf({"BPE"}));
  GTP_RETURN_IF_ERROR(
      o.Check({"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
               "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"}));
  const JsonValue& dropout = o.Get("dropout");
  if (!dropout.is_null() && !(dropout.type == Type::kNumber && dropout.number == 0)) {
    return Refuse(o.Path("dropout"), dropout,
                  "is not supported: BPE dropout makes encoding random (only null or 0)");
  }
  for (absl::string_view affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    GTP_ASSIGN_OR_RETURN(std::optional<std::string> s, o.OptionalString(affix));
    if (s && !s->empty()) {
      return Refuse(o.Path(affix), o.Get(affix), "is not supported (only null or \"\")");
    }
  }
  GTP_ASSIGN_OR_RETURN(c->unk_token, o.OptionalString("unk_token"));
  GTP_ASSIGN_OR_RETURN(c->fuse_unk, o.Bool("fuse_unk", false));
  GTP_ASSIGN_OR_RETURN(c->byte_fallback, o.Bool("byte_fallback", false));
  GTP_ASSIGN_OR_RETURN(c->ignore_merges, o.Bool("ignore_merges", false));

  const JsonValue& vocab = o.Get("vocab");
  if (vocab.type != Type::kObject) return Refuse(o.Path("vocab"), vocab, "is not an object");
  c->vocab.reserve(vocab.keys.size());
  for (size_t i = 0; i < vocab.keys.size(); ++i) {
    const JsonValue& id = vocab.items[i];
    if (id.type != Type::kNumber || !id.integral || id.integer < 0 || id.integer > INT32_MAX) {
      return Refuse(absl::StrCat("model.vocab[\"", vocab.keys[i], "\"]"), id,
                    "is not a token id (an integer in [0, 2^31))");
    }
    c->vocab.emplace_back(vocab.keys[i], static_cast<int32_t>(id.integer));
  }
  const JsonValue& merges = o.Get("merges");
  if (merges.type != Type::kArray) return Refuse(o.Path("merges"), merges, "is not an array");
  c->merges.reserve(merges.items.size());
  for (size_t i = 0; i < merges.items.size(); ++i) {
    const JsonValue& m = merges.items[i];
    if (m.type == Type::kString) {
      // "a b": exactly one space, as HF requires of this form.
      const size_t sp = m.string.find(' ');
      if (sp == 0 || sp == std::string::npos || sp + 1 == m.string.size() ||
          m.string.find(' ', sp + 1) != std::string::npos) {
        return Refuse(Index("model.merges", i), m, "is not \"a b\"");
      }
      c->merges.emplace_back(m.string.substr(0, sp), m.string.substr(sp + 1));
    } else if (m.type == Type::kArray && m.items.size() == 2 && m.items[0].type == Type::kString &&
               m.items[1].type == Type::kString) {
      c->merges.emplace_back(m.items[0].string, m.items[1].string);
    } else {
      return Refuse(Index("model.merges", i), m, "is not \"a b\" or [\"a\", \"b\"]");
    }
  }
  return absl::OkStatus();
}

absl::Status ReadAddedTokens(const JsonValue& v, HfConfig* c) {
  if (v.is_null()) return absl::OkStatus();
  if (v.type != Type::kArray) return Refuse("added_tokens", v, "is not an array");
  for (size_t i = 0; i < v.items.size(); ++i) {
    Obj o(v.items[i], Index("added_tokens", i));
    GTP_RETURN_IF_ERROR(
        o.Check({"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}));
    HfAddedToken t;
    GTP_ASSIGN_OR_RETURN(int64_t id, o.Int("id", 0, INT32_MAX));
    t.id = static_cast<int32_t>(id);
    GTP_ASSIGN_OR_RETURN(t.content, o.String("content"));
    if (t.content.empty()) return Refuse(o.Path("content"), o.Get("content"), "is empty");
    GTP_ASSIGN_OR_RETURN(t.special, o.Bool("special", false));
    GTP_ASSIGN_OR_RETURN(t.normalized, o.Bool("normalized", !t.special));
    GTP_ASSIGN_OR_RETURN(t.lstrip, o.Bool("lstrip", false));
    GTP_ASSIGN_OR_RETURN(t.rstrip, o.Bool("rstrip", false));
    GTP_ASSIGN_OR_RETURN(bool single_word, o.Bool("single_word", false));
    if (single_word) {
      return Refuse(o.Path("single_word"), o.Get("single_word"), "is not supported (only false)");
    }
    c->added_tokens.push_back(std::move(t));
  }
  return absl::OkStatus();
}

// The pre-tokenizer shapes the encoder implements: none, [Split..., ByteLevel]
// or [Metaspace].
absl::Status CheckPreTokenizerShape(const std::vector<HfPreTokenizer>& p) {
  for (size_t i = 0; i < p.size(); ++i) {
    const bool last = i + 1 == p.size();
    switch (p[i].kind) {
      case HfPreTokenizer::Kind::kSplit:
        if (last) {
          return absl::InvalidArgumentError(
              "pre_tokenizer: a Split not followed by ByteLevel is not supported");
        }
        break;
      case HfPreTokenizer::Kind::kByteLevel:
        if (!last) {
          return absl::InvalidArgumentError(
              "pre_tokenizer: ByteLevel followed by another pre-tokenizer is not supported");
        }
        if (p[i].add_prefix_space && i > 0) {
          return absl::InvalidArgumentError(
              "pre_tokenizer: ByteLevel with add_prefix_space after a Split is not supported");
        }
        break;
      case HfPreTokenizer::Kind::kMetaspace:
        if (p.size() != 1) {
          return absl::InvalidArgumentError(
              "pre_tokenizer: Metaspace in a Sequence is not supported (only alone)");
        }
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfConfig> ParseHfConfig(absl::string_view json) {
  GTP_ASSIGN_OR_RETURN(JsonValue root, ParseJson(json));
  Obj top(root, "");
  GTP_RETURN_IF_ERROR(top.Check({"version", "truncation", "padding", "added_tokens", "normalizer",
                                 "pre_tokenizer", "model", "post_processor", "decoder"}));
  for (absl::string_view key : {"truncation", "padding"}) {
    if (!top.Get(key).is_null()) {
      return Refuse(key, top.Get(key), "is not supported (only null: Encode returns every id)");
    }
  }
  // The post-processor only adds special tokens (HF encode with
  // add_special_tokens=True) or adjusts offsets; Encode never applies it.
  const JsonValue& post = top.Get("post_processor");
  if (!post.is_null() && post.type != Type::kObject) {
    return Refuse("post_processor", post, "is not an object or null");
  }
  HfConfig c;
  GTP_RETURN_IF_ERROR(ReadModel(top.Get("model"), &c));
  GTP_RETURN_IF_ERROR(ReadAddedTokens(top.Get("added_tokens"), &c));
  GTP_RETURN_IF_ERROR(ReadNormalizer(top.Get("normalizer"), "normalizer", &c.normalizers));
  GTP_RETURN_IF_ERROR(
      ReadPreTokenizer(top.Get("pre_tokenizer"), "pre_tokenizer", &c.pre_tokenizers));
  GTP_RETURN_IF_ERROR(CheckPreTokenizerShape(c.pre_tokenizers));
  GTP_RETURN_IF_ERROR(ReadDecoder(top.Get("decoder"), "decoder", &c.decoders));
  return c;
}

}  // namespace gtp::data::tokenizer_internal
