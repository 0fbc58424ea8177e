// tools/ckpt — look inside and convert gtp checkpoints.
//
//   ckpt inspect <checkpoint root or iter_ dir>
//       iteration, layout, every tensor's dtype, global shape, pieces and bytes
//   ckpt export --format safetensors [--names gtp|hf-gpt2|hf-llama] [--vocab V]
//               <ckpt dir> <out.safetensors>
//       full unsharded tensors; --names hf-gpt2 gives the names and layouts of a
//       Hugging Face GPT2LMHeadModel (fused c_attn, Conv1D [in, out] weights),
//       hf-llama those of LlamaForCausalLM (split gate/up); --vocab strips
//       vocabulary padding. Weights are f32: a mixed-precision (bf16) run's f32
//       master copies (`<name>/master`, the optimizer's), else the saved
//       values widened
//   ckpt export --format hf [--vocab_json V --merges M] <ckpt dir> <out dir>
//       a Hugging Face model directory: model.safetensors (GPT-2 or Llama names,
//       chosen by the run's recipe in the metadata: RMSNorm → Llama) and
//       config.json, so AutoModelForCausalLM.from_pretrained(<out dir>) loads it.
//       A run with a GPT-2 BPE tokenizer (--vocab_json/--merges, else the
//       recipe's data.tokenizer_vocab/merges) also gets vocab.json and
//       merges.txt (copied byte for byte), tokenizer_config.json (GPT2Tokenizer,
//       bos/eos/unk <|endoftext|>, model_max_length = seq_len) and
//       special_tokens_map.json, so AutoTokenizer.from_pretrained(<out dir>)
//       works too, and config.json gets bos/eos_token_id. The tokenizer's ids
//       must fit model.vocab_size. A run that recorded a tokenizer.json
//       (data.tokenizer_json) gets it copied byte for byte and a
//       tokenizer_config.json (PreTrainedTokenizerFast, its end-of-text token
//       as eos). A run that recorded a SentencePiece tokenizer.model
//       (data.tokenizer_model) gets it copied byte for byte as
//       tokenizer.model, with tokenizer_config.json (LlamaTokenizer, no BOS/EOS
//       added, as the dataset was tokenized), special_tokens_map.json and its
//       <s>/</s> ids in config.json. Byte-level runs get no tokenizer files
//       (the output line says so).
//   ckpt import --format hf <hf model dir> <out checkpoint dir>
//       the inverse: config.json + model.safetensors (or its sharded index) of
//       a GPT2LMHeadModel, LlamaForCausalLM or MistralForCausalLM → a one-rank gtp checkpoint at
//       iteration 0 (f32 weights, recipe model section in the metadata), which
//       any layout loads: start a run from it with checkpoint.init_from, or
//       export it again (import → export gives back the same tensors, byte for
//       byte). Conventions and limits: tools/ckpt/hf_import.h. E.g.
//         ckpt import --format hf models/gpt2 runs/gpt2_base
//         train --set checkpoint.init_from=$PWD/runs/gpt2_base,model.n_layer=12,...
//       (the run's model settings must match the imported recipe: ckpt inspect
//       shows it; a mismatch is refused naming the tensor or setting)
//
// Errors print one line naming the problem and exit non-zero.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/metadata.pb.h"
#include "checkpoint/safetensors.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/user_path.h"
#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/hf_tokenizer.h"
#include "data/tokenizer/sentencepiece_tokenizer.h"
#include "google/protobuf/text_format.h"
#include "recipes/trainer/config.pb.h"
#include "tools/ckpt/hf_import.h"

