#include "tools/ckpt/hf_import.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/safetensors.h"
#include "comm/local/local_communicator.h"
#include "core/dtype.h"
#include "core/status.h"
#include "google/protobuf/text_format.h"

namespace gtp::tools {

namespace {

using checkpoint::GlobalTensor;
using checkpoint::SafeTensor;

// ---- config.json: a small JSON reader (the whole grammar; numbers as doubles) ----

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool b = false;
  double num = 0;
  bool integral = false;  // the number was written without fraction or exponent
  std::string str;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> fields;

  const Json* Find(const std::string& key) const {
    for (const auto& [k, v] : fields)
      if (k == key) return &v;
    return nullptr;
  }
};

class JsonParser {
 public:
  JsonParser(const std::string& text, const std::string& origin) : s_(text), origin_(origin) {}
  absl::StatusOr<Json> Parse() {
    GTP_ASSIGN_OR_RETURN(Json j, Value(0));
    Skip();
    if (i_ != s_.size()) return Error("trailing characters");
    return j;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(origin_, " is not valid JSON: ", what, " at byte ", i_));
  }
  void Skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool Literal(const char* word) {
    const size_t n = std::strlen(word);
    if (s_.compare(i_, n, word) != 0) return false;
    i_ += n;
    return true;
  }
  absl::StatusOr<Json> Value(int depth) {
    if (depth > 64) return Error("nested too deeply");
    Skip();
    if (i_ >= s_.size()) return Error("unexpected end");
    Json j;
    const char c = s_[i_];
    if (c == '{' || c == '[') {
      const bool object = c == '{';
      const char close = object ? '}' : ']';
      j.kind = object ? Json::kObject : Json::kArray;
      ++i_;
      Skip();
      if (i_ < s_.size() && s_[i_] == close) {
        ++i_;
        return j;
      }
      while (true) {
        std::string key;
        if (object) {
          Skip();
          GTP_ASSIGN_OR_RETURN(key, String());
          Skip();
          if (i_ >= s_.size() || s_[i_] != ':') return Error("expected ':'");
          ++i_;
        }
        GTP_ASSIGN_OR_RETURN(Json v, Value(depth + 1));
        if (object) {
          j.fields.emplace_back(std::move(key), std::move(v));
        } else {
          j.items.push_back(std::move(v));
        }
        Skip();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == close) {
          ++i_;
          return j;
        }
        return Error(absl::StrCat("expected ',' or '", std::string(1, close), "'"));
      }
    }
    if (c == '"') {
      j.kind = Json::kString;
      GTP_ASSIGN_OR_RETURN(j.str, String());
      return j;
    }
    if (Literal("true")) {
      j.kind = Json::kBool;
      j.b = true;
      return j;
    }
    if (Literal("false")) {
      j.kind = Json::kBool;
      return j;
    }
    if (Literal("null")) return j;
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      const size_t start = i_;
      j.kind = Json::kNumber;
      j.integral = true;
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) ||
                                std::strchr("+-.eE", s_[i_]) != nullptr)) {
        if (std::strchr(".eE", s_[i_]) != nullptr) j.integral = false;
        ++i_;
      }
      const std::string text = s_.substr(start, i_ - start);
      char* end = nullptr;
      j.num = std::strtod(text.c_str(), &end);
      if (end != text.c_str() + text.size()) return Error(absl::StrCat("bad number ", text));
      return j;
    }
    return Error(absl::StrCat("unexpected '", std::string(1, c), "'"));
  }
  // Escapes are kept only as far as config keys need them (names are ASCII);
  // \uXXXX becomes '?', which no value read here depends on.
  absl::StatusOr<std::string> String() {
    if (i_ >= s_.size() || s_[i_] != '"') return Error("expected a string");
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) {
        const char e = s_[++i_];
        if (e == 'u') {
          i_ += 4;
          out += '?';
        } else {
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        }
      } else {
        out += s_[i_];
      }
      ++i_;
    }
    if (i_ >= s_.size()) return Error("unterminated string");
    ++i_;
    return out;
  }

  const std::string& s_;
  const std::string origin_;
  size_t i_ = 0;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  GTP_RETURN_IF_ERROR(checkpoint::CheckNotSpecialFile(path));  // a FIFO would block the open
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Typed reads of config.json fields, with the defaults transformers'
// config classes use when a field is absent (or null).
class Config {
 public:
  Config(const Json& j, std::string path) : j_(j), path_(std::move(path)) {}

