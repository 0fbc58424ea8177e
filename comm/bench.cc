// comm:bench — collective bandwidth of one backend, nccl-tests style.
//
//   bazel run //comm:bench -- --backend=local --nproc=4
//   gtprun --nproc 4 -- bazel-bin/comm/bench --backend=ucx
//   gtprun --nproc 2 -- bazel-bin/comm/bench --backend=nccl      (GPU machine)
//
// For each of all_gather, reduce_scatter, all_reduce and each size S from
// --min_bytes to --max_bytes (x4 steps) it prints the mean time per call and
//   algbw = S / time,
//   busbw = algbw · (n−1)/n   (all_gather, reduce_scatter)
//         = algbw · 2(n−1)/n  (all_reduce)
// where S is the size of the largest buffer of the call (all_gather's
// output, reduce_scatter's input, all_reduce's buffer), as nccl-tests does.
// A plain memcpy line gives the machine's copy bandwidth for comparison.
// First, point-to-point through the same communicator (what ucx_perftest's
// tag_bw measures): p2p = rank 0 sends one rank's chunk (size/n) to rank 1,
// p2p_bidir = ranks 0 and 1 send each other one at the same time (what a
// 2-rank ring step does); bandwidth = chunk bytes / time per direction. The
// collectives' "vs p2p" column is their busbw ÷ p2p's bandwidth at the same
// chunk size.
// Only rank 0 prints. Every call is completed with Synchronize().
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "comm/communicator.h"
#include "comm/env/launch_env.h"
#include "comm/local/local_communicator.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/ucx/ucx_communicator.h"
#include "core/cuda_runtime.h"
#include "core/status.h"

ABSL_FLAG(std::string, backend, "local", "local, ucx (under gtprun) or nccl (under gtprun, GPUs).");
ABSL_FLAG(int, nproc, 4, "Ranks (threads) for --backend=local.");
ABSL_FLAG(int64_t, min_bytes, 1 << 20, "Smallest size.");
ABSL_FLAG(int64_t, max_bytes, 256 << 20, "Largest size.");
ABSL_FLAG(int, iters, 0, "Timed calls per size; 0: 20 on GPUs, else 5 (2 above 64 MiB).");
ABSL_FLAG(int, warmup, 2, "Untimed calls per size.");
ABSL_FLAG(std::string, dtype, "f32", "f32 or bf16.");
ABSL_FLAG(std::vector<std::string>, ops, {},
          "Subset of p2p,p2p_bidir,all_gather,reduce_scatter,all_reduce to run (empty: all); "
          "\"vs p2p\" needs p2p.");