namespace gtp::checkpoint {
namespace {

// <root> (with `latest`) or an iter_ directory → the iter_ directory.
absl::StatusOr<std::string> ResolveDir(const std::string& path) {
  if (std::filesystem::exists(path + "/metadata.pb")) return path;
  GTP_ASSIGN_OR_RETURN(int64_t it, LatestIteration(path));
  return IterationDir(path, it);
}

absl::Status Inspect(const std::string& path) {
  GTP_ASSIGN_OR_RETURN(std::string dir, ResolveDir(path));
  GTP_ASSIGN_OR_RETURN(proto::Metadata meta, ReadCheckpointMetadata(dir));
  std::printf("%s: iteration %lld, format %u, saved by %d ranks\n", dir.c_str(),
              static_cast<long long>(meta.iteration()), meta.format_version(), meta.world_size());
  for (const auto& [k, v] : meta.extra()) {
    if (k == "recipe") continue;  // whole, below
    std::string shown = v.size() > 120 ? v.substr(0, 117) + "..." : v;
    for (char& c : shown) if (c == '\n') c = ' ';
    std::printf("  %s: %s\n", k.c_str(), shown.c_str());
  }
  if (auto it = meta.extra().find("recipe"); it != meta.extra().end()) {
    // Whole (it used to be cut at 120 characters): the run's settings, as
    // the trainer resolved them; usable as --config once unindented.
    std::printf("  recipe:\n");
    for (absl::string_view line : absl::StrSplit(it->second, '\n', absl::SkipEmpty())) {
      std::printf("    %.*s\n", static_cast<int>(line.size()), line.data());
    }
  }
  int64_t total = 0;
  std::map<int, int64_t> per_rank;
  std::printf("  %-40s %-6s %-16s %7s %12s\n", "tensor", "dtype", "shape", "pieces", "bytes");
  for (const auto& e : meta.tensors()) {
    int64_t bytes = 0;
    for (const auto& p : e.pieces()) {
      bytes += p.bytes();
      per_rank[p.writer_rank()] += p.bytes();
    }
    total += bytes;
    std::string shape = "[";
    for (int i = 0; i < e.global_shape_size(); ++i) absl::StrAppend(&shape, i ? ", " : "", e.global_shape(i));
    shape += "]";
    std::printf("  %-40s %-6s %-16s %7d %12lld\n", e.key().c_str(), e.dtype().c_str(), shape.c_str(),
                e.pieces_size(), static_cast<long long>(bytes));
  }
  std::printf("  total %lld bytes in %d tensors;", static_cast<long long>(total), meta.tensors_size());
  for (const auto& [r, b] : per_rank) std::printf(" rank %d: %lld", r, static_cast<long long>(b));
  std::printf("\n");
  return absl::OkStatus();
}

SafeTensor ToSafe(const GlobalTensor& g) {
  SafeTensor t;
  t.dtype = g.dtype;
  t.shape = g.shape;
  t.bytes = g.bytes;
  return t;
}

// [out, in] f32 → [in, out] (Conv1D layout).
SafeTensor Transposed(const GlobalTensor& g) {
  SafeTensor t = ToSafe(g);
  const int64_t r = g.shape[0], c = g.shape[1];
  t.shape = Shape{c, r};
  const float* src = reinterpret_cast<const float*>(g.bytes.data());
  float* dst = reinterpret_cast<float*>(t.bytes.data());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) dst[j * r + i] = src[i * c + j];
  return t;
}

SafeTensor Concat(const std::vector<SafeTensor>& parts, int axis) {
  SafeTensor t = parts[0];
  if (axis == 0) {
    int64_t rows = 0;
    t.bytes.clear();
    for (const auto& p : parts) {
      rows += p.shape[0];
      t.bytes.insert(t.bytes.end(), p.bytes.begin(), p.bytes.end());
    }
    t.shape[0] = rows;
    return t;
  }
  // axis 1 of [r, c_i] tensors.
  const int64_t r = parts[0].shape[0];
  int64_t c = 0;
  for (const auto& p : parts) c += p.shape[1];
  t.shape = Shape{r, c};
  t.bytes.assign(r * c * 4, 0);
  float* dst = reinterpret_cast<float*>(t.bytes.data());
  int64_t off = 0;
  for (const auto& p : parts) {
    const float* src = reinterpret_cast<const float*>(p.bytes.data());
    for (int64_t i = 0; i < r; ++i)
      std::memcpy(dst + i * c + off, src + i * p.shape[1], p.shape[1] * 4);
    off += p.shape[1];
  }
  return t;
}

// gtp GPT-2 names → Hugging Face GPT2LMHeadModel names and layouts.
absl::StatusOr<SafeTensorsFile> ToHfGpt2(const std::vector<GlobalTensor>& all, int64_t vocab) {
  std::map<std::string, const GlobalTensor*> by;
  for (const auto& g : all) by[g.key] = &g;
  auto get = [&](const std::string& k) -> absl::StatusOr<const GlobalTensor*> {
    auto it = by.find(k);
    if (it == by.end()) return absl::NotFoundError("checkpoint lacks " + k + " (not a GPT-2 model?)");
    return it->second;
  };
  SafeTensorsFile f;
  f.metadata["format"] = "pt";
  GTP_ASSIGN_OR_RETURN(const GlobalTensor* wte, get("wte.weight"));
  SafeTensor w = ToSafe(*wte);
  if (vocab > 0 && vocab < w.shape[0]) {  // strip vocabulary padding
    w.bytes.resize(vocab * w.shape[1] * 4);
    w.shape[0] = vocab;
  }
  f.tensors["transformer.wte.weight"] = w;
  GTP_ASSIGN_OR_RETURN(const GlobalTensor* wpe, get("wpe.weight"));
  f.tensors["transformer.wpe.weight"] = ToSafe(*wpe);
  for (const char* n : {"weight", "bias"}) {
    GTP_ASSIGN_OR_RETURN(const GlobalTensor* t, get(absl::StrCat("ln_f.", n)));
    f.tensors[absl::StrCat("transformer.ln_f.", n)] = ToSafe(*t);
  }
  for (int l = 0;; ++l) {
    const std::string p = absl::StrCat("h.", l, ".");
    if (!by.count(p + "attn.q.weight")) break;
    const std::string h = absl::StrCat("transformer.h.", l, ".");
    std::vector<SafeTensor> qkv_w, qkv_b;
    for (const char* x : {"q", "k", "v"}) {
      GTP_ASSIGN_OR_RETURN(const GlobalTensor* wt, get(p + "attn." + x + ".weight"));
      GTP_ASSIGN_OR_RETURN(const GlobalTensor* bt, get(p + "attn." + x + ".bias"));
      qkv_w.push_back(Transposed(*wt));
      qkv_b.push_back(ToSafe(*bt));
    }
    f.tensors[h + "attn.c_attn.weight"] = Concat(qkv_w, 1);
    f.tensors[h + "attn.c_attn.bias"] = Concat(qkv_b, 0);
    const std::pair<const char*, const char*> lin[] = {
        {"attn.o", "attn.c_proj"}, {"mlp.fc", "mlp.c_fc"}, {"mlp.proj", "mlp.c_proj"}};
    for (const auto& [ours, theirs] : lin) {
      GTP_ASSIGN_OR_RETURN(const GlobalTensor* wt, get(p + ours + ".weight"));
      GTP_ASSIGN_OR_RETURN(const GlobalTensor* bt, get(p + ours + ".bias"));
      f.tensors[h + theirs + ".weight"] = Transposed(*wt);
      f.tensors[h + theirs + ".bias"] = ToSafe(*bt);
    }
    const std::pair<const char*, const char*> norms[] = {{"ln1", "ln_1"}, {"ln2", "ln_2"}};
    for (const auto& [ours, theirs] : norms)
      for (const char* n : {"weight", "bias"}) {
        GTP_ASSIGN_OR_RETURN(const GlobalTensor* t, get(p + ours + "." + n));
        f.tensors[h + theirs + "." + n] = ToSafe(*t);
      }
  }
  return f;
}

// Rows [begin, end) of a row-major f32 [R, C] tensor.
SafeTensor Rows(const GlobalTensor& g, int64_t begin, int64_t end) {
  SafeTensor t = ToSafe(g);
  const int64_t c = g.shape.rank() >= 2 ? g.shape[1] : 1;
  t.bytes.assign(g.bytes.begin() + begin * c * 4, g.bytes.begin() + end * c * 4);
  t.shape = g.shape.rank() >= 2 ? Shape{end - begin, c} : Shape{end - begin};
  return t;
}

// gtp Llama-style names (RMSNorm, fused [gate; up], RoPE, untied) → Hugging
// Face LlamaForCausalLM names. Both use [out, in] Linear weights and the
// rotate-half RoPE convention, so weights map without permutation.
absl::StatusOr<SafeTensorsFile> ToHfLlama(const std::vector<GlobalTensor>& all, int64_t vocab) {
  std::map<std::string, const GlobalTensor*> by;
  for (const auto& g : all) by[g.key] = &g;
  auto get = [&](const std::string& k) -> absl::StatusOr<const GlobalTensor*> {
    auto it = by.find(k);
    if (it == by.end()) return absl::NotFoundError("checkpoint lacks " + k + " (not a Llama-style model?)");
    return it->second;
  };
  auto vocab_rows = [&](const GlobalTensor& g) {
    return Rows(g, 0, vocab > 0 && vocab < g.shape[0] ? vocab : g.shape[0]);
  };
  SafeTensorsFile f;
  f.metadata["format"] = "pt";
  GTP_ASSIGN_OR_RETURN(const GlobalTensor* wte, get("wte.weight"));
  f.tensors["model.embed_tokens.weight"] = vocab_rows(*wte);
  GTP_ASSIGN_OR_RETURN(const GlobalTensor* head, get("lm_head.weight"));
  f.tensors["lm_head.weight"] = vocab_rows(*head);
  GTP_ASSIGN_OR_RETURN(const GlobalTensor* norm, get("ln_f.weight"));
  f.tensors["model.norm.weight"] = ToSafe(*norm);
  for (int l = 0;; ++l) {
    const std::string p = absl::StrCat("h.", l, ".");
    if (!by.count(p + "attn.q.weight")) break;
    const std::string h = absl::StrCat("model.layers.", l, ".");
    const std::pair<const char*, const char*> map[] = {
        {"attn.q.weight", "self_attn.q_proj.weight"}, {"attn.k.weight", "self_attn.k_proj.weight"},
        {"attn.v.weight", "self_attn.v_proj.weight"}, {"attn.o.weight", "self_attn.o_proj.weight"},
        {"mlp.proj.weight", "mlp.down_proj.weight"},  {"ln1.weight", "input_layernorm.weight"},
        {"ln2.weight", "post_attention_layernorm.weight"}};
    for (const auto& [ours, theirs] : map) {
      GTP_ASSIGN_OR_RETURN(const GlobalTensor* t, get(p + ours));
      f.tensors[h + theirs] = ToSafe(*t);
    }
    GTP_ASSIGN_OR_RETURN(const GlobalTensor* fc, get(p + "mlp.fc.weight"));  // [gate; up]
    const int64_t H = fc->shape[0] / 2;
    f.tensors[h + "mlp.gate_proj.weight"] = Rows(*fc, 0, H);
    f.tensors[h + "mlp.up_proj.weight"] = Rows(*fc, H, 2 * H);
  }
  return f;
}

// The weights (keys without '/') as f32: where the optimizer kept an f32
// master copy (`<key>/master`, bf16 runs) that copy, else the saved values
// (bf16 widened); optimizer state dropped.
absl::StatusOr<std::vector<GlobalTensor>> F32Weights(std::vector<GlobalTensor> all) {
  std::map<std::string, GlobalTensor*> masters;
  for (auto& g : all) {
    const size_t slash = g.key.find('/');
    if (slash != std::string::npos && g.key.substr(slash + 1) == "master")
      masters[g.key.substr(0, slash)] = &g;
  }
  std::vector<GlobalTensor> out;
  for (auto& g : all) {
    if (g.key.find('/') != std::string::npos) continue;
    auto m = masters.find(g.key);
    if (m != masters.end()) {
      GlobalTensor w = std::move(*m->second);
      w.key = g.key;
      if (w.dtype != DType::kF32 || w.shape.numel() != g.shape.numel()) {
        return absl::DataLossError(
            absl::StrCat(g.key, "/master is not an f32 tensor of ", g.key, "'s size"));
      }
      w.shape = g.shape;
      out.push_back(std::move(w));
    } else if (g.dtype == DType::kBF16) {
      const int64_t n = g.shape.numel();
      std::vector<uint8_t> f(n * 4);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, g.bytes.data() + 2 * i, 2);
        const float x = BF16BitsToF32(b);
        std::memcpy(f.data() + 4 * i, &x, 4);
      }
      g.bytes = std::move(f);
      g.dtype = DType::kF32;
      out.push_back(std::move(g));
    } else if (g.dtype == DType::kF32) {
      out.push_back(std::move(g));
    } else {
      return absl::UnimplementedError(
          absl::StrCat(g.key, " is ", DTypeName(g.dtype), ": export handles f32 and bf16"));
    }
  }
  return out;
}