  absl::StatusOr<int64_t> Int(const std::string& key, std::optional<int64_t> def) const {
    const Json* v = j_.Find(key);
    if (v == nullptr || v->kind == Json::kNull) {
      if (def) return *def;
      return absl::InvalidArgumentError(absl::StrCat(path_, " lacks \"", key, "\""));
    }
    if (v->kind != Json::kNumber || !v->integral || v->num < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": \"", key, "\" must be a positive integer"));
    }
    return static_cast<int64_t>(v->num);
  }
  absl::StatusOr<double> Real(const std::string& key, double def) const {
    const Json* v = j_.Find(key);
    if (v == nullptr || v->kind == Json::kNull) return def;
    if (v->kind != Json::kNumber) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": \"", key, "\" must be a number"));
    }
    return v->num;
  }
  absl::StatusOr<bool> Bool(const std::string& key, bool def) const {
    const Json* v = j_.Find(key);
    if (v == nullptr || v->kind == Json::kNull) return def;
    if (v->kind != Json::kBool) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": \"", key, "\" must be true or false"));
    }
    return v->b;
  }
  absl::StatusOr<std::string> Str(const std::string& key, const std::string& def) const {
    const Json* v = j_.Find(key);
    if (v == nullptr || v->kind == Json::kNull) return def;
    if (v->kind != Json::kString) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": \"", key, "\" must be a string"));
    }
    return v->str;
  }
  bool IsNullOrAbsent(const std::string& key) const {
    const Json* v = j_.Find(key);
    return v == nullptr || v->kind == Json::kNull;
  }
  // A setting gtp has no knob for must have the one value gtp computes with.
  absl::Status Require(const std::string& key, bool def, bool want, const std::string& why) const {
    GTP_ASSIGN_OR_RETURN(bool got, Bool(key, def));
    if (got != want) {
      return absl::UnimplementedError(absl::StrCat(
          path_, ": \"", key, "\": ", got ? "true" : "false", " is not supported (", why, ")"));
    }
    return absl::OkStatus();
  }
  const std::string& path() const { return path_; }

 private:
  const Json& j_;
  std::string path_;
};

// The norms' epsilon (model.norm_eps): a positive, finite float.
absl::StatusOr<float> ReadEps(const Config& c, const std::string& key, double def) {
  GTP_ASSIGN_OR_RETURN(double eps, c.Real(key, def));
  if (!(eps > 0) || !std::isfinite(eps) || eps >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.path(), ": \"", key, "\" is ", eps, "; a norm's epsilon is in (0, 1)"));
  }
  return static_cast<float>(eps);
}

// ---- tensors -----------------------------------------------------------------------

// The HF tensors by name, f32, each checked against the shape config.json
// implies when taken; Leftover() names what nothing took.
class Tensors {
 public:
  Tensors(std::map<std::string, SafeTensor> t, std::string dir, std::string arch)
      : t_(std::move(t)), dir_(std::move(dir)), arch_(std::move(arch)) {}

