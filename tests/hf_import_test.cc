// Logits acceptance of `ckpt import --format hf` (issue 18): the committed
// float64 PyTorch fixtures (tools/reference/torch_fixture.py; weights under
// gtp names, tokens, float64 logits) are written here as Hugging Face
// directories — GPT2LMHeadModel and LlamaForCausalLM names and layouts,
// converted by this file from transformers' conventions (Conv1D [in, out]
// weights and a fused c_attn; separate gate/up projections), with a
// config.json as transformers writes one — imported with tools/ckpt's
// importer into a one-rank checkpoint, loaded (resharded by
// checkpoint::Load) into gtp models on 1 rank, TP2, GTP2 and TP2·GTP2, and
// their logits compared with the fixture's.
//
// The model is built from the recipe the import derived from config.json,
// so a wrong config (heads, kv heads, ffn width, RoPE θ, norm kind) fails
// here as surely as a wrong tensor layout. Tolerance as in
// tests/torch_fixture_test.cc: relative L2 over all logits ≤ 1e-5 (f32
// rounding measured there up to 1.4e-6), and the loss within 1e-5.
#include "tools/ckpt/hf_import.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_state.h"
#include "checkpoint/safetensors.h"
#include "comm/local/local_communicator.h"
#include "gtest/gtest.h"
#include "tests/gtpfix.h"
#include "layers/gpt.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp {
namespace {

constexpr double kTol = 1e-5;

// The fixtures (tests/gtpfix.h).

using testing::Fixture;
using testing::ReadFixture;
using Entry = testing::FixtureEntry;

// ---- The fixture as a Hugging Face directory ----------------------------------------

checkpoint::SafeTensor F32(const Shape& shape, std::vector<float> v) {
  checkpoint::SafeTensor t;
  t.dtype = DType::kF32;
  t.shape = shape;
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

// A fixture [out, in] weight as a Conv1D [in, out] one.
std::vector<float> ConvT(const Entry& e) {
  const int64_t out = e.shape[0], in = e.shape[1];
  const std::vector<float> w = e.as<float>();
  std::vector<float> t(w.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) t[i * out + o] = w[o * in + i];
  return t;
}

// transformers' GPT2LMHeadModel.save_pretrained: "transformer." names,
// Conv1D weights, c_attn = [q | k | v] along the output columns, no
// lm_head (tied), plus the causal-mask buffers some versions save.
std::map<std::string, checkpoint::SafeTensor> Gpt2Tensors(const Fixture& fx) {
  const int64_t C = fx.Int("n_embd"), T = fx.Int("seq"), L = fx.Int("n_layer");
  std::map<std::string, checkpoint::SafeTensor> t;
  auto same = [&](const std::string& theirs, const std::string& ours) {
    const Entry& e = fx.entries.at(ours);
    t[theirs] = F32(Shape(e.shape), e.as<float>());
  };
  same("transformer.wte.weight", "wte.weight");
  same("transformer.wpe.weight", "wpe.weight");
  same("transformer.ln_f.weight", "ln_f.weight");
  same("transformer.ln_f.bias", "ln_f.bias");
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = absl::StrCat("transformer.h.", l, "."), p = absl::StrCat("h.", l, ".");
    std::vector<float> w(C * 3 * C), b;
    for (int j = 0; j < 3; ++j) {
      const std::string x = std::string(1, "qkv"[j]);
      const std::vector<float> wt =
          ConvT(fx.entries.at(p + "attn." + x + ".weight"));  // [C, C] in, out
      for (int64_t i = 0; i < C; ++i)
        for (int64_t o = 0; o < C; ++o) w[i * 3 * C + j * C + o] = wt[i * C + o];
      const std::vector<float> bj = fx.entries.at(p + "attn." + x + ".bias").as<float>();
      b.insert(b.end(), bj.begin(), bj.end());
    }
    t[h + "attn.c_attn.weight"] = F32(Shape{C, 3 * C}, w);
    t[h + "attn.c_attn.bias"] = F32(Shape{3 * C}, b);
    for (const auto& [ours, theirs] :
         {std::pair{"attn.o", "attn.c_proj"}, std::pair{"mlp.fc", "mlp.c_fc"},
          std::pair{"mlp.proj", "mlp.c_proj"}}) {
      const Entry& e = fx.entries.at(p + ours + ".weight");
      t[h + theirs + ".weight"] = F32(Shape{e.shape[1], e.shape[0]}, ConvT(e));
      same(h + theirs + ".bias", p + ours + ".bias");
    }
    for (const auto& [ours, theirs] : {std::pair{"ln1", "ln_1"}, std::pair{"ln2", "ln_2"}}) {
      same(h + theirs + ".weight", p + ours + ".weight");
      same(h + theirs + ".bias", p + ours + ".bias");
    }
    std::vector<float> mask(T * T);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) mask[i * T + j] = j <= i;
    t[h + "attn.bias"] = F32(Shape{1, 1, T, T}, mask);
  }
  return t;
}