// The model.vocab_size of the run that wrote `dir` (0: its metadata has no
// recipe — not written by the trainer).
absl::StatusOr<int64_t> RecipeVocab(const std::string& dir) {
  GTP_ASSIGN_OR_RETURN(proto::Metadata meta, ReadCheckpointMetadata(dir));
  const auto it = meta.extra().find("recipe");
  if (it == meta.extra().end()) return 0;
  recipes::proto::Recipe r;
  if (!google::protobuf::TextFormat::ParseFromString(it->second, &r)) {
    return absl::DataLossError(absl::StrCat(dir, ": the recipe in its metadata does not parse"));
  }
  return r.model().vocab_size();
}

absl::Status Export(const std::string& path, const std::string& out, const std::string& names,
                    int64_t vocab) {
  // Checked before anything is read or written: an existing directory was
  // found only by the final rename, which left the whole export as OUT.tmp.
  {
    std::error_code ec;
    if (std::filesystem::is_directory(out, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat(out, " is a directory: --format safetensors writes one file (e.g. ",
                       (std::filesystem::path(out) / "model.safetensors").string(),
                       "); --format hf writes a model directory"));
    }
  }
  GTP_ASSIGN_OR_RETURN(std::string dir, ResolveDir(path));
  if (vocab > 0) {
    // --vocab strips padding rows only: below the model's vocabulary it
    // would cut real tokens' rows.
    if (names == "gtp") {
      return absl::InvalidArgumentError(
          "--vocab strips vocabulary padding of --names hf-gpt2 or hf-llama; --names gtp "
          "exports the tables as trained (drop --vocab)");
    }
    GTP_ASSIGN_OR_RETURN(const int64_t model_vocab, RecipeVocab(dir));
    if (model_vocab > 0 && vocab < model_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--vocab ", vocab, " is below the model's vocabulary (model.vocab_size ", model_vocab,
          "): it would cut the rows of real tokens; --vocab ", model_vocab,
          " strips only the padding"));
    }
  }
  GTP_ASSIGN_OR_RETURN(std::vector<GlobalTensor> read, ReadAllGlobal(dir));
  GTP_ASSIGN_OR_RETURN(std::vector<GlobalTensor> all, F32Weights(std::move(read)));
  SafeTensorsFile f;
  if (names == "hf-gpt2") {
    GTP_ASSIGN_OR_RETURN(f, ToHfGpt2(all, vocab));
  } else if (names == "hf-llama") {
    GTP_ASSIGN_OR_RETURN(f, ToHfLlama(all, vocab));
  } else if (names == "gtp") {
    for (const auto& g : all) f.tensors[g.key] = ToSafe(g);  // weights only (F32Weights)
  } else {
    return absl::InvalidArgumentError("--names must be gtp, hf-gpt2 or hf-llama, got " + names);
  }
  GTP_RETURN_IF_ERROR(WriteSafeTensors(out, f));
  std::printf("wrote %zu tensors to %s\n", f.tensors.size(), out.c_str());
  return absl::OkStatus();
}

