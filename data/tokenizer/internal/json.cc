#include "data/tokenizer/internal/json.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/tokenizer/internal/unicode.h"

namespace gtp::data::tokenizer_internal {
namespace {

class Parser {
 public:
  explicit Parser(absl::string_view s) : s_(s) {}

  absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> Object() {
    std::vector<std::pair<std::string, int32_t>> out;
    SkipSpace();
    if (!Eat('{')) return Error("expected '{'");
    SkipSpace();
    if (!Eat('}')) {
      while (true) {
        SkipSpace();
        std::string key;
        if (absl::Status st = String(&key); !st.ok()) return st;
        SkipSpace();
        if (!Eat(':')) return Error("expected ':'");
        SkipSpace();
        int32_t value;
        if (absl::Status st = Integer(&value); !st.ok()) return st;
        out.emplace_back(std::move(key), value);
        SkipSpace();
        if (Eat('}')) break;
        if (!Eat(',')) return Error("expected ',' or '}'");
      }
    }
    SkipSpace();
    if (pos_ != s_.size()) return Error("trailing characters after the object");
    return out;
  }

  absl::StatusOr<std::optional<std::string>> Field(absl::string_view want) {
    std::optional<std::string> found;
    SkipSpace();
    if (!Eat('{')) return Error("expected '{'");
    SkipSpace();
    if (!Eat('}')) {
      while (true) {
        SkipSpace();
        std::string key;
        if (absl::Status st = String(&key); !st.ok()) return st;
        SkipSpace();
        if (!Eat(':')) return Error("expected ':'");
        SkipSpace();
        if (key == want) {
          if (pos_ >= s_.size() || s_[pos_] != '"') {
            return Error(absl::StrCat("the value of \"", want, "\" is not a string"));
          }
          std::string value;
          if (absl::Status st = String(&value); !st.ok()) return st;
          found = std::move(value);
        } else if (absl::Status st = SkipValue(0); !st.ok()) {
          return st;
        }
        SkipSpace();
        if (Eat('}')) break;
        if (!Eat(',')) return Error("expected ',' or '}'");
      }
    }
    SkipSpace();
    if (pos_ != s_.size()) return Error("trailing characters after the object");
    return found;
  }

  absl::StatusOr<JsonValue> Document() {
    JsonValue v;
    SkipSpace();
    if (absl::Status st = Value(&v, 0); !st.ok()) return st;
    SkipSpace();
    if (pos_ != s_.size()) return Error("trailing characters after the value");
    return v;
  }

 private:
  absl::Status Value(JsonValue* v, int depth) {
    if (depth > 64) return Error("nested too deeply");
    if (pos_ >= s_.size()) return Error("expected a value");
    const char c = s_[pos_];
    if (c == '"') {
      v->type = JsonValue::Type::kString;
      return String(&v->string);
    }
    if (c == '{' || c == '[') {
      const bool object = c == '{';
      const char close = object ? '}' : ']';
      v->type = object ? JsonValue::Type::kObject : JsonValue::Type::kArray;
      ++pos_;
      SkipSpace();
      if (Eat(close)) return absl::OkStatus();
      while (true) {
        SkipSpace();
        if (object) {
          v->keys.emplace_back();
          if (absl::Status st = String(&v->keys.back()); !st.ok()) return st;
          SkipSpace();
          if (!Eat(':')) return Error("expected ':'");
          SkipSpace();
        }
        v->items.emplace_back();
        if (absl::Status st = Value(&v->items.back(), depth + 1); !st.ok()) return st;
        SkipSpace();
        if (Eat(close)) return absl::OkStatus();
        if (!Eat(',')) return Error("expected ',' or a closing bracket");
      }
    }
    if (s_.substr(pos_, 4) == "null") return pos_ += 4, absl::OkStatus();
    if (s_.substr(pos_, 4) == "true" || s_.substr(pos_, 5) == "false") {
      v->type = JsonValue::Type::kBool;
      v->boolean = c == 't';
      pos_ += v->boolean ? 4 : 5;
      return absl::OkStatus();
    }
    const size_t begin = pos_;
    if (absl::Status st = SkipValue(depth); !st.ok()) return st;
    const absl::string_view text = s_.substr(begin, pos_ - begin);
    v->type = JsonValue::Type::kNumber;
    v->number = std::strtod(std::string(text).c_str(), nullptr);
    if (text.find_first_of(".eE") == absl::string_view::npos && text.size() <= 18) {
      v->integral = true;
      v->integer = std::strtoll(std::string(text).c_str(), nullptr, 10);
    }
    return absl::OkStatus();
  }

