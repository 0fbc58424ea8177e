#include "recipes/trainer/mfu.h"

#include <algorithm>
#include <vector>

#include "layers/layer_kind.h"
#include "recipes/trainer/config.h"

namespace gtp::recipes {

ModelShape ShapeOf(const proto::Model& m) {
  ModelShape s;
  s.vocab_size = m.vocab_size();
  s.seq_len = m.seq_len();
  s.n_layer = m.n_layer();
  s.n_embd = m.n_embd();
  s.n_head = m.n_head();
  s.n_kv_head = m.n_kv_head();
  s.ffn_hidden = m.ffn_hidden();
  s.swiglu = m.activation() == "swiglu";
  s.rmsnorm = m.norm() == "rmsnorm";
  s.bias = !m.no_bias();
  s.tied_embeddings = !m.untied_embeddings();
  const auto& e = m.moe();
  // The layers by the one rule (a pattern FinalizeRecipe would refuse counts
  // none).
  const std::vector<layers::LayerKind> kinds = LayerKindsOf(m).value_or(std::vector<layers::LayerKind>{});
  for (const layers::LayerKind& k : kinds) s.moe_layers += k.ffn == layers::FfnKind::kMoe;
  if (!m.layer_pattern().empty()) {
    s.hybrid = true;
    for (const layers::LayerKind& k : kinds) {
      s.attn_blocks += k.mixer == layers::MixerKind::kAttention;
      s.mlp_blocks += k.ffn == layers::FfnKind::kMlp;
      s.mamba_blocks += k.mixer == layers::MixerKind::kMamba;
    }
    const auto& mb = m.mamba();  // 0: the defaults config.proto names
    if (mb.d_state() > 0) s.mamba_d_state = mb.d_state();
    if (mb.d_conv() > 0) s.mamba_d_conv = mb.d_conv();
    if (mb.expand() > 0) s.mamba_expand = mb.expand();
    if (mb.head_dim() > 0) s.mamba_head_dim = mb.head_dim();
    if (mb.n_groups() > 0) s.mamba_groups = mb.n_groups();
  }
  if (e.num_experts() > 0) {
    s.num_experts = e.num_experts();
    s.top_k = e.top_k();
    s.moe_hidden = e.ffn_hidden() > 0 ? e.ffn_hidden() : (m.ffn_hidden() > 0 ? m.ffn_hidden() : 4 * m.n_embd());
    s.shared_hidden = e.shared_ffn_hidden();
  }
  return s;
}

namespace {

// The count in `Num`: int64_t exact, double for shapes whose count would
// overflow int64 (the memory estimate of an absurd setting). The divisions
// are integer ones in both.
template <typename Num>
Num ParamsOf(const ModelShape& m) {
  const Num C = static_cast<Num>(m.n_embd), V = static_cast<Num>(m.vocab_size);
  const int64_t NKV = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
  const Num C_kv = static_cast<Num>(NKV * (m.n_embd / std::max<int64_t>(1, m.n_head)));  // k, v channels
  const Num H = m.ffn_hidden > 0 ? static_cast<Num>(m.ffn_hidden) : 4 * C;
  const Num b = m.bias ? 1 : 0;
  const Num norm = m.rmsnorm || !m.bias ? C : 2 * C;
  const Num attn = (C * C + b * C) + 2 * (C * C_kv + b * C_kv) + (C * C + b * C);  // q, k, v, o
  auto dense = [&](Num h) { return (C * (m.swiglu ? 2 * h : h) + b * (m.swiglu ? 2 * h : h)) + (h * C + b * C); };
  const Num mlp = dense(H);  // fc, proj
  const Num He = static_cast<Num>(m.moe_hidden);
  const Num moe = static_cast<Num>(m.top_k) * (C * (m.swiglu ? 2 * He : He) + He * C) +
                  (m.shared_hidden > 0 ? dense(static_cast<Num>(m.shared_hidden)) : 0) +
                  static_cast<Num>(m.num_experts) * C;
  const Num embeddings = (m.tied_embeddings ? 1 : 2) * V * C;
  const Num L = static_cast<Num>(m.n_layer), Lmoe = static_cast<Num>(m.moe_layers);
  if (!m.hybrid) {
    return embeddings + L * (2 * norm + attn) + (L - Lmoe) * mlp + Lmoe * moe + norm;  // + final norm
  }
  // layers/mamba/mamba_mixer.h: in_proj z, x [Di, C], B, C [G·N, C], dt [H, C]
  // (no biases); depthwise conv (kernel K, with bias) over x, B, C; dt_bias,
  // A_log, D per head; the gated norm's weight [Di]; out_proj [C, Di].
  const int64_t di = m.mamba_expand * m.n_embd;
  const Num Di = static_cast<Num>(di), Hm = static_cast<Num>(di / std::max<int64_t>(1, m.mamba_head_dim)),
            GN = static_cast<Num>(m.mamba_groups * m.mamba_d_state), K = static_cast<Num>(m.mamba_d_conv);
  const Num mamba = C * (2 * Di + 2 * GN + Hm) + (Di + 2 * GN) * (K + 1) + 3 * Hm + Di + Di * C;
  return embeddings + static_cast<Num>(m.attn_blocks) * (norm + attn) +
         static_cast<Num>(m.mlp_blocks) * (norm + mlp) + Lmoe * (norm + moe) +
         static_cast<Num>(m.mamba_blocks) * (norm + mamba) + norm;  // + final norm
}

}  // namespace

int64_t NonPositionParams(const ModelShape& m) { return ParamsOf<int64_t>(m); }

double NonPositionParamsApprox(const ModelShape& m) { return ParamsOf<double>(m); }

double TrainingFlopPerToken(const ModelShape& m) {
  const double attn_layers = m.hybrid ? m.attn_blocks : m.n_layer;
  const double scan = 21.0 * m.mamba_blocks * (m.mamba_expand * m.n_embd) * m.mamba_d_state;
  return 6.0 * static_cast<double>(NonPositionParams(m)) +
         12.0 * attn_layers * m.n_embd * m.seq_len + scan;
}

double PeakFlops(const proto::Train& t) {
  if (t.peak_tflops() > 0) return t.peak_tflops() * 1e12;
  return t.device() == "cuda" ? 989e12 : 0.0;
}

double Mfu(double flop_per_token, double tokens_per_s_per_gpu, double peak_flops) {
  return peak_flops > 0 ? flop_per_token * tokens_per_s_per_gpu / peak_flops : 0.0;
}

}  // namespace gtp::recipes