// LlamaForCausalLM: model.* names, [out, in] weights, gate/up separate.
std::map<std::string, checkpoint::SafeTensor> LlamaTensors(const Fixture& fx) {
  const int64_t L = fx.Int("n_layer"), F = fx.Int("ffn_hidden"), C = fx.Int("n_embd");
  std::map<std::string, checkpoint::SafeTensor> t;
  auto same = [&](const std::string& theirs, const std::string& ours) {
    const Entry& e = fx.entries.at(ours);
    t[theirs] = F32(Shape(e.shape), e.as<float>());
  };
  same("model.embed_tokens.weight", "wte.weight");
  same("lm_head.weight", "lm_head.weight");
  same("model.norm.weight", "ln_f.weight");
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = absl::StrCat("model.layers.", l, "."), p = absl::StrCat("h.", l, ".");
    same(h + "self_attn.q_proj.weight", p + "attn.q.weight");
    same(h + "self_attn.k_proj.weight", p + "attn.k.weight");
    same(h + "self_attn.v_proj.weight", p + "attn.v.weight");
    same(h + "self_attn.o_proj.weight", p + "attn.o.weight");
    same(h + "mlp.down_proj.weight", p + "mlp.proj.weight");
    same(h + "input_layernorm.weight", p + "ln1.weight");
    same(h + "post_attention_layernorm.weight", p + "ln2.weight");
    const std::vector<float> fc = fx.entries.at(p + "mlp.fc.weight").as<float>();  // [gate; up]
    EXPECT_EQ(static_cast<int64_t>(fc.size()), 2 * F * C);
    t[h + "mlp.gate_proj.weight"] =
        F32(Shape{F, C}, std::vector<float>(fc.begin(), fc.begin() + F * C));
    t[h + "mlp.up_proj.weight"] =
        F32(Shape{F, C}, std::vector<float>(fc.begin() + F * C, fc.end()));
  }
  return t;
}

std::string ConfigJson(const Fixture& fx) {
  const auto& m = fx.meta;
  if (m.at("style") == "gpt2") {
    return absl::StrCat(
        R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": )",
        m.at("vocab"), R"(, "n_positions": )", m.at("seq"), R"(, "n_ctx": )", m.at("seq"),
        R"(, "n_embd": )", m.at("n_embd"), R"(, "n_layer": )", m.at("n_layer"), R"(, "n_head": )",
        m.at("n_head"), R"(, "n_inner": )", m.at("ffn_hidden"),
        R"(, "activation_function": "gelu_new", "layer_norm_epsilon": )", m.at("norm_eps"),
        R"(, "resid_pdrop": 0.1, "bos_token_id": 50256, "use_cache": true,)",
        R"( "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}}})");
  }
  return absl::StrCat(
      R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": )",
      m.at("vocab"), R"(, "hidden_size": )", m.at("n_embd"), R"(, "intermediate_size": )",
      m.at("ffn_hidden"), R"(, "num_hidden_layers": )", m.at("n_layer"),
      R"(, "num_attention_heads": )", m.at("n_head"), R"(, "num_key_value_heads": )",
      m.at("n_kv_head"), R"(, "max_position_embeddings": )", m.at("seq"), R"(, "rms_norm_eps": )",
      m.at("norm_eps"), R"(, "rope_theta": )", m.at("rope_theta"),
      R"(, "rope_scaling": null, "hidden_act": "silu", "tie_word_embeddings": false,)",
      R"( "attention_bias": false, "torch_dtype": "float32"})");
}

