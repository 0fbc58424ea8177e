#include "recipes/trainer/mfu.h"

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
  return s;
}

int64_t NonPositionParams(const ModelShape& m) {
  const int64_t C = m.n_embd, V = m.vocab_size;
  const int64_t NKV = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
  const int64_t C_kv = NKV * (C / m.n_head);  // k and v output channels
  const int64_t H = m.ffn_hidden > 0 ? m.ffn_hidden : 4 * C;
  const int64_t H_fc = m.swiglu ? 2 * H : H;
  const int64_t b = m.bias ? 1 : 0;
  const int64_t norm = m.rmsnorm || !m.bias ? C : 2 * C;
  const int64_t attn = (C * C + b * C) + 2 * (C * C_kv + b * C_kv) + (C * C + b * C);  // q, k, v, o
  const int64_t mlp = (C * H_fc + b * H_fc) + (H * C + b * C);                         // fc, proj
  const int64_t embeddings = (m.tied_embeddings ? 1 : 2) * V * C;
  return embeddings + m.n_layer * (2 * norm + attn + mlp) + norm;  // + final norm
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