// config.json for the exported names, from the run's recipe.
std::string HfConfig(const recipes::proto::Recipe& r, bool llama) {
  const auto& m = r.model();
  const int64_t ffn = m.ffn_hidden() > 0 ? m.ffn_hidden() : 4 * m.n_embd();
  const float init = m.init_std() > 0 ? m.init_std() : 0.02f;
  const float eps = m.norm_eps() > 0 ? m.norm_eps() : 1e-5f;
  if (!llama) {
    return absl::StrCat(
        "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n",
        "  \"vocab_size\": ", m.vocab_size(), ",\n  \"n_positions\": ", m.seq_len(),
        ",\n  \"n_ctx\": ", m.seq_len(), ",\n  \"n_embd\": ", m.n_embd(), ",\n  \"n_layer\": ",
        m.n_layer(), ",\n  \"n_head\": ", m.n_head(), ",\n  \"n_inner\": ", ffn,
        ",\n  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": ", eps, ",\n",
        "  \"initializer_range\": ", init, ",\n",
        "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n",
        "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"float32\"\n}\n");
  }
  const int64_t kv = m.n_kv_head() > 0 ? m.n_kv_head() : m.n_head();
  return absl::StrCat(
      "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n",
      "  \"vocab_size\": ", m.vocab_size(), ",\n  \"hidden_size\": ", m.n_embd(),
      ",\n  \"intermediate_size\": ", ffn, ",\n  \"num_hidden_layers\": ", m.n_layer(),
      ",\n  \"num_attention_heads\": ", m.n_head(), ",\n  \"num_key_value_heads\": ", kv,
      ",\n  \"head_dim\": ", m.n_embd() / m.n_head(),
      ",\n  \"max_position_embeddings\": ", m.seq_len(), ",\n  \"rms_norm_eps\": ", eps, ",\n",
      "  \"rope_theta\": ", m.rope_theta() > 0 ? m.rope_theta() : 10000.0f, ",\n",
      "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n",
      "  \"initializer_range\": ", init, ",\n",
      "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"float32\"\n}\n");
}

