// plan/cluster.h — a cluster description for the planner: one GPU kind
// (peak FLOP/s, HBM size and bandwidth), GPUs per node, and the two links a
// collective can cross (NVLink inside a node, the network between nodes).
//
// Cluster files are plain text, one `key = value` a line, `#` comments:
//
//   name = H200 (8 per node)
//   peak_bf16_tflops = 989          # dense, per GPU
//   hbm_gb = 141
//   nvlink_gbps = 450               # GB/s per GPU per direction
//   ...
//
// Every key in kClusterKeys must be given exactly once (no silent
// defaults for a number a plan depends on); an unknown key, a repeated
// key, or a value that is not a positive finite number (zero bandwidth, a
// negative latency) is InvalidArgument naming the file, the line and the key.
// Units are the ones in the key names: GB = 1e9 bytes, GB/s = 1e9 bytes/s,
// µs, TFLOP/s = 1e12. The parsed struct holds SI units (bytes, seconds).
// Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gtp::plan {

struct Link {
  double bandwidth = 0;  // bytes/s per GPU per direction, as NCCL reaches it
  double latency = 0;    // seconds per ring step (alpha)
};

struct Cluster {
  std::string name;
  double peak_bf16_flops = 0;  // dense
  double peak_fp8_flops = 0;   // dense; 0: the GPU has no fp8 tensor cores
  double peak_f32_flops = 0;   // what f32 GEMMs run at (no TF32)
  double hbm_bytes = 0;
  double hbm_bandwidth = 0;    // bytes/s
  int gpus_per_node = 0;       // GPUs that share the fast link (an NVLink domain)
  Link intra;                  // NVLink (NVSwitch) inside a node
  // NCCL's all-reduce inside a node, when measured: its own ring figures
  // (one kernel, not reduce-scatter + all-gather). Bandwidth 0: all-reduce
  // is costed as reduce-scatter + all-gather over `intra`.
  Link intra_allreduce;
  Link inter;                  // the network between nodes, per GPU (one NIC rail each)
  // The built-in, uncalibrated efficiency curve (plan/calibration.h): the
  // fraction of peak a large GEMM / the fused attention kernels reach, the
  // fraction of HBM bandwidth elementwise kernels reach, and a fixed cost
  // per kernel launch.
  double gemm_efficiency = 0;
  double attention_efficiency = 0;
  double memory_efficiency = 0;
  double kernel_overhead = 0;  // seconds
  // Memory no plan can use: the CUDA context (+ cuBLAS/cuDNN workspaces) and
  // NCCL's buffers, per GPU.
  double context_bytes = 0;
  double nccl_buffer_bytes = 0;
};

// The keys a cluster file must give, in the order `plan` prints them.
const std::vector<std::string>& ClusterKeys();

// `origin` names the text in errors (a path).
absl::StatusOr<Cluster> ParseCluster(const std::string& text, const std::string& origin,
                                     const std::vector<std::string>& overrides = {});
// `overrides` ("key=value", the same keys and checks) replace the file's
// values: `plan --cluster_set gpus_per_node=64`.
absl::StatusOr<Cluster> LoadCluster(const std::string& path,
                                    const std::vector<std::string>& overrides = {});

}  // namespace gtp::plan
