#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <variant>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/atomic_file.h"
#include "core/status.h"

namespace gtp::checkpoint {

namespace {

// ---- a minimal JSON reader for the header (objects, arrays, strings, integers) ----
struct Json;
using JsonObject = std::vector<std::pair<std::string, Json>>;
using JsonArray = std::vector<Json>;
struct Json {
  std::variant<std::monostate, int64_t, std::string, JsonArray, JsonObject> v;
};

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}
  absl::StatusOr<Json> Parse() {
    auto j = Value();
    if (!j.ok()) return j;
    Skip();
    if (i_ != s_.size()) return Error("trailing characters");
    return j;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("header JSON: ", what, " at byte ", i_));
  }
  void Skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  absl::StatusOr<Json> Value() {
    Skip();
    if (i_ >= s_.size()) return Error("unexpected end");
    char c = s_[i_];
    if (c == '{' || c == '[') {
      // Real headers nest 3 deep; a deep one would overflow the stack.
      if (depth_ >= kMaxDepth) return Error("nested too deeply");
      ++depth_;
      auto v = c == '{' ? Object() : Array();
      --depth_;
      return v;
    }
    if (c == '"') {
      auto str = String();
      if (!str.ok()) return str.status();
      return Json{*str};
    }
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return Number();
    return Error(absl::StrCat("unexpected '", std::string(1, c), "'"));
  }
  absl::StatusOr<std::string> String() {
    if (s_[i_] != '"') return Error("expected a string");
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') {
        if (++i_ >= s_.size()) break;
        char e = s_[i_];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e;  // \" \\ \/ and friends
        if (e == 'u') return Error("\\u escapes are not supported");
      } else {
        out += s_[i_];
      }
      ++i_;
    }
    if (i_ >= s_.size()) return Error("unterminated string");
    ++i_;
    return out;
  }
  absl::StatusOr<Json> Number() {
    size_t start = i_;
    if (s_[i_] == '-') ++i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E'))
      return Error("only integers are expected");
    int64_t v = 0;  // (std::stoll threw on "-" and on overflow)
    if (!absl::SimpleAtoi(absl::string_view(s_).substr(start, i_ - start), &v))
      return Error("not a 64-bit integer");
    return Json{v};
  }
  absl::StatusOr<Json> Array() {
    ++i_;
    JsonArray a;
    Skip();
    if (i_ < s_.size() && s_[i_] == ']') { ++i_; return Json{a}; }
    while (true) {
      auto v = Value();
      if (!v.ok()) return v;
      a.push_back(*std::move(v));
      Skip();
      if (i_ < s_.size() && s_[i_] == ',') { ++i_; continue; }
      if (i_ < s_.size() && s_[i_] == ']') { ++i_; return Json{a}; }
      return Error("expected ',' or ']'");
    }
  }
  absl::StatusOr<Json> Object() {
    ++i_;
    JsonObject o;
    Skip();
    if (i_ < s_.size() && s_[i_] == '}') { ++i_; return Json{o}; }
    while (true) {
      Skip();
      auto k = String();
      if (!k.ok()) return k.status();
      Skip();
      if (i_ >= s_.size() || s_[i_] != ':') return Error("expected ':'");
      ++i_;
      auto v = Value();
      if (!v.ok()) return v;
      o.emplace_back(*std::move(k), *std::move(v));
      Skip();
      if (i_ < s_.size() && s_[i_] == ',') { ++i_; continue; }
      if (i_ < s_.size() && s_[i_] == '}') { ++i_; return Json{o}; }
      return Error("expected ',' or '}'");
    }
  }
  static constexpr int kMaxDepth = 64;
  const std::string& s_;
  size_t i_ = 0;
  int depth_ = 0;
};

const Json* Find(const JsonObject& o, const std::string& key) {
  for (const auto& [k, v] : o)
    if (k == key) return &v;
  return nullptr;
}

absl::StatusOr<DType> ParseDType(const std::string& s) {
  static const std::pair<const char*, DType> kMap[] = {
      {"F32", DType::kF32},       {"BF16", DType::kBF16},        {"F16", DType::kF16},
      {"I32", DType::kI32},       {"I64", DType::kI64},          {"U8", DType::kU8},
      {"F8_E4M3", DType::kF8E4M3}, {"F8_E5M2", DType::kF8E5M2}};
  for (const auto& [name, t] : kMap)
    if (s == name) return t;
  return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", s));
}

std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

const char* SafeTensorsDType(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kF8E5M2: return "F8_E5M2";
  }
  return "?";
}