// The GPT-2 BPE files of an export, checked against the model: the ids must
// fit model.vocab_size and <|endoftext|> (eos/bos) must be a token.
struct HfTokenizer {
  std::string vocab_json, merges_txt;  // paths
  int32_t eos_id = -1;
  // Or a Hugging Face tokenizer.json (data.tokenizer_json), copied as is;
  // eos_name: its end-of-text token, "" if it has none.
  std::string tokenizer_json, eos_name;
  // Or a SentencePiece tokenizer.model (data.tokenizer_model), copied as is,
  // with the names of its special pieces ("" for none) and its BOS id.
  std::string tokenizer_model, bos_name, unk_name, pad_name;
  int32_t bos_id = -1;
};

// data.tokenizer_model, checked against the model as the other files are;
// bos/eos are the model's <s>/</s> pieces (sentencepiece's bos_id()/eos_id()).
absl::StatusOr<HfTokenizer> CheckTokenizerModel(const std::string& path,
                                                const recipes::proto::Recipe& r) {
  GTP_ASSIGN_OR_RETURN(data::SentencePieceTokenizer tok, data::SentencePieceTokenizer::Load(path));
  if (tok.vocab_size() > r.model().vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has ", tok.vocab_size(),
                                                   " token ids but model.vocab_size is ",
                                                   r.model().vocab_size()));
  }
  HfTokenizer t;
  t.tokenizer_model = path;
  auto name = [&](std::optional<int32_t> id) { return id ? tok.IdToPiece(*id) : std::string(); };
  t.eos_id = tok.eos_id().value_or(-1);
  t.bos_id = tok.bos_id().value_or(-1);
  t.eos_name = name(tok.eos_id());
  t.bos_name = name(tok.bos_id());
  t.pad_name = name(tok.pad_id());
  t.unk_name = tok.IdToPiece(tok.unk_id());
  return t;
}

// data.tokenizer_json, checked against the model as the BPE files are; its
// eos: the first of the end-of-text tokens it has (as tools/generate).
absl::StatusOr<HfTokenizer> CheckTokenizerJson(const std::string& path,
                                               const recipes::proto::Recipe& r) {
  GTP_ASSIGN_OR_RETURN(data::HfTokenizer tok, data::HfTokenizer::Load(path));
  if (tok.vocab_size() > r.model().vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has ", tok.vocab_size(),
                                                   " token ids but model.vocab_size is ",
                                                   r.model().vocab_size()));
  }
  HfTokenizer t;
  t.tokenizer_json = path;
  for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>"}) {
    std::optional<int32_t> id = tok.SpecialTokenId(name);
    if (!id) id = tok.TokenId(name);
    if (id) {
      t.eos_id = *id;
      t.eos_name = name;
      break;
    }
  }
  return t;
}

