#include "recipes/trainer/banner.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/kernels/cudnn_engine.h"

namespace gtp::recipes {

namespace {

// " | attention cudnn 9.14.0" / " | attention flash" on cuda bf16.
std::string AttentionNote(const RankState& s) {
  if (!s.exec.is_cuda() || s.recipe.train().precision() == "f32") return "";
  if (s.exec.attention == nullptr) return " | attention flash";
  const int64_t v = kernels::CudnnEngine::Version();
  return absl::StrCat(" | attention ", s.exec.attention->name(), " ", v / 10000, ".",
                      (v / 100) % 100, ".", v % 100);
}

// The dense grid's rank order as resolved (and the expert grid's, when
// the model has experts).
// Under fp8 and GTP: how many of this rank's weights travel as FP8 tiles
// (ShardedParam::UseFp8TileGather), the rest as the gather dtype says.
std::string Fp8TileGatherNote(const RankState& s) {
  int tiles = 0, gathered = 0;
  for (const layers::ShardedParam* p : s.params.sharded) {
    if (p->gtp_size() == 1) continue;
    ++gathered;
    tiles += p->fp8_tiles() ? 1 : 0;
  }
  if (tiles == 0) return "";
  return absl::StrCat(" | ", tiles, " of ", gathered, " GTP-gathered weights as FP8 tiles");
}

// Under fp8: the layers train.fp8_bf16_first_layers / _last_layers keep in
// bf16, e.g. " | layers 0 and 23 in bf16", " | layers 0-1 and 22-23 in bf16".
std::string Fp8Bf16LayersNote(const proto::Recipe& r) {
  const int first = r.train().fp8_bf16_first_layers(), last = r.train().fp8_bf16_last_layers();
  const int n = r.model().n_layer();
  if (r.train().precision() != "fp8" || first + last == 0) return "";
  auto span = [](int a, int b) {  // layers a..b-1
    return b - a == 1 ? absl::StrCat(a) : absl::StrCat(a, "-", b - 1);
  };
  std::string spans;
  if (first + last >= n) {
    spans = span(0, n);
  } else if (first > 0 && last > 0) {
    spans = absl::StrCat(span(0, first), " and ", span(n - last, n));
  } else {
    spans = first > 0 ? span(0, first) : span(n - last, n);
  }
  return absl::StrCat(" | ", first + last == 1 ? "layer " : "layers ", spans, " in bf16");
}

std::string RankOrder(const RankState& s) {
  return s.has_moe() ? absl::StrCat(s.order, ", experts ", s.expert_order) : s.order;
}

}  // namespace

void PrintBanner(const RankState& s, const RunOptions& o, bool cuda_graphs, const Metrics& metrics) {
  const auto& m = s.recipe.model();
  int64_t total = 0;
  for (auto* p : s.params.sharded) total += p->global_layout().global_rows * p->global_layout().global_cols;
  // Expert weights: each logical tensor once (every EP rank names the whole one).
  for (auto* p : s.experts.sharded) {
    if (s.pgs->RankIn(parallel::groups::kEp).value_or(0) == 0) {
      total += p->global_layout().global_rows * p->global_layout().global_cols;
    }
  }
  std::printf(
      "gtp %s | world %d (%s) | TP %d x GTP %d x DP %d%s (data lanes %d) | order %s | SP %s | "
      "%s on %s%s%s\n"
      "model: %d layers, C=%lld, heads=%lld, vocab=%lld, T=%lld, %s/%s, %.2fM weight params "
      "(%.2fM on this rank)\n"
      "train: %lld steps, global batch %lld x %lld tokens, micro-batch %lld, %s lr %.2e, "
      "data %s, seed %llu\n"
      "run dir: %s\n",
      s.recipe.name().c_str(), s.world.size(), s.world.backend().c_str(), s.recipe.parallel().tp(),
      s.recipe.parallel().tp_num_weight_shards() / s.recipe.parallel().tp(),
      s.world.size() / s.recipe.parallel().tp_num_weight_shards() / s.recipe.parallel().pp() /
          s.recipe.parallel().cp(),
      (absl::StrCat(s.recipe.parallel().cp() > 1 ? absl::StrCat(" x CP ", s.recipe.parallel().cp())
                                                 : "") +
       (s.recipe.parallel().pp() > 1
            ? absl::StrCat(" x PP ", s.recipe.parallel().pp(),
                           s.recipe.parallel().vpp() > 1
                               ? absl::StrCat(" (VPP ", s.recipe.parallel().vpp(), ")")
                               : "")
            : std::string()))
          .c_str(),
      s.data->size(), RankOrder(s).c_str(), s.recipe.parallel().sequence_parallel() ? "on" : "off",
      s.recipe.train().precision().c_str(), s.recipe.train().device().c_str(),
      cuda_graphs ? " | CUDA graphs" : "",
      (AttentionNote(s) +
       (s.recipe.train().precision() != "fp8" ? ""
        : s.exec.is_cuda()
            ? " | fp8 GEMMs in the attention/MLP/Mamba linears and experts (LM head, router bf16)"
            : " | fp8 GEMMs in the attention/MLP/Mamba linears and experts, the CPU's reference "
              "GEMMs (slow)") +
       Fp8Bf16LayersNote(s.recipe) +
       (s.recipe.train().precision() == "fp8" && s.recipe.train().fp8_wgrad() == "bf16"
            ? " | their wgrad GEMMs bf16"
            : "") +
       (s.recipe.train().fp8_gemm() == "wgmma" ? " | fp8 GEMMs by gtp's wgmma kernel" : "") +
       Fp8TileGatherNote(s) +
       (s.recipe.parallel().gtp_gather_dtype() == "fp8"     ? " | fp8 GTP gathers"
        : s.recipe.parallel().gtp_gather_dtype() == "nvfp4" ? " | nvfp4 GTP gathers"
                                                            : "") +
       (s.recipe.parallel().gtp_reduce_scatter_dtype() == "bf16" ? " | bf16 GTP reduce-scatter"
                                                                 : ""))
          .c_str(),
      m.n_layer(), static_cast<long long>(m.n_embd()), static_cast<long long>(m.n_head()),
      static_cast<long long>(m.vocab_size()), static_cast<long long>(m.seq_len()), m.norm().c_str(),
      m.activation().c_str(), total / 1e6, s.local_params / 1e6,
      static_cast<long long>(s.recipe.train().steps()),
      static_cast<long long>(s.sampler->config().global_batch_size),
      static_cast<long long>(m.seq_len()), static_cast<long long>(s.recipe.train().micro_batch()),
      s.recipe.optim().matrices().c_str(), s.recipe.optim().lr(), s.recipe.data().source().c_str(),
      static_cast<unsigned long long>(s.recipe.train().seed()), o.run_dir.c_str());
  // What the first lines leave out: the layer kinds and the experts' layout.
  if (!m.layer_pattern().empty()) std::printf("layers: pattern %s\n", m.layer_pattern().c_str());
  if (m.moe().num_experts() > 0) {
    const auto& p = s.recipe.parallel();
    const int etp = std::max(1, p.etp()), eshards = std::max(1, p.expert_tp_num_weight_shards());
    std::printf("experts: %d per MoE layer, top-%d, hidden %lld | EP %d x ETP %d x EGTP %d%s\n",
                m.moe().num_experts(), m.moe().top_k(), static_cast<long long>(m.moe().ffn_hidden()),
                std::max(1, p.ep()), etp, eshards / etp,
                m.moe().capacity_factor() > 0 ? absl::StrFormat(" | capacity factor %.2f", m.moe().capacity_factor()).c_str()
                                               : " | dropless");
  }
  if (metrics.tensorboard()) std::printf("tensorboard: %s\n", metrics.tensorboard()->path().c_str());
  std::fflush(stdout);
}

}  // namespace gtp::recipes