  absl::StatusOr<SafeTensor> Take(const std::string& name, const Shape& want) {
    auto it = t_.find(name);
    if (it == t_.end()) {
      return absl::NotFoundError(absl::StrCat(dir_, " lacks tensor ", name, " (a ", arch_,
                                              " with this config.json has it, shape ",
                                              want.ToString(), ")"));
    }
    SafeTensor t = std::move(it->second);
    t_.erase(it);
    if (t.shape != want) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " in ", dir_, " is ",
                                                     t.shape.ToString(), "; config.json implies ",
                                                     want.ToString()));
    }
    if (t.dtype == DType::kBF16 || t.dtype == DType::kF16) {  // widen: exact
      const int64_t n = t.shape.numel();
      std::vector<uint8_t> f(n * 4);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.bytes.data() + 2 * i, 2);
        const float x = t.dtype == DType::kBF16 ? BF16BitsToF32(h) : F16BitsToF32(h);
        std::memcpy(f.data() + 4 * i, &x, 4);
      }
      t.bytes = std::move(f);
      t.dtype = DType::kF32;
    } else if (t.dtype != DType::kF32) {
      return absl::UnimplementedError(absl::StrCat("tensor ", name, " in ", dir_, " is ",
                                                   checkpoint::SafeTensorsDType(t.dtype),
                                                   "; import reads F32, BF16 and F16"));
    }
    return t;
  }
  bool Has(const std::string& name) const { return t_.count(name) > 0; }
  // Buffers some writers save beside the weights (causal masks, RoPE
  // frequencies): recomputed by gtp, so dropped.
  void DropBuffers(const std::vector<std::string>& suffixes) {
    for (auto it = t_.begin(); it != t_.end();) {
      bool drop = false;
      for (const std::string& s : suffixes)
        drop |= it->first.size() >= s.size() &&
                it->first.compare(it->first.size() - s.size(), s.size(), s) == 0;
      it = drop ? t_.erase(it) : std::next(it);
    }
  }
  absl::Status Leftover(const std::string& hint) const {
    if (t_.empty()) return absl::OkStatus();
    std::vector<std::string> names;
    for (const auto& [k, v] : t_) {
      if (names.size() == 5) {
        names.push_back(absl::StrCat("... (", t_.size(), " in all)"));
        break;
      }
      names.push_back(k);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        dir_, " has tensors a ", arch_,
        " with this config.json lacks: ", absl::StrJoin(names, ", "), " (", hint, ")"));
  }

 private:
  std::map<std::string, SafeTensor> t_;
  std::string dir_, arch_;
};

GlobalTensor Global(const std::string& key, SafeTensor t) {
  GlobalTensor g;
  g.key = key;
  g.dtype = DType::kF32;
  g.shape = t.shape;
  g.bytes = std::move(t.bytes);
  return g;
}

// [in, out] (Conv1D) columns [c0, c0 + n) → [n, in] (gtp's [out, in]).
GlobalTensor TransposedCols(const std::string& key, const SafeTensor& t, int64_t c0, int64_t n) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  GlobalTensor g;
  g.key = key;
  g.dtype = DType::kF32;
  g.shape = Shape{n, rows};
  g.bytes.resize(n * rows * 4);
  const float* src = reinterpret_cast<const float*>(t.bytes.data());
  float* dst = reinterpret_cast<float*>(g.bytes.data());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) dst[j * rows + i] = src[i * cols + c0 + j];
  return g;
}

// Elements [begin, begin + n) of a 1-D tensor.
GlobalTensor Slice1D(const std::string& key, const SafeTensor& t, int64_t begin, int64_t n) {
  GlobalTensor g;
  g.key = key;
  g.dtype = DType::kF32;
  g.shape = Shape{n};
  g.bytes.assign(t.bytes.begin() + begin * 4, t.bytes.begin() + (begin + n) * 4);
  return g;
}

// A [V, C] vocabulary table as gtp stores it: [V_pad, C], pad rows zero.
GlobalTensor VocabTable(const std::string& key, SafeTensor t, int64_t v_pad) {
  const int64_t c = t.shape[1];
  t.bytes.resize(v_pad * c * 4, 0);
  t.shape = Shape{v_pad, c};
  return Global(key, std::move(t));
}

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

absl::StatusOr<std::map<std::string, SafeTensor>> ReadWeights(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (fs::exists(dir + "/model.safetensors")) {
    files.push_back(dir + "/model.safetensors");
  } else if (const std::string index = dir + "/model.safetensors.index.json"; fs::exists(index)) {
    // Sharded: {"weight_map": {tensor: file, ...}}.
    GTP_ASSIGN_OR_RETURN(std::string text, ReadFile(index));
    GTP_ASSIGN_OR_RETURN(Json j, JsonParser(text, index).Parse());
    const Json* map = j.Find("weight_map");
    if (map == nullptr || map->kind != Json::kObject) {
      return absl::InvalidArgumentError(absl::StrCat(index, " has no \"weight_map\" object"));
    }
    std::set<std::string> unique;
    for (const auto& [k, v] : map->fields) {
      if (v.kind != Json::kString)
        return absl::InvalidArgumentError(absl::StrCat(index, ": ", k, " maps to no file"));
      unique.insert(dir + "/" + v.str);
    }
    files.assign(unique.begin(), unique.end());
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir,
                     " has neither model.safetensors nor model.safetensors.index.json "
                     "(pytorch_model.bin is not read: save with safe_serialization=True)"));
  }
  std::map<std::string, SafeTensor> all;
  for (const std::string& f : files) {
    GTP_ASSIGN_OR_RETURN(checkpoint::SafeTensorsFile st, checkpoint::ReadSafeTensors(f));
    for (auto& [k, v] : st.tensors) {
      if (!all.emplace(k, std::move(v)).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", k, " is in more than one file of ", dir));
      }
    }
  }
  return all;
}