// The recipe's model section → the gtp model (as recipes/trainer does).
layers::GptConfig ModelOf(const recipes::proto::Model& m) {
  layers::GptConfig c =
      layers::GptConfig::Gpt2(m.vocab_size(), m.seq_len(), m.n_layer(), m.n_embd(), m.n_head());
  c.block.n_kv_head = m.n_kv_head();
  c.block.ffn_hidden = m.ffn_hidden();
  c.block.norm = m.norm() == "rmsnorm" ? layers::NormKind::kRMSNorm : layers::NormKind::kLayerNorm;
  c.block.activation =
      m.activation() == "swiglu" ? layers::Activation::kSwiGlu : layers::Activation::kGelu;
  c.block.bias = !m.no_bias();
  c.block.rope = m.rope();
  c.block.rope_theta = m.rope_theta() > 0 ? m.rope_theta() : 10000.0f;
  c.learned_positions = !m.rope();
  c.tied_embeddings = !m.untied_embeddings();
  c.vocab_pad_multiple = m.vocab_pad_multiple();
  return c;
}

struct Logits {
  double loss = 0;
  std::vector<float> logits;  // [B·T, V]
};

// Loads the checkpoint at `root` into a TP×GTP model and runs the fixture's tokens.
absl::StatusOr<Logits> RunImported(const Fixture& fx, const layers::GptConfig& cfg,
                                   const std::string& root, int tp, int gtp) {
  const int64_t B = fx.Int("B"), T = fx.Int("seq"), V = fx.Int("vocab");
  const std::vector<int32_t> tokens = fx.entries.at("tokens").as<int32_t>();
  const std::vector<int32_t> targets = fx.entries.at("targets").as<int32_t>();
  Logits out;
  out.logits.assign(B * T * V, NAN);
  std::mutex mu;
  GTP_RETURN_IF_ERROR(comm::RunRanks(tp * gtp, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp = tp;
    pc.tp_num_weight_shards = tp * gtp;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(comm::Communicator * data, pgs.Get("data"));
    const int64_t b_lane = B / data->size(), s0 = data->rank() * b_lane;
    HeapAllocator host;
    GTP_ASSIGN_OR_RETURN(auto model,
                         layers::GptModel::Create(cfg, b_lane, T, pgs, kernels::Exec::Cpu(host)));
    GTP_ASSIGN_OR_RETURN(
        auto pieces, checkpoint::ModelPieces({model->sharded_params(), model->replicated_params()},
                                             pgs, nullptr, /*with_tied_copies=*/true));
    GTP_RETURN_IF_ERROR(checkpoint::Load(root, std::nullopt, pieces, w).status());
    for (layers::ShardedParam* p : model->sharded_params()) p->MarkUpdated();
    std::vector<int32_t> tok(tokens.begin() + s0 * T, tokens.begin() + (s0 + b_lane) * T);
    std::vector<int32_t> tgt(targets.begin() + s0 * T, targets.begin() + (s0 + b_lane) * T);
    GTP_ASSIGN_OR_RETURN(
        float loss,
        model->Forward(Tensor::Wrap(tok.data(), {b_lane, T}, DType::kI32, Device::Cpu()),
                       Tensor::Wrap(tgt.data(), {b_lane, T}, DType::kI32, Device::Cpu())));
    const Tensor& lg = model->logits();  // this lane's rows, this TP rank's vocabulary columns
    const int64_t ld = lg.dim(1), cols = model->vocab_local(), v0 = model->vocab_start();
    {
      std::lock_guard<std::mutex> lock(mu);
      for (int64_t r = 0; r < b_lane * T; ++r)
        for (int64_t c = 0; c < cols; ++c)
          out.logits[(s0 * T + r) * V + v0 + c] = lg.data<float>()[r * ld + c];
    }
    // Lanes have equally many valid targets: the mean of lane means is the mean.
    GTP_RETURN_IF_ERROR(
        comm::Run(data->AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
    if (w.rank() == 0) out.loss = loss;
    return absl::OkStatus();
  }));
  return out;
}

class HfImport : public ::testing::TestWithParam<std::string> {};

TEST_P(HfImport, ImportedModelReproducesFloat64Logits) {
  const std::string style = GetParam();
  auto fx = ReadFixture(absl::StrCat("tests/fixtures/", style, ".gtpfix"));
  ASSERT_TRUE(fx.ok()) << fx.status();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string base = absl::StrCat(tmp ? tmp : "/tmp", "/hf_import_", style);
  std::filesystem::remove_all(base);
  const std::string hf = base + "/hf", root = base + "/ckpt";
  std::filesystem::create_directories(hf);
  checkpoint::SafeTensorsFile file;
  file.tensors = style == "gpt2" ? Gpt2Tensors(*fx) : LlamaTensors(*fx);
  ASSERT_TRUE(checkpoint::WriteSafeTensors(hf + "/model.safetensors", file).ok());
  std::ofstream(hf + "/config.json") << ConfigJson(*fx);

  auto m = tools::ReadHfModel(hf);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(tools::WriteCheckpoint(*m, root, hf).ok());
  // The recipe says what the fixture's model is.
  const recipes::proto::Model& r = m->model;
  EXPECT_EQ(r.vocab_size(), fx->Int("vocab"));
  EXPECT_EQ(r.n_layer(), fx->Int("n_layer"));
  EXPECT_EQ(r.n_embd(), fx->Int("n_embd"));
  EXPECT_EQ(r.n_head(), fx->Int("n_head"));
  EXPECT_EQ(r.ffn_hidden(), fx->Int("ffn_hidden"));
  EXPECT_EQ(r.norm(), style == "gpt2" ? "layernorm" : "rmsnorm");
  if (style == "llama") {
    EXPECT_EQ(r.n_kv_head(), fx->Int("n_kv_head"));
  }

  const std::vector<double> want = fx->entries.at("logits").as<double>();
  const double want_loss = fx->entries.at("loss").as<double>()[0];
  for (const auto& [tp, gtp] :
       {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    SCOPED_TRACE(absl::StrCat("TP", tp, " GTP", gtp));
    auto got = RunImported(*fx, ModelOf(r), root, tp, gtp);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->logits.size(), want.size());
    double num = 0, den = 0, max_abs = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double d = got->logits[i] - want[i];
      num += d * d;
      den += want[i] * want[i];
      max_abs = std::max(max_abs, std::abs(d));
    }
    const double rel = std::isnan(num) ? INFINITY : std::sqrt(num / den);
    EXPECT_LE(rel, kTol) << "logits";
    EXPECT_LE(max_abs, kTol) << "logits, elementwise";
    EXPECT_LE(std::abs(got->loss - want_loss), kTol * want_loss)
        << got->loss << " vs " << want_loss;
    std::cout << style << " TP" << tp << " GTP" << gtp << ": logits rel. L2 error " << rel
              << " (max abs " << max_abs << "), loss " << got->loss << " vs " << want_loss << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Families, HfImport, ::testing::Values("gpt2", "llama"));

}  // namespace
}  // namespace gtp
