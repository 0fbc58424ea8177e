#include "plan/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace gtp::plan {

namespace {

std::vector<int> PowersOfTwo(int lo, int hi) {
  std::vector<int> v;
  for (int x = lo; x <= hi; x *= 2) v.push_back(x);
  return v;
}

double ComputeTotal(const Prediction& p) {
  double s = 0;
  for (const auto& [k, v] : p.breakdown.compute) s += v;
  return s;
}

std::string WhyLoses(const Candidate& c, const Candidate& best, double cap) {
  if (!c.fits) {
    return absl::StrFormat("memory %.1f GB > %.1f GB", c.pred.memory.total / 1e9, cap / 1e9);
  }
  const Breakdown &a = c.pred.breakdown, &b = best.pred.breakdown;
  struct Part {
    std::string name;
    double delta;
  };
  std::vector<Part> parts = {
      {"compute (kernels, incl. recompute)", ComputeTotal(c.pred) - ComputeTotal(best.pred)},
      {"pipeline bubble", a.bubble - b.bubble},
      {"exposed tp/sp", a.tp.exposed - b.tp.exposed},
      {"exposed gtp gather", a.gtp_gather.exposed - b.gtp_gather.exposed},
      {"exposed gtp reduce-scatter", a.gtp_reduce_scatter.exposed - b.gtp_reduce_scatter.exposed},
      {"exposed ep all-to-all", a.ep.exposed - b.ep.exposed},
      {"exposed egtp", a.egtp.exposed - b.egtp.exposed},
      {"exposed cp ring", a.cp.exposed - b.cp.exposed},
      {"exposed dp", a.dp_reduce.exposed + a.dp_param_gather.exposed - b.dp_reduce.exposed -
                         b.dp_param_gather.exposed},
      {"optimizer", a.optimizer - b.optimizer},
  };
  const Part* worst = &parts[0];
  for (const Part& p : parts) {
    if (p.delta > worst->delta) worst = &p;
  }
  return absl::StrFormat("%s +%.1f ms/step (%.1f%% slower)", worst->name, worst->delta * 1e3,
                         100.0 * (c.pred.step_time / best.pred.step_time - 1));
}

}  // namespace

double ExposedComm(const Prediction& p) {
  const Breakdown& b = p.breakdown;
  return b.tp.exposed + b.ep.exposed + b.cp.exposed + b.gtp_gather.exposed + b.gtp_reduce_scatter.exposed +
         b.egtp.exposed + b.dp_reduce.exposed + b.dp_param_gather.exposed;
}

SearchSpace DefaultSpace(const recipes::proto::Recipe& r, const Cluster& c, int world) {
  SearchSpace s;
  s.tp = PowersOfTwo(1, std::min(8, c.gpus_per_node));
  s.gtp = PowersOfTwo(1, std::min(world, 64));
  s.pp = PowersOfTwo(1, std::min(world, 16));
  s.vpp = {1, 2, 4};
  s.cp = {1, 2};
  s.micro_batch = {1, 2, 4};
  s.recompute = {false, true};
  const int experts = r.model().moe().num_experts();
  s.ep = experts > 0 ? PowersOfTwo(1, std::min(world, experts)) : std::vector<int>{1};
  s.egtp = experts > 0 ? std::vector<int>{1, 2, 4} : std::vector<int>{1};
  return s;
}

SearchSpace FamilySpace(const std::string& family, const recipes::proto::Recipe& r, const Cluster& c, int world) {
  SearchSpace s = DefaultSpace(r, c, world);
  if (family == "fsdp") {
    s.tp = {1};
    s.pp = {1};
    s.vpp = {1};
    s.gtp.clear();
    for (int cp : s.cp) s.gtp.push_back(world / cp);
  } else if (family == "tpdp") {
    s.gtp = {1};
  } else {  // gtp: at least two weight shards beyond TP
    s.gtp.erase(std::remove(s.gtp.begin(), s.gtp.end(), 1), s.gtp.end());
  }
  return s;
}

absl::StatusOr<SearchResult> Search(const recipes::proto::Recipe& r, int world, double cap, const CostModel& cost,
                                    const SearchSpace& space) {
  absl::StatusOr<Layout> base = LayoutFromRecipe(r);
  if (!base.ok()) return base.status();
  SearchResult res;
  std::vector<Candidate> all;
  for (int tp : space.tp)
    for (int gtp : space.gtp)
      for (int pp : space.pp)
        for (int vpp : space.vpp)
          for (int cp : space.cp)
            for (int ep : space.ep)
              for (int egtp : space.egtp)
                for (int64_t mb : space.micro_batch)
                  for (bool rc : space.recompute) {
                    const int64_t fixed = int64_t{tp} * gtp * pp * cp;
                    if (world % fixed != 0 || (vpp > 1 && pp == 1)) continue;
                    Layout l = *base;
                    l.tp = tp, l.gtp = gtp, l.pp = pp, l.vpp = vpp, l.cp = cp, l.ep = ep, l.egtp = egtp;
                    l.dp = static_cast<int>(world / fixed);
                    l.sp = space.sequence_parallel && tp > 1;
                    l.micro_batch = mb;
                    l.recompute = rc;
                    l.unfused_attention = space.unfused_attention;
                    l.attention_dropout = space.attention_dropout;
                    if (!CheckLayout(r, l, cost.cluster()).ok()) {
                      ++res.skipped;
                      continue;
                    }
                    absl::StatusOr<Prediction> p = Predict(r, l, cost);
                    if (!p.ok()) {
                      ++res.skipped;
                      continue;
                    }
                    ++res.evaluated;
                    Candidate c;
                    c.pred = *p;
                    c.fits = p->memory.total <= cap;
                    all.push_back(std::move(c));
                  }
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits && std::abs(a.pred.tokens_per_s / b.pred.tokens_per_s - 1) > 1e-9) {
      return a.pred.tokens_per_s > b.pred.tokens_per_s;
    }
    if (a.fits) {  // equal speed (e.g. CP 2 × mb 2 vs CP 1 × mb 1): the simpler layout first
      if (a.pred.layout.cp != b.pred.layout.cp) return a.pred.layout.cp < b.pred.layout.cp;
      return a.pred.layout.micro_batch < b.pred.layout.micro_batch;
    }
    return a.pred.memory.total < b.pred.memory.total;
  });
  for (size_t i = 1; i < all.size(); ++i) all[i].why = WhyLoses(all[i], all[0], cap);
  if (!all.empty()) all[0].why = all[0].fits ? "best" : "nothing fits the memory cap";
  res.ranked = std::move(all);
  return res;
}

}  // namespace gtp::plan
