#include "parallel/parallel_config.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace gtp::parallel {
namespace {

absl::Status Problems(const std::vector<std::string>& problems) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid parallel config: ", absl::StrJoin(problems, "; ")));
}

}  // namespace

absl::StatusOr<ParallelConfig> ParallelConfig::Resolve(int world, const ModelFacts& facts) const {
  ParallelConfig r = *this;
  std::vector<std::string> p;

  // 1. Each field on its own.
  if (world > 0 && r.world_size > 0 && world != r.world_size) {
    p.push_back(absl::StrCat("world_size ", r.world_size,
                             " in the config differs from the actual world size ", world));
  }
  if (r.world_size <= 0) r.world_size = world;
  if (r.world_size <= 0) {
    p.push_back("world size unknown: set world_size or pass the communicator's size");
  }
  auto at_least_one = [&](const char* name, int v) {
    if (v < 1) p.push_back(absl::StrCat(name, " must be >= 1 (got ", v, ")"));
  };
  auto zero_or_positive = [&](const char* name, int v) {
    if (v < 0) p.push_back(absl::StrCat(name, " must be >= 1, or 0 to derive it (got ", v, ")"));
  };
  at_least_one("tp", r.tp);
  at_least_one("cp", r.cp);
  at_least_one("pp", r.pp);
  at_least_one("ep", r.ep);
  zero_or_positive("dp", r.dp);
  zero_or_positive("etp", r.etp);
  zero_or_positive("tp_num_weight_shards", r.tp_num_weight_shards);
  zero_or_positive("expert_tp_num_weight_shards", r.expert_tp_num_weight_shards);
  if (!p.empty()) return Problems(p);

  if (r.etp == 0) r.etp = r.tp;
  if (r.tp_num_weight_shards == 0) r.tp_num_weight_shards = r.tp;
  if (r.expert_tp_num_weight_shards == 0) r.expert_tp_num_weight_shards = r.etp;
  if (r.tp == 1) r.sequence_parallel = false;  // no-op; see the header.

  // 2. Shards against TP, and the order strings.
  const bool gtp_whole = r.tp_num_weight_shards % r.tp == 0;
  const bool egtp_whole = r.expert_tp_num_weight_shards % r.etp == 0;
  if (!gtp_whole) {
    p.push_back(absl::StrCat("tp_num_weight_shards ", r.tp_num_weight_shards,
                             " is not a multiple of tp ", r.tp,
                             " (GTP = tp_num_weight_shards / TP must be a whole number)"));
  }
  if (!egtp_whole) {
    p.push_back(absl::StrCat("expert_tp_num_weight_shards ", r.expert_tp_num_weight_shards,
                             " is not a multiple of etp ", r.etp,
                             " (EGTP = expert_tp_num_weight_shards / ETP must be a whole number)"));
  }
  if (auto s = ParseAxisList(r.order, "dense order"); !s.ok()) {
    p.push_back(std::string(s.status().message()));
  }
  if (auto s = ParseAxisList(r.expert_order, "expert order"); !s.ok()) {
    p.push_back(std::string(s.status().message()));
  }

  // 3. The world against the grids (needs whole GTP and EGTP).
  const int gtp = r.tp_num_weight_shards / r.tp;
  const int egtp = r.expert_tp_num_weight_shards / r.etp;
  const int64_t dense_fixed = int64_t{r.tp} * gtp * r.cp * r.pp;
  const int64_t expert_fixed = int64_t{r.etp} * r.ep * egtp * r.pp;
  if (!gtp_whole) {
    // Reported above.
  } else if (r.world_size % dense_fixed != 0) {
    p.push_back(absl::StrCat("world size ", r.world_size,
                             " is not divisible by TP·GTP·CP·PP = ", r.tp, "·", gtp, "·", r.cp, "·",
                             r.pp, " = ", dense_fixed, " (the dense grid is TP·GTP·CP·DP·PP)"));
  } else if (r.dp == 0) {
    r.dp = static_cast<int>(r.world_size / dense_fixed);
  } else if (dense_fixed * r.dp != r.world_size) {
    p.push_back(absl::StrCat("dense grid TP·GTP·CP·DP·PP = ", r.tp, "·", gtp, "·", r.cp, "·", r.dp,
                             "·", r.pp, " = ", dense_fixed * r.dp, " does not equal world size ",
                             r.world_size, " (set dp = ", r.world_size / dense_fixed,
                             ", or 0 to derive it)"));
  }
  if (!egtp_whole) {
    // Reported above.
  } else if (r.world_size % expert_fixed != 0) {
    p.push_back(absl::StrCat("expert grid does not fit the world: world size ", r.world_size,
                             " is not divisible by ETP·EP·EGTP·PP = ", r.etp, "·", r.ep, "·", egtp,
                             "·", r.pp, " = ", expert_fixed,
                             " (EDP = world / (ETP·EP·EGTP·PP) must be a whole number)"));
  }

  // 4. Model facts.
  if (facts.num_experts.has_value()) {
    const int n = *facts.num_experts;
    if (n == 0 && r.ep > 1) {
      p.push_back(absl::StrCat("ep ", r.ep, " > 1 but the model has no experts (num_experts 0)"));
    } else if (n > 0 && n % r.ep != 0) {
      p.push_back(absl::StrCat("ep ", r.ep, " does not divide num_experts ", n,
                               " (each EP rank holds num_experts / EP experts)"));
    }
  }
  if (facts.seq_length.has_value()) {
    const int64_t seq = *facts.seq_length;
    if (seq < 1) {
      p.push_back(absl::StrCat("seq_length must be >= 1 (got ", seq, ")"));
    } else if (r.cp > 1 && seq % (2 * int64_t{r.cp}) != 0) {
      p.push_back(absl::StrCat("seq_length ", seq, " is not divisible by 2·CP = ", 2 * r.cp,
                               " (context parallelism splits each sequence into 2·CP chunks "
                               "for causal load balance)"));
    } else if (r.sequence_parallel && (seq / r.cp) % r.tp != 0) {
      p.push_back(absl::StrCat("with sequence_parallel the tokens per CP rank (seq_length / CP = ",
                               seq / r.cp, ") must be divisible by tp ", r.tp));
    }
  }
  if (facts.num_attention_heads.has_value() && *facts.num_attention_heads % r.tp != 0) {
    p.push_back(absl::StrCat("num_attention_heads ", *facts.num_attention_heads,
                             " is not divisible by tp ", r.tp, " (TP shards attention heads)"));
  }
  if (!p.empty()) return Problems(p);

  // 5. The grids themselves: orders that miss an axis, and pipeline stages.
  absl::StatusOr<RankGenerator> dense = r.DenseGrid();
  absl::StatusOr<RankGenerator> expert = r.ExpertGrid();
  if (!dense.ok()) p.push_back(absl::StrCat("dense grid: ", dense.status().message()));
  if (!expert.ok()) {
    p.push_back(
        absl::StrCat("expert grid (tp=ETP, gtp=EGTP, dp=EDP): ", expert.status().message()));
  }
  if (dense.ok() && expert.ok()) {
    for (int rank = 0; rank < r.world_size; ++rank) {
      const int a = dense->Coordinates(rank)->pp, b = expert->Coordinates(rank)->pp;
      if (a != b) {
        p.push_back(absl::StrCat("the dense order '", r.order, "' and the expert order '",
                                 r.expert_order, "' give different pipeline groups: rank ", rank,
                                 " is on stage ", a, " of the dense grid but stage ", b,
                                 " of the expert grid (put pp last in both "
                                 "orders, or where the axes before it have the same product)"));
        break;
      }
    }
  }
  if (!p.empty()) return Problems(p);
  return r;
}