absl::StatusOr<HfTokenizer> CheckTokenizer(const std::string& vocab_json,
                                           const std::string& merges_txt,
                                           const recipes::proto::Recipe& r) {
  GTP_ASSIGN_OR_RETURN(data::Gpt2Tokenizer tok, data::Gpt2Tokenizer::Load(vocab_json, merges_txt));
  if (tok.vocab_size() > r.model().vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(vocab_json, " has ", tok.vocab_size(),
                                                   " token ids but model.vocab_size is ",
                                                   r.model().vocab_size()));
  }
  std::optional<int32_t> eos = tok.TokenId("<|endoftext|>");
  if (!eos) return absl::InvalidArgumentError(absl::StrCat(vocab_json, " has no <|endoftext|>"));
  return HfTokenizer{vocab_json, merges_txt, *eos};
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// vocab.json and merges.txt copied byte for byte, and the two files
// transformers' AutoTokenizer reads beside them (GPT2Tokenizer, the
// <|endoftext|> specials, model_max_length = T).
absl::Status WriteHfTokenizer(const HfTokenizer& t, int64_t seq_len, const std::string& out_dir) {
  if (!t.tokenizer_model.empty()) {
    // tokenizer.model byte for byte; LlamaTokenizer reads it (sentencepiece
    // itself in transformers 4, converted in 5). No BOS/EOS added: the
    // dataset was tokenized without them (make_indexed --tokenizer_model).
    std::error_code ec;
    std::filesystem::copy_file(t.tokenizer_model, out_dir + "/tokenizer.model",
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("cannot copy ", t.tokenizer_model, ": ", ec.message()));
    }
    std::string specials;  // "bos_token": "<s>", ... for the names the model has
    for (const auto& [key, name] : {std::pair<const char*, const std::string*>{"bos_token", &t.bos_name},
                                    {"eos_token", &t.eos_name},
                                    {"unk_token", &t.unk_name},
                                    {"pad_token", &t.pad_name}}) {
      if (name->empty()) continue;
      std::string quoted;  // a JSON string: quotes, backslashes and control bytes escaped
      for (unsigned char c : *name) {
        if (c == '"' || c == '\\') {
          quoted += '\\';
          quoted += static_cast<char>(c);
        } else if (c < 0x20) {
          absl::StrAppend(&quoted, absl::StrFormat("\\u%04x", c));
        } else {
          quoted += static_cast<char>(c);
        }
      }
      absl::StrAppend(&specials, specials.empty() ? "" : ",\n", "  \"", key, "\": \"", quoted, "\"");
    }
    GTP_RETURN_IF_ERROR(WriteText(
        out_dir + "/tokenizer_config.json",
        absl::StrCat("{\n  \"tokenizer_class\": \"LlamaTokenizer\",\n  \"model_max_length\": ",
                     seq_len, ",\n", specials,
                     ",\n  \"add_bos_token\": false,\n  \"add_eos_token\": false,\n"
                     "  \"legacy\": true,\n  \"sp_model_kwargs\": {},\n"
                     "  \"clean_up_tokenization_spaces\": false\n}\n")));
    return WriteText(out_dir + "/special_tokens_map.json", absl::StrCat("{\n", specials, "\n}\n"));
  }
  if (!t.tokenizer_json.empty()) {
    // tokenizer.json byte for byte, and a tokenizer_config.json naming the
    // fast tokenizer that reads it.
    std::error_code ec;
    std::filesystem::copy_file(t.tokenizer_json, out_dir + "/tokenizer.json",
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("cannot copy ", t.tokenizer_json, ": ", ec.message()));
    }
    std::string cfg = absl::StrCat("{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n"
                                   "  \"model_max_length\": ",
                                   seq_len);
    if (!t.eos_name.empty()) absl::StrAppend(&cfg, ",\n  \"eos_token\": \"", t.eos_name, "\"");
    absl::StrAppend(&cfg, ",\n  \"clean_up_tokenization_spaces\": false\n}\n");
    return WriteText(out_dir + "/tokenizer_config.json", cfg);
  }
  const std::pair<const std::string*, const char*> copies[] = {{&t.vocab_json, "vocab.json"},
                                                               {&t.merges_txt, "merges.txt"}};
  for (const auto& [from, name] : copies) {
    std::error_code ec;
    std::filesystem::copy_file(*from, out_dir + "/" + name,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot copy ", *from, ": ", ec.message()));
  }
  const std::string eot = "\"<|endoftext|>\"";
  GTP_RETURN_IF_ERROR(WriteText(
      out_dir + "/tokenizer_config.json",
      absl::StrCat(
          "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": ", seq_len,
          ",\n  \"bos_token\": ", eot, ",\n  \"eos_token\": ", eot, ",\n  \"unk_token\": ", eot,
          ",\n  \"add_prefix_space\": false,\n  \"add_bos_token\": false,\n"
          "  \"clean_up_tokenization_spaces\": false,\n  \"errors\": \"replace\"\n}\n")));
  return WriteText(out_dir + "/special_tokens_map.json",
                   absl::StrCat("{\n  \"bos_token\": ", eot, ",\n  \"eos_token\": ", eot,
                                ",\n  \"unk_token\": ", eot, "\n}\n"));
}

