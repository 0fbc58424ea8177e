// Narayanan et al. 2021 (Megatron-LM on up to 3072 A100s), Table 1: every row's
// layout predicted on plan/clusters/a100_80gb.cluster with the default
// (uncalibrated) curve, and the achieved TFLOP/s per GPU compared with the
// paper's. Tolerance 15 % (issue 32's acceptance): the published figure is an
// end-to-end measurement of a 2021 software stack; the planner's kernel
// efficiencies are the cluster file's assumptions, not fitted to these rows.
// The 2021 software is modelled as it was: unfused attention with attention
// dropout, full recompute, and tensor parallelism without sequence
// parallelism (the paper's TP, §2.3, all-reduces the activations at the end
// of each TP region and replicates LayerNorm, dropout and the residual add on
// every TP rank; splitting those along the sequence came with Korthikanti et
// al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
// arXiv:2205.05198). Modelled with SP, the t = 8 rows came out 3.0–6.5 points
// more optimistic (the 18.4B row +15.8 %, outside 15 %). The A100 NVLink
// figure is NCCL's reachable bus bandwidth (a100_80gb.cluster, 230 GB/s,
// sourced there; 240 before: 0.3–0.8 points). All 10 rows are now within
// +1.1 … +9.9 %, still one-sided (the model has no end-to-end overheads).
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "plan/cluster.h"
#include "plan/search.h"
#include "plan/step.h"
#include "recipes/trainer/config.h"

namespace gtp::plan {
namespace {

struct Row {
  double params_b;
  int heads, hidden, layers, tp, pp, gpus, batch;
  double tflops;
};

std::vector<Row> ReadTable() {
  std::ifstream f("plan/testdata/narayanan2021_table1.tsv");
  std::vector<Row> rows;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    Row r;
    in >> r.params_b >> r.heads >> r.hidden >> r.layers >> r.tp >> r.pp >> r.gpus >> r.batch >> r.tflops;
    rows.push_back(r);
  }
  return rows;
}

// The paper's FLOPs per step (with recompute: four passes), divided by time and GPUs.
double PaperTflopsPerGpu(const Row& r, double step_s) {
  const double B = r.batch, s = 2048, l = r.layers, h = r.hidden, V = 51200;
  const double F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  return F / step_s / r.gpus / 1e12;
}

TEST(PublishedRuns, Narayanan2021Table1) {
  const std::vector<Row> rows = ReadTable();
  ASSERT_EQ(rows.size(), 10u);
  absl::StatusOr<Cluster> cl = LoadCluster("plan/clusters/a100_80gb.cluster");
  ASSERT_TRUE(cl.ok()) << cl.status();
  const CostModel cost(*cl);
  int within = 0;
  for (const Row& row : rows) {
    const int dp = row.gpus / (row.tp * row.pp);
    absl::StatusOr<recipes::proto::Recipe> r = recipes::LoadRecipe(
        "tools/plan/gpt_megatron2021.pbtxt",
        {absl::StrCat("model.n_layer=", row.layers), absl::StrCat("model.n_embd=", row.hidden),
         absl::StrCat("model.n_head=", row.heads), absl::StrCat("parallel.world_size=", row.gpus),
         absl::StrCat("parallel.tp=", row.tp), absl::StrCat("parallel.tp_num_weight_shards=", row.tp),
         absl::StrCat("parallel.pp=", row.pp), absl::StrCat("train.global_batch=", row.batch)});
    ASSERT_TRUE(r.ok()) << r.status();
    SearchSpace space;
    space.tp = {row.tp};
    space.gtp = {1};
    space.pp = {row.pp};
    space.vpp = {1};
    space.cp = {1};
    space.ep = {1};
    space.egtp = {1};
    space.micro_batch = {1, 2, 4, 8};
    space.recompute = {true};
    space.unfused_attention = true;  // Megatron-LM 2021: no flash attention
    space.attention_dropout = true;  // its GPT recipes: attention dropout 0.1
    space.sequence_parallel = false;  // Megatron-LM 2021: TP without SP (file comment)
    absl::StatusOr<SearchResult> res = Search(*r, row.gpus, cl->hbm_bytes, cost, space);
    ASSERT_TRUE(res.ok()) << res.status();
    ASSERT_FALSE(res->ranked.empty());
    const Prediction& p = res->ranked[0].pred;
    EXPECT_TRUE(res->ranked[0].fits) << row.params_b << "B";
    EXPECT_EQ(p.layout.dp, dp);
    const double predicted = PaperTflopsPerGpu(row, p.step_time);
    const double err = predicted / row.tflops - 1;
    std::printf("%7.1fB t%d p%d d%d B=%d mb%lld: predicted %6.1f TFLOP/s per GPU, paper %6.1f (%+.1f%%), memory %.1f GB\n",
                row.params_b, row.tp, row.pp, dp, row.batch, static_cast<long long>(p.layout.micro_batch), predicted,
                row.tflops, 100 * err, p.memory.total / 1e9);
    within += std::abs(err) <= 0.15;
    EXPECT_FALSE(p.layout.sp) << row.params_b << "B";
    EXPECT_LE(std::abs(err), 0.15) << row.params_b << "B: predicted " << predicted << " vs " << row.tflops;
  }
  std::printf("%d of %zu rows within 15 %%\n", within, rows.size());
  EXPECT_EQ(within, 10);
}

}  // namespace
}  // namespace gtp::plan