// ---- the two families ----------------------------------------------------------------

absl::Status ReadGpt2(const Config& c, Tensors& t, HfModel* out) {
  recipes::proto::Model& m = out->model;
  GTP_ASSIGN_OR_RETURN(const int64_t V, c.Int("vocab_size", 50257));
  GTP_ASSIGN_OR_RETURN(const int64_t T, c.Int("n_positions", 1024));
  GTP_ASSIGN_OR_RETURN(const int64_t C, c.Int("n_embd", 768));
  GTP_ASSIGN_OR_RETURN(const int64_t L, c.Int("n_layer", 12));
  GTP_ASSIGN_OR_RETURN(const int64_t NH, c.Int("n_head", 12));
  GTP_ASSIGN_OR_RETURN(const int64_t F, c.Int("n_inner", 4 * C));
  GTP_ASSIGN_OR_RETURN(const double init, c.Real("initializer_range", 0.02));
  if (C % NH != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.path(), ": n_embd ", C, " is not divisible by n_head ", NH));
  }
  GTP_ASSIGN_OR_RETURN(const std::string act, c.Str("activation_function", "gelu_new"));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    return absl::UnimplementedError(
        absl::StrCat(c.path(), ": activation_function \"", act,
                     "\" is not supported (gtp's GELU is the tanh form: "
                     "gelu_new / gelu_pytorch_tanh)"));
  }
  GTP_ASSIGN_OR_RETURN(const float eps, ReadEps(c, "layer_norm_epsilon", 1e-5));
  GTP_RETURN_IF_ERROR(
      c.Require("tie_word_embeddings", true, true, "gtp's GPT-2 ties the LM head to wte"));
  GTP_RETURN_IF_ERROR(
      c.Require("scale_attn_weights", true, true, "gtp scales attention by 1/sqrt(head dim)"));
  GTP_RETURN_IF_ERROR(
      c.Require("scale_attn_by_inverse_layer_idx", false, false, "no per-layer attention scale"));
  GTP_RETURN_IF_ERROR(c.Require("add_cross_attention", false, false, "decoder-only"));
  m.set_vocab_size(V);
  m.set_seq_len(T);
  m.set_n_layer(static_cast<int32_t>(L));
  m.set_n_embd(C);
  m.set_n_head(NH);
  m.set_ffn_hidden(F);
  m.set_norm("layernorm");
  m.set_norm_eps(eps);
  m.set_activation("gelu");
  m.set_init_std(static_cast<float>(init));
  m.set_vocab_pad_multiple(128);

  // GPT2LMHeadModel saves "transformer."-prefixed names; a bare GPT2Model
  // (and the original OpenAI conversion) has none.
  const std::string pre = t.Has("transformer.wte.weight") ? "transformer." : "";
  t.DropBuffers({".attn.bias", ".attn.masked_bias"});
  const int64_t v_pad = RoundUp(V, m.vocab_pad_multiple());
  std::vector<GlobalTensor>& g = out->tensors;
  GTP_ASSIGN_OR_RETURN(SafeTensor wte, t.Take(pre + "wte.weight", Shape{V, C}));
  if (t.Has("lm_head.weight")) {  // saved tied copies must be the same tensor
    GTP_ASSIGN_OR_RETURN(SafeTensor head, t.Take("lm_head.weight", Shape{V, C}));
    if (head.bytes != wte.bytes) {
      return absl::UnimplementedError(
          "lm_head.weight differs from wte.weight: gtp's GPT-2 has a tied head");
    }
  }
  g.push_back(VocabTable("wte.weight", std::move(wte), v_pad));
  GTP_ASSIGN_OR_RETURN(SafeTensor wpe, t.Take(pre + "wpe.weight", Shape{T, C}));
  g.push_back(Global("wpe.weight", std::move(wpe)));
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = absl::StrCat(pre, "h.", l, "."), p = absl::StrCat("h.", l, ".");
    GTP_ASSIGN_OR_RETURN(SafeTensor qkv_w, t.Take(h + "attn.c_attn.weight", Shape{C, 3 * C}));
    GTP_ASSIGN_OR_RETURN(SafeTensor qkv_b, t.Take(h + "attn.c_attn.bias", Shape{3 * C}));
    const char* qkv[] = {"q", "k", "v"};
    for (int j = 0; j < 3; ++j) {
      g.push_back(TransposedCols(absl::StrCat(p, "attn.", qkv[j], ".weight"), qkv_w, j * C, C));
      g.push_back(Slice1D(absl::StrCat(p, "attn.", qkv[j], ".bias"), qkv_b, j * C, C));
    }
    struct Lin {
      const char *ours, *theirs;
      int64_t in, out;
    };
    for (const Lin& x : {Lin{"attn.o", "attn.c_proj", C, C}, Lin{"mlp.fc", "mlp.c_fc", C, F},
                         Lin{"mlp.proj", "mlp.c_proj", F, C}}) {
      GTP_ASSIGN_OR_RETURN(SafeTensor w, t.Take(h + x.theirs + ".weight", Shape{x.in, x.out}));
      GTP_ASSIGN_OR_RETURN(SafeTensor b, t.Take(h + x.theirs + ".bias", Shape{x.out}));
      g.push_back(TransposedCols(p + x.ours + ".weight", w, 0, x.out));
      g.push_back(Global(p + x.ours + ".bias", std::move(b)));
    }
    for (const auto& [ours, theirs] : {std::pair{"ln1", "ln_1"}, std::pair{"ln2", "ln_2"}})
      for (const char* n : {"weight", "bias"}) {
        GTP_ASSIGN_OR_RETURN(SafeTensor w, t.Take(absl::StrCat(h, theirs, ".", n), Shape{C}));
        g.push_back(Global(absl::StrCat(p, ours, ".", n), std::move(w)));
      }
  }
  for (const char* n : {"weight", "bias"}) {
    GTP_ASSIGN_OR_RETURN(SafeTensor w, t.Take(absl::StrCat(pre, "ln_f.", n), Shape{C}));
    g.push_back(Global(absl::StrCat("ln_f.", n), std::move(w)));
  }
  return t.Leftover(absl::StrCat("n_layer is ", L));
}