namespace gtp::comm {
namespace {

struct Memory {
  bool device = false;
  void* Alloc(size_t n) {
    void* p = nullptr;
    if (device) {
      GTP_CUDA_CHECK(cudaMalloc(&p, n));
      GTP_CUDA_CHECK(cudaMemset(p, 0, n));
    } else {
      p = std::malloc(n);
      std::memset(p, 0, n);  // touch the pages outside the timed region
    }
    return p;
  }
  void Free(void* p) {
    if (device) cudaFree(p);
    else std::free(p);
  }
};

const char* Algorithm(const std::string& backend, const std::string& op) {
  if (backend == "ucx") return op == "all_reduce" ? "ring rs+ag" : "ring";
  if (backend == "nccl") return op == "all_gather" ? "nccl" : "nccl (bf16: f32 accum)";
  return "shared memory, rank order";
}

absl::Status Bench(Communicator& c, const std::string& backend, Memory mem) {
  const int n = c.size();
  const DType dt = absl::GetFlag(FLAGS_dtype) == "bf16" ? DType::kBF16 : DType::kF32;
  const size_t es = SizeOf(dt);
  if (c.rank() == 0) {
    std::printf("# backend=%s ranks=%d dtype=%s\n", backend.c_str(), n, DTypeName(dt));
    std::printf("%-15s %-26s %12s %12s %12s %12s %8s\n", "op", "algorithm", "size(B)", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", "vs p2p");
  }
  std::map<int64_t, double> p2p_bw;  // chunk bytes → GB/s
  for (const std::string op : {"p2p", "p2p_bidir", "all_gather", "reduce_scatter", "all_reduce"}) {
    const bool p2p = op == "p2p" || op == "p2p_bidir";
    if (p2p && n < 2) continue;
    const std::vector<std::string> only = absl::GetFlag(FLAGS_ops);
    if (!only.empty() && std::find(only.begin(), only.end(), op) == only.end()) continue;
    for (int64_t size = absl::GetFlag(FLAGS_min_bytes); size <= absl::GetFlag(FLAGS_max_bytes);
         size *= 4) {
      const int64_t count = size / es / n;  // per-rank chunk
      if (count == 0) continue;
      const int64_t bytes = count * n * es;
      void* a = mem.Alloc(bytes);
      void* b = mem.Alloc(bytes);
      std::vector<WorkPtr> pending;  // p2p_bidir's second transfer
      auto call = [&]() -> absl::StatusOr<WorkPtr> {
        if (p2p) {
          const int me = c.rank();
          const bool both = op == "p2p_bidir";
          if (me == 0) {
            if (both) {
              GTP_ASSIGN_OR_RETURN(WorkPtr r, c.Recv(b, count, dt, 1, 7));
              pending.push_back(std::move(r));
            }
            return c.Send(a, count, dt, 1, 7);
          }
          if (me == 1) {
            if (both) {
              GTP_ASSIGN_OR_RETURN(WorkPtr sw, c.Send(a, count, dt, 0, 7));
              pending.push_back(std::move(sw));
            }
            return c.Recv(b, count, dt, 0, 7);
          }
          return c.Barrier();  // ranks ≥ 2 idle (a cheap completed op)
        }
        if (op == "all_gather") {
          return c.AllGather(static_cast<char*>(b) + c.rank() * count * es, b, count, dt);
        }
        if (op == "reduce_scatter") return c.ReduceScatter(a, b, count, dt, ReduceOp::kSum);
        return c.AllReduce(a, a, count * n, dt, ReduceOp::kSum);
      };
      int iters = absl::GetFlag(FLAGS_iters);
      if (iters <= 0) iters = mem.device ? 20 : (size > (64 << 20) ? 2 : 5);
      // Calls back to back, each waited on (stream order for NCCL, as
      // torch.distributed does), the last one synchronized.
      auto timed = [&](int reps) -> absl::Status {
        WorkPtr last;
        for (int i = 0; i < reps; ++i) {
          GTP_ASSIGN_OR_RETURN(last, call());
          GTP_RETURN_IF_ERROR(last->Wait());
          for (WorkPtr& w : pending) GTP_RETURN_IF_ERROR(w->Wait());
          pending.clear();
        }
        return last ? last->Synchronize() : absl::OkStatus();
      };
      GTP_RETURN_IF_ERROR(timed(absl::GetFlag(FLAGS_warmup)));
      GTP_ASSIGN_OR_RETURN(WorkPtr barrier, c.Barrier());
      GTP_RETURN_IF_ERROR(barrier->Synchronize());
      absl::Time t0 = absl::Now();
      GTP_RETURN_IF_ERROR(timed(iters));
      double us = absl::ToDoubleMicroseconds(absl::Now() - t0) / iters;
      const int64_t chunk = count * static_cast<int64_t>(es);
      double algbw = (p2p ? chunk : bytes) / us / 1e3;
      double factor = p2p ? 1.0 : op == "all_reduce" ? 2.0 * (n - 1) / n : 1.0 * (n - 1) / n;
      if (op == "p2p") p2p_bw[chunk] = algbw;
      std::string vs = "-";
      if (!p2p && p2p_bw.count(chunk) && p2p_bw[chunk] > 0) {
        vs = absl::StrFormat("%.2f", algbw * factor / p2p_bw[chunk]);
      }
      if (c.rank() == 0) {
        std::printf("%-15s %-26s %12lld %12.1f %12.3f %12.3f %8s\n", op.c_str(),
                    p2p ? "send/recv, chunk = size/n" : Algorithm(backend, op),
                    static_cast<long long>(bytes), us, algbw, algbw * factor, vs.c_str());
        std::fflush(stdout);
      }
      mem.Free(a);
      mem.Free(b);
    }
  }
  // Plain copy bandwidth (host memcpy or device-to-device cudaMemcpy).
  if (c.rank() == 0) {
    const int64_t bytes = absl::GetFlag(FLAGS_max_bytes);
    void* a = mem.Alloc(bytes);
    void* b = mem.Alloc(bytes);
    const int iters = 5;
    absl::Time t0 = absl::Now();
    for (int i = 0; i < iters; ++i) {
      if (mem.device) {
        GTP_CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
      } else {
        std::memcpy(b, a, bytes);
      }
    }
    if (mem.device) GTP_CUDA_CHECK(cudaDeviceSynchronize());
    double us = absl::ToDoubleMicroseconds(absl::Now() - t0) / iters;
    std::printf("%-15s %-26s %12lld %12.1f %12.3f %12s\n", "memcpy",
                mem.device ? "cudaMemcpy D2D" : "std::memcpy, one thread",
                static_cast<long long>(bytes), us, bytes / us / 1e3, "-");
    mem.Free(a);
    mem.Free(b);
  }
  GTP_ASSIGN_OR_RETURN(WorkPtr done, c.Barrier());
  return done->Synchronize();
}

int Main() {
  const std::string backend = absl::GetFlag(FLAGS_backend);
  absl::Status st;
  if (backend == "local") {
    LocalOptions o;
    o.timeout = absl::Minutes(10);
    st = RunRanks(absl::GetFlag(FLAGS_nproc), [&](Communicator& c) { return Bench(c, backend, {}); }, o);
  } else if (backend == "ucx") {
    UcxOptions o;
    o.timeout = absl::Minutes(10);
    auto world = CreateUcxWorldFromEnv(o);
    st = world.ok() ? Bench(**world, backend, {}) : world.status();
  } else if (backend == "nccl") {
    auto env = ReadLaunchEnv();
    if (!env.ok()) {
      st = env.status();
    } else {
      auto compute = Stream::Create(env->local_rank);
      if (!compute.ok()) {
        st = compute.status();
      } else {
        NcclOptions o;
        o.timeout = absl::Minutes(10);
        auto world = CreateNcclWorldFromEnv(compute->get(), o);
        st = world.ok() ? Bench(**world, backend, Memory{true}) : world.status();
      }
    }
  } else {
    st = absl::InvalidArgumentError(absl::StrCat("unknown --backend=", backend));
  }
  if (!st.ok()) {
    std::fprintf(stderr, "bench: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace gtp::comm

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gtp::comm::Main();
}
