#include "plan/cluster.h"

#include "gtest/gtest.h"

namespace gtp::plan {
namespace {

constexpr char kGood[] = R"(
name = test GPU
peak_bf16_tflops = 100   # comment
peak_fp8_tflops = 0
peak_f32_tflops = 10
hbm_gb = 80
hbm_bandwidth_gbps = 2000
gpus_per_node = 8
nvlink_gbps = 200
nvlink_latency_us = 5
nvlink_allreduce_gbps = 250
nvlink_allreduce_latency_us = 4
network_gbps = 20
network_latency_us = 10
gemm_efficiency = 0.5
attention_efficiency = 0.4
memory_efficiency = 0.8
kernel_overhead_us = 3
context_gb = 1
nccl_buffer_gb = 0.5
)";

TEST(Cluster, ParsesUnitsToSi) {
  absl::StatusOr<Cluster> c = ParseCluster(kGood, "good");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "test GPU");
  EXPECT_DOUBLE_EQ(c->peak_bf16_flops, 100e12);
  EXPECT_DOUBLE_EQ(c->hbm_bytes, 80e9);
  EXPECT_DOUBLE_EQ(c->intra.bandwidth, 200e9);
  EXPECT_DOUBLE_EQ(c->intra.latency, 5e-6);
  EXPECT_DOUBLE_EQ(c->intra_allreduce.bandwidth, 250e9);
  EXPECT_DOUBLE_EQ(c->intra_allreduce.latency, 4e-6);
  EXPECT_DOUBLE_EQ(c->inter.bandwidth, 20e9);
  EXPECT_EQ(c->gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(c->kernel_overhead, 3e-6);
}

TEST(Cluster, RefusesBadInput) {
  auto err = [](const std::string& text) {
    absl::StatusOr<Cluster> c = ParseCluster(text, "f");
    return c.ok() ? std::string("ok") : std::string(c.status().message());
  };
  EXPECT_NE(err(std::string(kGood) + "nvlink_bw = 3\n").find("unknown cluster key 'nvlink_bw'"), std::string::npos);
  EXPECT_NE(err(std::string(kGood) + "hbm_gb = 3\n").find("hbm_gb is given twice"), std::string::npos);
  std::string zero = kGood;
  zero.replace(zero.find("network_gbps = 20"), 17, "network_gbps = 0");
  EXPECT_NE(err(zero).find("network_gbps = '0' must be a positive number"), std::string::npos);
  std::string neg = kGood;
  neg.replace(neg.find("nvlink_latency_us = 5"), 21, "nvlink_latency_us = -1");
  EXPECT_NE(err(neg).find("nvlink_latency_us"), std::string::npos);
  std::string eff = kGood;
  eff.replace(eff.find("gemm_efficiency = 0.5"), 21, "gemm_efficiency = 1.5");
  EXPECT_NE(err(eff).find("at most 1"), std::string::npos);
  std::string missing = kGood;
  missing.replace(missing.find("hbm_gb = 80"), 11, "");
  EXPECT_NE(err(missing).find("missing hbm_gb"), std::string::npos);
  EXPECT_NE(err(std::string(kGood) + "garbage\n").find("expected 'key = value'"), std::string::npos);
}

TEST(Cluster, OverridesReplaceValuesAndAreChecked) {
  absl::StatusOr<Cluster> c = ParseCluster(kGood, "good", {"gpus_per_node=64"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->gpus_per_node, 64);
  EXPECT_FALSE(ParseCluster(kGood, "good", {"nvlink_gbps=0"}).ok());
  EXPECT_FALSE(ParseCluster(kGood, "good", {"bogus=1"}).ok());
}

TEST(Cluster, ShippedFilesLoad) {
  for (const char* f : {"plan/clusters/h200.cluster", "plan/clusters/a100_80gb.cluster",
                        "plan/clusters/gb200_nvl72.cluster"}) {
    absl::StatusOr<Cluster> c = LoadCluster(f);
    ASSERT_TRUE(c.ok()) << f << ": " << c.status();
  }
  // H200: NVLink fitted to the 2 × H200 NCCL all-gather/reduce-scatter
  // table of 2026-11-30 (plan/two_gpu_test.cc re-derives these numbers).
  absl::StatusOr<Cluster> h = LoadCluster("plan/clusters/h200.cluster");
  EXPECT_DOUBLE_EQ(h->intra.bandwidth, 254.1e9);
  EXPECT_DOUBLE_EQ(h->intra.latency, 20.6e-6);
  EXPECT_DOUBLE_EQ(h->peak_bf16_flops, 989e12);
  EXPECT_EQ(LoadCluster("plan/clusters/none.cluster").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gtp::plan
