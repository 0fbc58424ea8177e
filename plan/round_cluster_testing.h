// plan/round_cluster_testing.h — for plan's tests: a cluster of round
// numbers (1 PFLOP/s bf16, 1 TB/s HBM, 100 GB/s inside a node, 10 GB/s
// between nodes, no latency, every efficiency 1) on which each default-curve
// time can be computed by hand.
#pragma once

#include "plan/cluster.h"

namespace gtp::plan {

inline Cluster RoundCluster(double hbm_bytes) {
  Cluster c;
  c.name = "round";
  c.peak_bf16_flops = 1e15;
  c.peak_fp8_flops = 2e15;
  c.peak_f32_flops = 1e14;
  c.hbm_bytes = hbm_bytes;
  c.hbm_bandwidth = 1e12;
  c.gpus_per_node = 8;
  c.intra = {100e9, 0};
  c.inter = {10e9, 0};
  c.gemm_efficiency = c.attention_efficiency = c.memory_efficiency = 1.0;
  return c;
}

}  // namespace gtp::plan