absl::Status ReadLlama(const Config& c, Tensors& t, HfModel* out) {
  recipes::proto::Model& m = out->model;
  GTP_ASSIGN_OR_RETURN(const int64_t V, c.Int("vocab_size", 32000));
  GTP_ASSIGN_OR_RETURN(const int64_t C, c.Int("hidden_size", 4096));
  GTP_ASSIGN_OR_RETURN(const int64_t F, c.Int("intermediate_size", 11008));
  GTP_ASSIGN_OR_RETURN(const int64_t L, c.Int("num_hidden_layers", 32));
  GTP_ASSIGN_OR_RETURN(const int64_t NH, c.Int("num_attention_heads", 32));
  GTP_ASSIGN_OR_RETURN(const int64_t KV, c.Int("num_key_value_heads", NH));
  GTP_ASSIGN_OR_RETURN(const int64_t T, c.Int("max_position_embeddings", 2048));
  GTP_ASSIGN_OR_RETURN(const double theta, c.Real("rope_theta", 10000.0));
  GTP_ASSIGN_OR_RETURN(const double init, c.Real("initializer_range", 0.02));
  if (C % NH != 0 || NH % KV != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.path(), ": hidden_size ", C, ", num_attention_heads ", NH, " and num_key_value_heads ",
        KV, " must divide (hidden by heads, heads by kv heads)"));
  }
  const int64_t HS = C / NH;
  GTP_ASSIGN_OR_RETURN(const int64_t head_dim, c.Int("head_dim", HS));
  if (head_dim != HS) {
    return absl::UnimplementedError(absl::StrCat(c.path(), ": head_dim ", head_dim,
                                                 " is not hidden_size / "
                                                 "num_attention_heads = ",
                                                 HS, " (gtp's heads split C)"));
  }
  GTP_ASSIGN_OR_RETURN(const std::string act, c.Str("hidden_act", "silu"));
  if (act != "silu") {
    return absl::UnimplementedError(absl::StrCat(
        c.path(), ": hidden_act \"", act, "\" is not supported (gtp's SwiGLU gates with silu)"));
  }
  if (!c.IsNullOrAbsent("rope_scaling")) {
    return absl::UnimplementedError(absl::StrCat(c.path(),
                                                 ": rope_scaling is not supported (gtp's RoPE is "
                                                 "unscaled: angle t·theta^(-2d/HS))"));
  }
  GTP_ASSIGN_OR_RETURN(const float eps, ReadEps(c, "rms_norm_eps", 1e-6));
  GTP_RETURN_IF_ERROR(
      c.Require("tie_word_embeddings", false, false, "gtp's Llama export has an untied lm_head"));
  GTP_RETURN_IF_ERROR(
      c.Require("attention_bias", false, false, "gtp's Llama-style layers have no biases"));
  GTP_RETURN_IF_ERROR(
      c.Require("mlp_bias", false, false, "gtp's Llama-style layers have no biases"));
  m.set_vocab_size(V);
  m.set_seq_len(T);
  m.set_n_layer(static_cast<int32_t>(L));
  m.set_n_embd(C);
  m.set_n_head(NH);
  m.set_n_kv_head(KV);
  m.set_ffn_hidden(F);
  m.set_norm("rmsnorm");
  m.set_norm_eps(eps);
  m.set_activation("swiglu");
  m.set_no_bias(true);
  m.set_untied_embeddings(true);
  m.set_rope(true);
  m.set_rope_theta(static_cast<float>(theta));
  m.set_init_std(static_cast<float>(init));
  m.set_vocab_pad_multiple(128);

  t.DropBuffers({".rotary_emb.inv_freq"});
  const int64_t v_pad = RoundUp(V, m.vocab_pad_multiple());
  std::vector<GlobalTensor>& g = out->tensors;
  GTP_ASSIGN_OR_RETURN(SafeTensor wte, t.Take("model.embed_tokens.weight", Shape{V, C}));
  g.push_back(VocabTable("wte.weight", std::move(wte), v_pad));
  GTP_ASSIGN_OR_RETURN(SafeTensor head, t.Take("lm_head.weight", Shape{V, C}));
  g.push_back(VocabTable("lm_head.weight", std::move(head), v_pad));
  GTP_ASSIGN_OR_RETURN(SafeTensor norm, t.Take("model.norm.weight", Shape{C}));
  g.push_back(Global("ln_f.weight", std::move(norm)));
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = absl::StrCat("model.layers.", l, "."), p = absl::StrCat("h.", l, ".");
    struct Map {
      const char *ours, *theirs;
      Shape shape;
    };
    for (const Map& x : {Map{"attn.q.weight", "self_attn.q_proj.weight", Shape{C, C}},
                         Map{"attn.k.weight", "self_attn.k_proj.weight", Shape{KV * HS, C}},
                         Map{"attn.v.weight", "self_attn.v_proj.weight", Shape{KV * HS, C}},
                         Map{"attn.o.weight", "self_attn.o_proj.weight", Shape{C, C}},
                         Map{"mlp.proj.weight", "mlp.down_proj.weight", Shape{C, F}},
                         Map{"ln1.weight", "input_layernorm.weight", Shape{C}},
                         Map{"ln2.weight", "post_attention_layernorm.weight", Shape{C}}}) {
      GTP_ASSIGN_OR_RETURN(SafeTensor w, t.Take(h + x.theirs, x.shape));
      g.push_back(Global(p + x.ours, std::move(w)));
    }
    // gtp fuses the SwiGLU input projections as fc = [gate; up] along out.
    GTP_ASSIGN_OR_RETURN(SafeTensor gate, t.Take(h + "mlp.gate_proj.weight", Shape{F, C}));
    GTP_ASSIGN_OR_RETURN(SafeTensor up, t.Take(h + "mlp.up_proj.weight", Shape{F, C}));
    gate.bytes.insert(gate.bytes.end(), up.bytes.begin(), up.bytes.end());
    gate.shape = Shape{2 * F, C};
    g.push_back(Global(p + "mlp.fc.weight", std::move(gate)));
  }
  return t.Leftover(absl::StrCat("num_hidden_layers is ", L));
}

}  // namespace