  absl::Status SkipValue(int depth) {
    if (depth > 64) return Error("nested too deeply");
    if (pos_ >= s_.size()) return Error("expected a value");
    const char c = s_[pos_];
    if (c == '"') {
      std::string ignored;
      return String(&ignored);
    }
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      SkipSpace();
      if (Eat(close)) return absl::OkStatus();
      while (true) {
        SkipSpace();
        if (c == '{') {
          std::string ignored;
          if (absl::Status st = String(&ignored); !st.ok()) return st;
          SkipSpace();
          if (!Eat(':')) return Error("expected ':'");
          SkipSpace();
        }
        if (absl::Status st = SkipValue(depth + 1); !st.ok()) return st;
        SkipSpace();
        if (Eat(close)) return absl::OkStatus();
        if (!Eat(',')) return Error("expected ',' or a closing bracket");
      }
    }
    for (absl::string_view word : {"true", "false", "null"}) {
      if (s_.substr(pos_, word.size()) == word) return pos_ += word.size(), absl::OkStatus();
    }
    // A number: -?int frac? exp?
    const size_t begin = pos_;
    Eat('-');
    const size_t digits = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    if (pos_ == digits) return Error("expected a value");
    if (Eat('.')) {
      const size_t f = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ == f) return Error("bad number");
    }
    if (Eat('e') || Eat('E')) {
      if (!Eat('+')) Eat('-');
      const size_t e = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ == e) return Error("bad number");
    }
    return pos_ > begin ? absl::OkStatus() : Error("expected a value");
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("json: ", what, " at byte ", pos_));
  }
  bool Eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Hex4(uint32_t* v) {
    if (pos_ + 4 > s_.size()) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_ + i];
      uint32_t d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      else
        return false;
      *v = *v * 16 + d;
    }
    pos_ += 4;
    return true;
  }
  absl::Status String(std::string* out) {
    if (!Eat('"')) return Error("expected a string");
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') return ++pos_, absl::OkStatus();
      if (c < 0x20) return Error("control character in string");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) return Error("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return Error("bad \\u escape");
          if (cp >= 0xDC00 && cp <= 0xDFFF) return Error("lone low surrogate");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (!Eat('\\') || !Eat('u') || !Hex4(&lo) || lo < 0xDC00 || lo > 0xDFFF) {
              return Error("high surrogate without a low surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Error("bad escape");
      }
    }
  }
  absl::Status Integer(int32_t* out) {
    const bool neg = Eat('-');
    const size_t begin = pos_;
    int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > (int64_t{1} << 31)) return Error("integer out of range");
    }
    if (pos_ == begin) return Error("expected an integer");
    if (pos_ - begin > 1 && s_[begin] == '0') return Error("leading zero");
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) {
      return Error("expected an integer, got a fraction or exponent");
    }
    if (neg) v = -v;
    if (v > INT32_MAX || v < INT32_MIN) return Error("integer out of range");
    *out = static_cast<int32_t>(v);
    return absl::OkStatus();
  }

  absl::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::Find(absl::string_view key) const {
  if (type != Type::kObject) return nullptr;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return &items[i];
  }
  return nullptr;
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view json) { return Parser(json).Document(); }

absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> ParseStringIntObject(
    absl::string_view json) {
  return Parser(json).Object();
}

absl::StatusOr<std::optional<std::string>> FindStringField(absl::string_view json,
                                                           absl::string_view key) {
  return Parser(json).Field(key);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return ss.str();
}

}  // namespace gtp::data::tokenizer_internal