// A Hugging Face model directory from a trainer checkpoint (its recipe in
// the metadata says which family and gives the config), with the run's
// tokenizer when it had a BPE one: `vocab_json`/`merges_txt` if given, else
// the recipe's data.tokenizer_vocab/merges; byte-level runs get none.
absl::Status ExportHf(const std::string& path, const std::string& out_dir,
                      const std::string& vocab_json, const std::string& merges_txt) {
  GTP_ASSIGN_OR_RETURN(std::string dir, ResolveDir(path));
  GTP_ASSIGN_OR_RETURN(proto::Metadata meta, ReadCheckpointMetadata(dir));
  const auto it = meta.extra().find("recipe");
  if (it == meta.extra().end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, " has no recipe in its metadata (not written by the trainer): use --format "
             "safetensors --names hf-gpt2|hf-llama and write config.json yourself"));
  }
  recipes::proto::Recipe r;
  if (!google::protobuf::TextFormat::ParseFromString(it->second, &r)) {
    return absl::DataLossError(absl::StrCat(dir, ": the recipe in its metadata does not parse"));
  }
  const auto& m = r.model();
  if (!m.layer_pattern().empty() || m.moe().num_experts() > 0) {
    return absl::UnimplementedError(
        "Hugging Face export covers dense GPT-2 and Llama-style models (no MoE, no hybrid pattern)");
  }
  const bool llama = m.norm() == "rmsnorm";
  if (llama && (m.activation() != "swiglu" || !m.rope() || !m.no_bias() || !m.untied_embeddings())) {
    return absl::InvalidArgumentError(
        "a Llama export needs rmsnorm, swiglu, rope, no_bias and untied_embeddings");
  }
  if (!llama && (m.activation() == "swiglu" || m.rope() || m.no_bias() || m.untied_embeddings())) {
    return absl::InvalidArgumentError(
        "a GPT-2 export needs layernorm, gelu, learned positions, biases and tied embeddings");
  }
  std::optional<HfTokenizer> tok;
  if (!vocab_json.empty()) {
    GTP_ASSIGN_OR_RETURN(tok, CheckTokenizer(vocab_json, merges_txt, r));
  } else if (!r.data().tokenizer_vocab().empty()) {
    absl::StatusOr<HfTokenizer> t =
        CheckTokenizer(r.data().tokenizer_vocab(), r.data().tokenizer_merges(), r);
    if (!t.ok()) {
      return absl::Status(
          t.status().code(),
          absl::StrCat("the run's tokenizer (data.tokenizer_vocab/merges): ", t.status().message(),
                       "; name the files with --vocab_json and --merges"));
    }
    tok = *std::move(t);
  } else if (!r.data().tokenizer_model().empty()) {
    absl::StatusOr<HfTokenizer> t = CheckTokenizerModel(r.data().tokenizer_model(), r);
    if (!t.ok()) {
      return absl::Status(t.status().code(),
                          absl::StrCat("the run's tokenizer (data.tokenizer_model): ",
                                       t.status().message(),
                                       "; name GPT-2 files with --vocab_json and --merges, or "
                                       "restore the file"));
    }
    tok = *std::move(t);
  } else if (!r.data().tokenizer_json().empty()) {
    absl::StatusOr<HfTokenizer> t = CheckTokenizerJson(r.data().tokenizer_json(), r);
    if (!t.ok()) {
      return absl::Status(t.status().code(),
                          absl::StrCat("the run's tokenizer (data.tokenizer_json): ",
                                       t.status().message(),
                                       "; name GPT-2 files with --vocab_json and --merges, or "
                                       "restore the file"));
    }
    tok = *std::move(t);
  }
  GTP_ASSIGN_OR_RETURN(std::vector<GlobalTensor> read, ReadAllGlobal(dir));
  GTP_ASSIGN_OR_RETURN(std::vector<GlobalTensor> all, F32Weights(std::move(read)));
  SafeTensorsFile f;
  if (llama) {
    GTP_ASSIGN_OR_RETURN(f, ToHfLlama(all, m.vocab_size()));
  } else {
    GTP_ASSIGN_OR_RETURN(f, ToHfGpt2(all, m.vocab_size()));
  }
  std::error_code ec;
  if (std::filesystem::exists(out_dir, ec)) {
    // Files of another model (a tokenizer, shards) would stay beside ours.
    if (!std::filesystem::is_directory(out_dir, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(out_dir, " exists and is not a directory"));
    }
    auto it = std::filesystem::directory_iterator(out_dir, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot list ", out_dir, ": ", ec.message()));
    if (it != std::filesystem::directory_iterator()) {
      return absl::InvalidArgumentError(absl::StrCat(
          out_dir, " is not empty (it holds ", it->path().filename().string(),
          "…): export into a new or empty directory, so that no file of another model stays beside "
          "this one"));
    }
  }
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  GTP_RETURN_IF_ERROR(WriteSafeTensors(out_dir + "/model.safetensors", f));
  std::string config = HfConfig(r, llama);
  if (tok && tok->eos_id >= 0) {
    // Generation's bos/eos ids, as in GPT-2's config.json: replace the closing "\n}\n".
    config.resize(config.size() - 3);
    absl::StrAppend(&config, ",\n  \"bos_token_id\": ", tok->bos_id >= 0 ? tok->bos_id : tok->eos_id,
                    ",\n  \"eos_token_id\": ", tok->eos_id, "\n}\n");
  }
  std::ofstream cfg(out_dir + "/config.json");
  cfg << config;
  cfg.close();
  if (!cfg) return absl::InternalError(absl::StrCat("cannot write ", out_dir, "/config.json"));
  if (tok) GTP_RETURN_IF_ERROR(WriteHfTokenizer(*tok, m.seq_len(), out_dir));
  std::printf("wrote %s (%s: %zu tensors, config.json; %s)\n", out_dir.c_str(),
              llama ? "LlamaForCausalLM" : "GPT2LMHeadModel", f.tensors.size(),
              tok ? (!tok->tokenizer_model.empty()
                         ? absl::StrCat("tokenizer: tokenizer.model, tokenizer_config.json, "
                                        "special_tokens_map.json from ",
                                        tok->tokenizer_model)
                         : tok->tokenizer_json.empty()
                         ? absl::StrCat("tokenizer: vocab.json, merges.txt, tokenizer_config.json, "
                                        "special_tokens_map.json from ",
                                        tok->vocab_json)
                         : absl::StrCat("tokenizer: tokenizer.json, tokenizer_config.json from ",
                                        tok->tokenizer_json))
                        .c_str()
                  : "no tokenizer files: the recipe names no BPE files (a byte-level run); "
                    "--vocab_json and --merges add them");
  return absl::OkStatus();
}

