#include "recipes/trainer/mfu.h"

#include <algorithm>

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
  if (e.num_experts() > 0) {
    for (int l = 0; l < m.n_layer(); ++l) {
      const bool moe = !e.pattern().empty()
                           ? l < static_cast<int>(e.pattern().size()) && e.pattern()[l] == 'E'
                           : l % std::max(1, e.every_n()) == 0;
      s.moe_layers += moe;
    }
    s.num_experts = e.num_experts();
    s.top_k = e.top_k();
    s.moe_hidden = e.ffn_hidden() > 0 ? e.ffn_hidden() : (m.ffn_hidden() > 0 ? m.ffn_hidden() : 4 * m.n_embd());
    s.shared_hidden = e.shared_ffn_hidden();
  }
  return s;
}

int64_t NonPositionParams(const ModelShape& m) {
  const int64_t C = m.n_embd, V = m.vocab_size;
  const int64_t NKV = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
  const int64_t C_kv = NKV * (C / m.n_head);  // k and v output channels
  const int64_t H = m.ffn_hidden > 0 ? m.ffn_hidden : 4 * C;
  const int64_t b = m.bias ? 1 : 0;
  const int64_t norm = m.rmsnorm || !m.bias ? C : 2 * C;
  const int64_t attn = (C * C + b * C) + 2 * (C * C_kv + b * C_kv) + (C * C + b * C);  // q, k, v, o
  auto dense = [&](int64_t h) { return (C * (m.swiglu ? 2 * h : h) + b * (m.swiglu ? 2 * h : h)) + (h * C + b * C); };
  const int64_t mlp = dense(H);  // fc, proj
  const int64_t He = m.moe_hidden;
  const int64_t moe = m.top_k * (C * (m.swiglu ? 2 * He : He) + He * C) +
                      (m.shared_hidden > 0 ? dense(m.shared_hidden) : 0) + m.num_experts * C;
  const int64_t embeddings = (m.tied_embeddings ? 1 : 2) * V * C;
  return embeddings + m.n_layer * (2 * norm + attn) + (m.n_layer - m.moe_layers) * mlp +
         m.moe_layers * moe + norm;  // + final norm
}

double TrainingFlopPerToken(const ModelShape& m) {
  return 6.0 * static_cast<double>(NonPositionParams(m)) +
         12.0 * static_cast<double>(m.n_layer) * m.n_embd * m.seq_len;
}

double PeakFlops(const proto::Train& t) {
  if (t.peak_tflops() > 0) return t.peak_tflops() * 1e12;
  return t.device() == "cuda" ? 989e12 : 0.0;
}

double Mfu(double flop_per_token, double tokens_per_s_per_gpu, double peak_flops) {
  return peak_flops > 0 ? flop_per_token * tokens_per_s_per_gpu / peak_flops : 0.0;
}

}  // namespace gtp::recipes