absl::Status ParallelConfig::Validate(int world, const ModelFacts& facts) const {
  return Resolve(world, facts).status();
}

bool ParallelConfig::resolved() const {
  return world_size > 0 && tp > 0 && cp > 0 && pp > 0 && ep > 0 && dp > 0 && etp > 0 &&
         tp_num_weight_shards > 0 && expert_tp_num_weight_shards > 0 &&
         tp_num_weight_shards % tp == 0 && expert_tp_num_weight_shards % etp == 0;
}

int ParallelConfig::gtp() const {
  GTP_CHECK(resolved(), "ParallelConfig::gtp() needs a resolved config; call Resolve()");
  return tp_num_weight_shards / tp;
}

int ParallelConfig::egtp() const {
  GTP_CHECK(resolved(), "ParallelConfig::egtp() needs a resolved config; call Resolve()");
  return expert_tp_num_weight_shards / etp;
}

int ParallelConfig::edp() const {
  GTP_CHECK(resolved(), "ParallelConfig::edp() needs a resolved config; call Resolve()");
  return world_size / (etp * ep * egtp() * pp);
}

AxisValues ParallelConfig::DenseSizes() const {
  AxisValues s;
  s.tp = tp;
  s.gtp = gtp();
  s.cp = cp;
  s.ep = 1;
  s.dp = dp;
  s.pp = pp;
  return s;
}

AxisValues ParallelConfig::ExpertSizes() const {
  AxisValues s;
  s.tp = etp;
  s.gtp = egtp();
  s.cp = 1;
  s.ep = ep;
  s.dp = edp();
  s.pp = pp;
  return s;
}

absl::StatusOr<RankGenerator> ParallelConfig::DenseGrid(int offset) const {
  if (!resolved()) return absl::FailedPreconditionError("DenseGrid needs a resolved config");
  return RankGenerator::Create(DenseSizes(), order, offset);
}

absl::StatusOr<RankGenerator> ParallelConfig::ExpertGrid(int offset) const {
  if (!resolved()) return absl::FailedPreconditionError("ExpertGrid needs a resolved config");
  return RankGenerator::Create(ExpertSizes(), expert_order, offset);
}

std::string ParallelConfig::ToString() const {
  if (!resolved()) {
    return absl::StrCat(
        "world=", world_size, " tp=", tp, " tp_num_weight_shards=", tp_num_weight_shards,
        " cp=", cp, " dp=", dp, " pp=", pp, " ep=", ep, " etp=", etp,
        " expert_tp_num_weight_shards=", expert_tp_num_weight_shards, " sp=", sequence_parallel,
        " order=", order, " expert_order=", expert_order, " (unresolved)");
  }
  return absl::StrCat("world=", world_size, " tp=", tp, " gtp=", gtp(), " cp=", cp, " dp=", dp,
                      " pp=", pp, " sp=", sequence_parallel, " order=", order,
                      " | expert etp=", etp, " ep=", ep, " egtp=", egtp(), " edp=", edp(),
                      " order=", expert_order);
}

}  // namespace gtp::parallel