absl::StatusOr<HfModel> ReadHfModel(const std::string& dir) {
  const std::string path = dir + "/config.json";
  GTP_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  GTP_ASSIGN_OR_RETURN(Json j, JsonParser(text, path).Parse());
  if (j.kind != Json::kObject)
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON object"));
  Config c(j, path);
  // architectures names the class; model_type is the fallback of older files.
  std::string arch;
  if (const Json* a = j.Find("architectures"); a != nullptr && a->kind == Json::kArray) {
    if (a->items.size() != 1 || a->items[0].kind != Json::kString) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": \"architectures\" must name one class"));
    }
    arch = a->items[0].str;
  } else {
    GTP_ASSIGN_OR_RETURN(std::string type, c.Str("model_type", ""));
    arch = type == "gpt2"      ? "GPT2LMHeadModel"
           : type == "llama"   ? "LlamaForCausalLM"
           : type == "mistral" ? "MistralForCausalLM"
                               : type;
  }
  if (arch != "GPT2LMHeadModel" && arch != "LlamaForCausalLM" && arch != "MistralForCausalLM") {
    return absl::UnimplementedError(
        absl::StrCat(path, ": architecture \"", arch,
                     "\" is not supported (import reads GPT2LMHeadModel, LlamaForCausalLM and "
                     "MistralForCausalLM)"));
  }
  if (arch == "MistralForCausalLM") {
    // Mistral is Llama's layers with sliding-window attention; a window that
    // covers every position is full causal attention, which gtp has.
    GTP_ASSIGN_OR_RETURN(const int64_t T, c.Int("max_position_embeddings", 2048));
    if (!c.IsNullOrAbsent("sliding_window")) {
      GTP_ASSIGN_OR_RETURN(const int64_t w, c.Int("sliding_window", 0));
      if (w < T) {
        return absl::UnimplementedError(absl::StrCat(
            path, ": sliding_window ", w, " is shorter than max_position_embeddings ", T,
            " (gtp's attention sees every earlier position: sliding_window null or >= ", T,
            " imports)"));
      }
    }
  }
  GTP_ASSIGN_OR_RETURN(auto weights, ReadWeights(dir));
  Tensors t(std::move(weights), dir, arch);
  HfModel out;
  out.architecture = arch;
  // Dropout: a training choice (the forward at inference is the same), which
  // gtp's layers do not have. Imported, and named, rather than refused.
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout",
                          "attention_dropout", "hidden_dropout", "mlp_dropout"}) {
    if (c.IsNullOrAbsent(key)) continue;
    GTP_ASSIGN_OR_RETURN(const double p, c.Real(key, 0.0));
    if (p != 0) out.training_only.push_back(absl::StrCat(key, " ", p));
  }
  if (arch == "GPT2LMHeadModel") {
    GTP_RETURN_IF_ERROR(ReadGpt2(c, t, &out));
  } else {
    GTP_RETURN_IF_ERROR(ReadLlama(c, t, &out));
  }
  return out;
}

