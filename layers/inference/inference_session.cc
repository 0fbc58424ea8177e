#include "layers/inference/inference_session.h"

#include <map>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/decode_attention.h"
#include "core/status.h"

namespace gtp::layers::inference {

namespace ops = kernels::ops;

namespace {

absl::Status Unsupported(const std::string& what) {
  return absl::UnimplementedError(absl::StrCat("inference: ", what, " is not supported"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::Create(const GptModel& model,
                                                                           int64_t max_len) {
  return Create(model, max_len, kernels::Exec{});
}

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::Create(
    const GptModel& model, int64_t max_len, const kernels::Exec& exec) {
  const GptConfig& c = model.config();
  if (c.block.moe.enabled()) return Unsupported("a mixture-of-experts model");
  if (c.prefix_len > 0) return Unsupported("a model with prefix embeddings");
  if (c.block.dtype != DType::kF32) return Unsupported("a bf16 model (build it in f32)");
  if (!c.block.causal) return Unsupported("bidirectional attention");
  if (AnyMixer(model.layer_kinds(), MixerKind::kMamba)) {
    return Unsupported("a hybrid model with Mamba layers ('M')");
  }
  if (AnyFfn(model.layer_kinds(), FfnKind::kMoe)) return Unsupported("a hybrid model with MoE layers ('E')");
  if (!model.has_embedding() || !model.has_head()) {
    return absl::InvalidArgumentError("inference needs the whole model (one pipeline part)");
  }
  std::unique_ptr<InferenceSession> s(new InferenceSession());
  s->config_ = c;
  s->exec_ = exec;
  if (exec.is_cuda()) {
    if (exec.alloc == nullptr || exec.blas == nullptr || exec.alloc->device() != exec.device) {
      return absl::InvalidArgumentError(
          "inference on CUDA needs an Exec with an allocator on its device and a BLAS context");
    }
  } else if (exec.alloc == nullptr) {
    s->exec_ = kernels::Exec::Cpu(s->host_);
  }
  s->C_ = c.block.n_embd;
  s->NH_ = c.block.n_head;
  s->NKV_ = c.block.kv_heads();
  s->HS_ = s->C_ / s->NH_;
  if (max_len <= 0 || (c.learned_positions && max_len > c.max_seq_len)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inference max_len ", max_len, " must be in [1, max_seq_len = ", c.max_seq_len, "]"));
  }
  s->max_len_ = max_len;
  // Every parameter by name: a single rank holds each whole.
  std::map<std::string, Tensor> p;
  for (const ShardedParam* w : model.sharded_params()) {
    if (w->gtp_size() != 1 || w->rows() != w->global_layout().global_rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inference needs a single-rank model (TP = GTP = 1); ", w->name(), " is sharded"));
    }
    p[w->name()] = w->shard().Slice(0, w->rows());
  }
  for (const ReplicatedParam* r : model.replicated_params()) {
    if (r->tp_sharded && r->value.dim(0) != r->layout.global_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("inference needs a single-rank model; ", r->name, " is sharded"));
    }
    p[r->name] = r->value;
  }
  auto get = [&](const std::string& name, bool required) -> absl::StatusOr<Tensor> {
    auto it = p.find(name);
    if (it != p.end()) return it->second;
    if (required) return absl::NotFoundError(absl::StrCat("inference: the model has no ", name));
    return Tensor();
  };
  GTP_ASSIGN_OR_RETURN(Tensor wte, get("wte.weight", true));
  if (wte.device() != s->exec_.device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inference: the model is on ", wte.device().ToString(), ", the session's Exec on ",
        s->exec_.device.ToString(), " (pass the Exec the model was built on)"));
  }
  s->wte_ = wte.Slice(0, c.vocab_size);
  if (c.learned_positions) {
    GTP_ASSIGN_OR_RETURN(s->wpe_, get("wpe.weight", true));
  }
  GTP_ASSIGN_OR_RETURN(s->lnf_w_, get("ln_f.weight", true));
  GTP_ASSIGN_OR_RETURN(s->lnf_b_, get("ln_f.bias", false));
  if (c.tied_embeddings) {
    s->head_ = s->wte_;
  } else {
    GTP_ASSIGN_OR_RETURN(Tensor h, get("lm_head.weight", true));
    s->head_ = h.Slice(0, c.vocab_size);
  }
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = absl::StrCat("h.", l, ".");
    Layer L;
    L.attention = p.count(h + "attn.q.weight") > 0;
    L.mlp = p.count(h + "mlp.fc.weight") > 0;
    if (!L.attention && !L.mlp) return Unsupported(absl::StrCat("layer ", l, "'s kind"));
    if (L.attention) {
      GTP_ASSIGN_OR_RETURN(L.ln1_w, get(h + "ln1.weight", true));
      GTP_ASSIGN_OR_RETURN(L.ln1_b, get(h + "ln1.bias", false));
      for (auto [w, b, n] : {std::tuple{&L.q_w, &L.q_b, "q"}, std::tuple{&L.k_w, &L.k_b, "k"},
                             std::tuple{&L.v_w, &L.v_b, "v"}, std::tuple{&L.o_w, &L.o_b, "o"}}) {
        GTP_ASSIGN_OR_RETURN(*w, get(absl::StrCat(h, "attn.", n, ".weight"), true));
        GTP_ASSIGN_OR_RETURN(*b, get(absl::StrCat(h, "attn.", n, ".bias"), false));
      }
      GTP_ASSIGN_OR_RETURN(
          L.cache.k, Tensor::TryEmpty({max_len, s->NKV_, s->HS_}, DType::kF32, *s->exec_.alloc));
      GTP_ASSIGN_OR_RETURN(
          L.cache.v, Tensor::TryEmpty({max_len, s->NKV_, s->HS_}, DType::kF32, *s->exec_.alloc));
    }
    if (L.mlp) {
      GTP_ASSIGN_OR_RETURN(L.ln2_w, get(h + "ln2.weight", true));
      GTP_ASSIGN_OR_RETURN(L.ln2_b, get(h + "ln2.bias", false));
      GTP_ASSIGN_OR_RETURN(L.fc_w, get(h + "mlp.fc.weight", true));
      GTP_ASSIGN_OR_RETURN(L.fc_b, get(h + "mlp.fc.bias", false));
      GTP_ASSIGN_OR_RETURN(L.proj_w, get(h + "mlp.proj.weight", true));
      GTP_ASSIGN_OR_RETURN(L.proj_b, get(h + "mlp.proj.bias", false));
    }
    s->layers_.push_back(std::move(L));
  }
  return s;
}

Tensor InferenceSession::Norm(const Tensor& x, const Tensor& w, const Tensor& b) const {
  const int64_t n = x.dim(0);
  Tensor y = exec_.Empty(x.shape());
  Tensor rstd = exec_.Empty({n});
  if (config_.block.norm == NormKind::kLayerNorm) {
    Tensor mean = exec_.Empty({n});
    ops::LayerNormForward(exec_, x, w, b, y, mean, rstd, config_.block.norm_eps);
  } else {
    ops::RMSNormForward(exec_, x, w, y, rstd, config_.block.norm_eps);
  }
  return y;
}

Tensor InferenceSession::Linear(const Tensor& x, const Tensor& w, const Tensor& b) const {
  Tensor y = exec_.Empty({x.dim(0), w.dim(0)});
  ops::Linear(exec_, x, w, y, 0.0f, b);
  return y;
}

absl::StatusOr<Tensor> InferenceSession::ToDevice(const Tensor& host_i32) const {
  if (!exec_.is_cuda()) return host_i32;
  Tensor d = exec_.Empty(host_i32.shape(), DType::kI32);
  GTP_RETURN_IF_ERROR(Copy(host_i32, d, exec_.stream, /*sync=*/false));
  return d;
}

absl::StatusOr<std::vector<float>> InferenceSession::Append(absl::Span<const int32_t> tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size()), pos0 = length_;
  if (n == 0) return std::vector<float>();
  if (pos0 + n > max_len_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inference: ", pos0, " + ", n, " tokens exceed the session's max_len ", max_len_));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inference: token id ", t, " is outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  const int64_t C = C_, kv = NKV_ * HS_;
  // Host ids and positions (alive until the logits' synchronising copy).
  Tensor ids_h = Tensor::Empty({n}, DType::kI32, host_);
  Tensor pos_h = Tensor::Empty({n}, DType::kI32, host_);
  for (int64_t i = 0; i < n; ++i) {
    ids_h.data<int32_t>()[i] = tokens[i];
    pos_h.data<int32_t>()[i] = static_cast<int32_t>(pos0 + i);
  }
  GTP_ASSIGN_OR_RETURN(Tensor ids, ToDevice(ids_h));
  GTP_ASSIGN_OR_RETURN(Tensor pos, ToDevice(pos_h));
  Tensor x = exec_.Empty({n, C});
  ops::EmbeddingForward(exec_, ids, wte_, x, 0);
  if (wpe_.defined()) {
    Tensor pe = exec_.Empty({n, C});
    ops::EmbeddingForward(exec_, pos, wpe_, pe, 0);
    ops::Axpby(exec_, 1.0f, pe, 1.0f, x);
  }
  for (Layer& L : layers_) {
    if (L.attention) {
      Tensor h = Norm(x, L.ln1_w, L.ln1_b);
      Tensor q = Linear(h, L.q_w, L.q_b), k = Linear(h, L.k_w, L.k_b), v = Linear(h, L.v_w, L.v_b);
      if (config_.block.rope) {
        Tensor q4 = q.View({1, n, NH_, HS_}), k4 = k.View({1, n, NKV_, HS_});
        ops::RopeForward(exec_, q4, q4, config_.block.rope_theta, pos);
        ops::RopeForward(exec_, k4, k4, config_.block.rope_theta, pos);
      }
      ops::CopyInto(exec_, k, L.cache.k.Slice(pos0, pos0 + n).View({n, kv}));
      ops::CopyInto(exec_, v, L.cache.v.Slice(pos0, pos0 + n).View({n, kv}));
      Tensor y = exec_.Empty({n, C});
      ops::DecodeAttention(exec_, q.View({n, NH_, HS_}), L.cache.k, L.cache.v, pos0,
                           y.View({n, NH_, HS_}));
      Tensor o = Linear(y, L.o_w, L.o_b);
      ops::Axpby(exec_, 1.0f, o, 1.0f, x);
    }
    if (L.mlp) {
      Tensor h = Norm(x, L.ln2_w, L.ln2_b);
      Tensor pre = Linear(h, L.fc_w, L.fc_b);
      const bool glu = config_.block.activation == Activation::kSwiGlu;
      Tensor act = exec_.Empty({n, glu ? pre.dim(1) / 2 : pre.dim(1)});
      if (glu) {
        ops::SwiGluForward(exec_, pre, act);
      } else {
        ops::GeluForward(exec_, pre, act);
      }
      Tensor m = Linear(act, L.proj_w, L.proj_b);
      ops::Axpby(exec_, 1.0f, m, 1.0f, x);
    }
  }
  Tensor hf = Norm(x, lnf_w_, lnf_b_);
  Tensor logits = Linear(hf, head_, Tensor());
  std::vector<float> out(n * config_.vocab_size);
  GTP_RETURN_IF_ERROR(Copy(logits,
                           Tensor::Wrap(out.data(), logits.shape(), DType::kF32, Device::Cpu()),
                           exec_.stream, /*sync=*/true));
  length_ = pos0 + n;
  return out;
}

}  // namespace gtp::layers::inference