absl::StatusOr<SafeTensorsFile> ReadSafeTensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(path, ": ", why));
  };
  if (all.size() < 8) return bad("shorter than the 8-byte header length");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | static_cast<uint8_t>(all[i]);
  if (hlen > all.size() - 8) return bad(absl::StrCat("header length ", hlen, " exceeds the file"));
  const std::string header = all.substr(8, hlen);
  const size_t data0 = 8 + hlen, data_len = all.size() - data0;
  auto json = Parser(header).Parse();
  if (!json.ok()) return bad(std::string(json.status().message()));
  const auto* obj = std::get_if<JsonObject>(&json->v);
  if (!obj) return bad("header is not a JSON object");
  SafeTensorsFile file;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, val] : *obj) {
    const auto* o = std::get_if<JsonObject>(&val.v);
    if (!o) return bad(absl::StrCat("entry ", name, " is not an object"));
    if (name == "__metadata__") {
      for (const auto& [k, v] : *o) {
        const auto* sv = std::get_if<std::string>(&v.v);
        if (!sv) return bad(absl::StrCat("metadata ", k, " is not a string"));
        file.metadata[k] = *sv;
      }
      continue;
    }
    const Json* dt = Find(*o, "dtype");
    const Json* sh = Find(*o, "shape");
    const Json* off = Find(*o, "data_offsets");
    const auto* dts = dt ? std::get_if<std::string>(&dt->v) : nullptr;
    const auto* sha = sh ? std::get_if<JsonArray>(&sh->v) : nullptr;
    const auto* offa = off ? std::get_if<JsonArray>(&off->v) : nullptr;
    if (!dts || !sha || !offa || offa->size() != 2)
      return bad(absl::StrCat("tensor ", name, " lacks dtype/shape/data_offsets"));
    SafeTensor t;
    auto d = ParseDType(*dts);
    if (!d.ok()) return bad(absl::StrCat("tensor ", name, ": ", d.status().message()));
    t.dtype = *d;
    if (sha->size() > static_cast<size_t>(Shape::kMaxDims)) return bad(absl::StrCat("tensor ", name, ": too many dims"));
    std::vector<int64_t> dims;
    for (const Json& e : *sha) {
      const auto* n = std::get_if<int64_t>(&e.v);
      if (!n || *n < 0) return bad(absl::StrCat("tensor ", name, ": bad shape"));
      dims.push_back(*n);
    }
    // numel · element size without overflow (huge dims used to wrap around
    // to a plausible byte count, and Shape::numel overflowed).
    int64_t want = static_cast<int64_t>(SizeOf(t.dtype));
    for (int64_t n : dims) {
      if (__builtin_mul_overflow(want, n, &want))
        return bad(absl::StrCat("tensor ", name, ": shape too large"));
    }
    const Shape s(dims);
    t.shape = s;
    const auto* b = std::get_if<int64_t>(&(*offa)[0].v);
    const auto* e = std::get_if<int64_t>(&(*offa)[1].v);
    if (!b || !e || *b < 0 || *e < *b || static_cast<uint64_t>(*e) > data_len)
      return bad(absl::StrCat("tensor ", name, ": data_offsets out of range"));
    if (*e - *b != want)
      return bad(absl::StrCat("tensor ", name, ": ", *e - *b, " bytes for ", s.ToString(), " ",
                              *dts, " (", want, " expected)"));
    t.bytes.assign(all.begin() + data0 + *b, all.begin() + data0 + *e);
    ranges.emplace_back(*b, *e);
    file.tensors.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t pos = 0;
  for (const auto& [b, e] : ranges) {
    if (b != pos) return bad("tensor data overlaps or leaves holes");
    pos = e;
  }
  if (pos != data_len) return bad("trailing bytes after the last tensor");
  return file;
}

absl::Status WriteSafeTensors(const std::string& path, const SafeTensorsFile& file) {
  std::string header = "{";
  bool first = true;
  if (!file.metadata.empty()) {
    header += "\"__metadata__\":{";
    bool f2 = true;
    for (const auto& [k, v] : file.metadata) {
      absl::StrAppend(&header, f2 ? "" : ",", "\"", Escape(k), "\":\"", Escape(v), "\"");
      f2 = false;
    }
    header += "}";
    first = false;
  }
  uint64_t off = 0;
  for (const auto& [name, t] : file.tensors) {
    absl::StrAppend(&header, first ? "" : ",", "\"", Escape(name), "\":{\"dtype\":\"",
                    SafeTensorsDType(t.dtype), "\",\"shape\":[");
    for (int i = 0; i < t.shape.rank(); ++i) absl::StrAppend(&header, i ? "," : "", t.shape[i]);
    absl::StrAppend(&header, "],\"data_offsets\":[", off, ",", off + t.bytes.size(), "]}");
    off += t.bytes.size();
    first = false;
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  GTP_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> out, AtomicFileWriter::Create(path));
  const uint64_t n = header.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  GTP_RETURN_IF_ERROR(out->Append(len, 8));
  GTP_RETURN_IF_ERROR(out->Append(header));
  for (const auto& [name, t] : file.tensors) GTP_RETURN_IF_ERROR(out->Append(t.bytes.data(), t.bytes.size()));
  GTP_RETURN_IF_ERROR(out->Commit());
  return absl::OkStatus();
}

}  // namespace gtp::checkpoint