absl::Status WriteCheckpoint(const HfModel& m, const std::string& root, const std::string& source) {
  if (std::filesystem::exists(root + "/latest")) {
    return absl::FailedPreconditionError(
        absl::StrCat(root, " already holds a checkpoint: import into a new directory"));
  }
  recipes::proto::Recipe r;
  r.set_name("hf_import");
  *r.mutable_model() = m.model;
  std::string recipe;
  google::protobuf::TextFormat::PrintToString(r, &recipe);
  // Host views of the global tensors: one rank holds every piece whole.
  // Save only reads them (no copy: a model's weights may be most of memory).
  std::vector<checkpoint::TensorPiece> pieces;
  for (const auto& g : m.tensors) {
    checkpoint::TensorPiece p;
    p.key = g.key;
    p.global_shape = g.shape;
    p.data =
        Tensor::Wrap(const_cast<uint8_t*>(g.bytes.data()), g.shape, DType::kF32, Device::Cpu());
    pieces.push_back(std::move(p));
  }
  checkpoint::SaveOptions so;
  so.iteration = 0;
  so.extra["recipe"] = recipe;
  so.extra["imported_from"] = absl::StrCat(m.architecture, " ", source);
  so.extra["layout"] = "world=1 (ckpt import)";
  return comm::RunRanks(
      1, [&](comm::Communicator& w) { return checkpoint::Save(root, pieces, w, so); });
}

}  // namespace gtp::tools
