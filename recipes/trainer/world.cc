#include "recipes/trainer/world.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/env/launch_env.h"
#include "comm/local/local_communicator.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/store/tcp_store.h"
#include "comm/ucx/ucx_communicator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/kernels/cudnn_engine.h"
#include "core/kernels/fp8/block_gemm.h"
#include "core/status.h"
#include "recipes/trainer/typed_config.h"

namespace gtp::recipes {

bool UnderLauncher(const proto::Recipe& recipe) {
  return (std::getenv("RANK") != nullptr || std::getenv("SLURM_PROCID") != nullptr) &&
         recipe.parallel().backend() != "local";
}

absl::StatusOr<int> WorldSize(const proto::Recipe& recipe) {
  int world = recipe.parallel().world_size();
  if (!UnderLauncher(recipe)) return world;
  GTP_ASSIGN_OR_RETURN(comm::LaunchEnv env, comm::ReadLaunchEnv());
  // 1 (the default) means "as many ranks as the launcher started".
  if (world != 1 && world != env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel.world_size is ", world, " but the launcher started ", env.world_size,
        " processes (WORLD_SIZE=", env.world_size, "): launch ", world,
        " or set parallel.world_size=", env.world_size));
  }
  return env.world_size;
}

absl::Status RunOnRanks(const proto::Recipe& recipe,
                        const std::function<absl::Status(const RankWorld&)>& body) {
  const bool under_launcher = UnderLauncher(recipe);
  if (recipe.train().device() == "cuda") {
    // One GPU per rank: ranks are processes (a launcher and NCCL), or a
    // single rank in this process.
    const int gpus = CudaDeviceCount();
    if (gpus == 0) return absl::FailedPreconditionError("train.device is cuda but " + NoGpuReason());
    int local_rank = 0;
    if (under_launcher) {
      GTP_ASSIGN_OR_RETURN(comm::LaunchEnv env, comm::ReadLaunchEnv());
      local_rank = env.local_rank;
    } else if (recipe.parallel().world_size() != 1) {
      return absl::InvalidArgumentError(
          "train.device cuda with parallel.world_size > 1 needs one process per GPU: "
          "run under tools/gtprun (e.g. gtprun --nproc 2 -- <recipe>)");
    }
    const int device = local_rank % gpus;
    if (recipe.train().precision() == "fp8") {
      // cuBLASLt's block-scaled FP8 GEMM (VEC128/BLK128x128 scales) is Hopper's.
      GTP_ASSIGN_OR_RETURN(const int cc, CudaComputeCapability(device));
      if (cc != 90) {
        return absl::FailedPreconditionError(absl::StrCat(
            "train.precision=fp8 needs a Hopper GPU (compute capability 9.0: H100, H200); GPU ",
            device, " is ", cc / 10, ".", cc % 10, ": use train.precision=bf16"));
      }
    }
    GTP_ASSIGN_OR_RETURN(Stream stream, Stream::Create(device));
    CudaCachingAllocator dev(device);
    kernels::cuda::BlasContext blas(device);
    blas.set_fp8_wgmma(recipe.train().fp8_gemm() == "wgmma");  // config.cc: fp8 on CUDA only
    kernels::Exec exec{Device::Cuda(device), &dev, stream.get(), &blas};
    if (blas.fp8_wgmma()) {
      // A new kernel of ours: proven on this GPU before it trains (wgmma_check.cc).
      if (absl::Status s = kernels::fp8::CheckWgmmaGemm(exec); !s.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("train.fp8_gemm=wgmma: ", s.message(), "; use train.fp8_gemm=cublaslt"));
      }
    }
    std::unique_ptr<kernels::CudnnEngine> cudnn;
    if (recipe.train().attention() == "cudnn" && recipe.train().precision() != "f32") {
      absl::StatusOr<std::unique_ptr<kernels::CudnnEngine>> e = kernels::CudnnEngine::Create(device);
      if (!e.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("train.attention=cudnn: ", e.status().message(),
                         " (train.attention=flash runs gtp's own attention kernels)"));
      }
      cudnn = std::move(*e);
      exec.attention = cudnn.get();
    }
    if (under_launcher) {
      // One rendezvous store for two worlds: NCCL for tensors, UCX for
      // host-memory control traffic.
      GTP_ASSIGN_OR_RETURN(comm::LaunchEnv env, comm::ReadLaunchEnv());
      std::unique_ptr<comm::TcpStoreServer> server;
      if (env.rank == 0) {
        GTP_ASSIGN_OR_RETURN(server, comm::TcpStoreServer::StartOrAdopt(env.master_port, env.store_fd));
        server->set_linger(absl::Seconds(5));
      }
      GTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::TcpStoreClient> client,
                           comm::TcpStoreClient::Connect(env.master_addr, env.master_port,
                                                         absl::Seconds(60)));
      std::shared_ptr<comm::KeyValueStore> store(std::move(client));
      comm::NcclOptions nccl_options;
      comm::UcxOptions ucx_options;
      if (const absl::Duration t = CommTimeout(recipe); t > absl::ZeroDuration()) {
        nccl_options.timeout = ucx_options.timeout = t;
      }
      // A rank whose collectives failed must not hang in CUDA behind them.
      nccl_options.exit_after_failure = absl::Seconds(10);
      GTP_ASSIGN_OR_RETURN(auto world, comm::CreateNcclWorld(store, env.rank, env.world_size,
                                                             device, stream.get(), nccl_options));
      GTP_ASSIGN_OR_RETURN(auto host,
                           comm::CreateUcxWorld(store, env.rank, env.world_size, ucx_options));
      return body(RankWorld{*world, *host, exec});
    }
    return comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
      return body(RankWorld{w, w, exec});
    });
  }
  HeapAllocator host;
  // Ranks on this machine share its cores: one BLAS pool per rank would
  // oversubscribe them (2.2× slower gpt_tiny as 4 threads on 2 cores).
  {
    const int ranks_here = under_launcher ? std::max(1, std::atoi(std::getenv("LOCAL_WORLD_SIZE")
                                                                      ? std::getenv("LOCAL_WORLD_SIZE")
                                                                      : std::getenv("WORLD_SIZE")
                                                                            ? std::getenv("WORLD_SIZE")
                                                                            : "1"))
                                          : recipe.parallel().world_size();
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    kernels::cpu::SetGemmThreads(std::max(1, cores / std::max(1, ranks_here)));
  }
  if (under_launcher) {
    comm::UcxOptions ucx_options;
    if (const absl::Duration t = CommTimeout(recipe); t > absl::ZeroDuration()) ucx_options.timeout = t;
    GTP_ASSIGN_OR_RETURN(auto world, comm::CreateUcxWorldFromEnv(ucx_options));
    return body(RankWorld{*world, *world, kernels::Exec::Cpu(host)});
  }
  comm::LocalOptions lo;
  lo.timeout = absl::Minutes(10);  // a slow 2-core machine with many ranks
  if (const absl::Duration t = CommTimeout(recipe); t > absl::ZeroDuration()) lo.timeout = t;
  return comm::RunRanks(
      recipe.parallel().world_size(),
      [&](comm::Communicator& w) -> absl::Status {
        return body(RankWorld{w, w, kernels::Exec::Cpu(host)});
      },
      lo);
}

}  // namespace gtp::recipes