// A Hugging Face model directory → a checkpoint under `out_root`.
absl::Status ImportHf(const std::string& hf_dir, const std::string& out_root) {
  GTP_ASSIGN_OR_RETURN(tools::HfModel m, tools::ReadHfModel(hf_dir));
  GTP_RETURN_IF_ERROR(tools::WriteCheckpoint(m, out_root, hf_dir));
  const auto& md = m.model;
  std::printf("wrote %s (%s: %zu tensors; %d layers, C=%lld, heads=%lld, vocab=%lld, T=%lld)\n",
              IterationDir(out_root, 0).c_str(), m.architecture.c_str(), m.tensors.size(), md.n_layer(),
              static_cast<long long>(md.n_embd()), static_cast<long long>(md.n_head()),
              static_cast<long long>(md.vocab_size()), static_cast<long long>(md.seq_len()));
  if (!m.training_only.empty()) {
    std::printf("note: config.json sets %s; gtp has no dropout, so a run from this checkpoint trains "
                "without it (the weights compute the same function)\n",
                absl::StrJoin(m.training_only, ", ").c_str());
  }
  return absl::OkStatus();
}

int Usage() {
  std::fprintf(stderr,
               "usage: ckpt inspect <checkpoint>\n"
               "       ckpt export --format safetensors [--names gtp|hf-gpt2|hf-llama] [--vocab V] "
               "<checkpoint> <out.safetensors>\n"
               "       ckpt export --format hf [--vocab_json V --merges M] <checkpoint> <out dir>\n"
               "       ckpt import --format hf <hf model dir> <out checkpoint dir>\n");
  return 2;
}

int Main(int argc, char** argv) {
  if (argc < 3) return Usage();
  // Paths typed by the user mean the directory `bazel run` was called from
  // (every argument after the command that is not a flag or a flag's value).
  std::vector<std::string> owned(argv, argv + argc);
  for (int i = 2; i < argc; ++i) {
    const std::string& a = owned[i];
    if (a.rfind("--", 0) == 0) {
      if (a == "--vocab_json" || a == "--merges") {
        if (i + 1 < argc) owned[i + 1] = UserPath(owned[i + 1]);
      }
      ++i;  // every ckpt flag takes a value
      continue;
    }
    owned[i] = UserPath(a);
  }
  std::vector<char*> args;
  for (std::string& a : owned) args.push_back(a.data());
  argv = args.data();
  const std::string cmd = argv[1];
  absl::Status st;
  if (cmd == "inspect") {
    if (argc != 3) {  // an extra argument used to be ignored
      std::fprintf(stderr, "ckpt: inspect takes one checkpoint, got %d arguments (extra: %s)\n", argc - 2, argv[3]);
      return Usage();
    }
    st = Inspect(argv[2]);
  } else if (cmd == "export") {
    std::string format, names = "gtp", vocab_json, merges;
    int64_t vocab = 0;
    std::vector<std::string> pos;
    for (int i = 2; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--format" && i + 1 < argc) format = argv[++i];
      else if (a == "--names" && i + 1 < argc) names = argv[++i];
      else if (a == "--vocab" && i + 1 < argc) {
        const std::string v = argv[++i];
        if (!absl::SimpleAtoi(v, &vocab) || vocab <= 0) {
          std::fprintf(stderr, "ckpt: --vocab must be a positive number of rows, got '%s'\n", v.c_str());
          return 2;
        }
      }
      else if (a == "--vocab_json" && i + 1 < argc)
        vocab_json = argv[++i];
      else if (a == "--merges" && i + 1 < argc)
        merges = argv[++i];
      else pos.push_back(a);
    }
    if ((format != "safetensors" && format != "hf") || pos.size() != 2 ||
        vocab_json.empty() != merges.empty() || (format != "hf" && !vocab_json.empty())) {
      return Usage();
    }
    st = format == "hf" ? ExportHf(pos[0], pos[1], vocab_json, merges)
                        : Export(pos[0], pos[1], names, vocab);
  } else if (cmd == "import") {
    if (argc != 6 || std::string(argv[2]) != "--format" || std::string(argv[3]) != "hf") return Usage();
    st = ImportHf(argv[4], argv[5]);
  } else {
    return Usage();
  }
  if (!st.ok()) {
    std::fprintf(stderr, "ckpt: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace gtp::checkpoint

int main(int argc, char** argv) { return gtp::checkpoint::Main(argc, argv); }
