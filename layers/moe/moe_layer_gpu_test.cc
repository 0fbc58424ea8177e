// The MoE layer on a CUDA exec (routing, dispatch and the router backward on
// the device, layers/moe/routing.h) computes what it computes on the CPU:
// one rank, the same weights and data, forward and backward. The logits come
// from different GEMMs (cuBLASLt vs the CPU's), so the comparison is within
// f32 rounding: outputs, input gradients, the gate's and the experts' weight
// gradients within 2e-5 of their largest element, the same token counts and
// drops, aux and z within 1e-5.
#include <cmath>
#include <string>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "layers/moe/moe_layer.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

namespace gtp::layers::moe {
namespace {

struct Result {
  std::vector<float> y, dx, gate_grad, fc1_grad, fc2_grad;
  std::vector<double> counts;
  Router::Stats stats;
};

std::vector<float> Host(const kernels::Exec& e, const Tensor& t) {
  std::vector<float> v(t.numel());
  EXPECT_TRUE(Copy(t, Tensor::Wrap(v.data(), t.shape(), DType::kF32, Device::Cpu()), e.stream,
                   /*sync=*/true)
                  .ok());
  return v;
}

Result RunLayer(const kernels::Exec& exec, const MoeConfig& mc, const MoeShape& s) {
  Result res;
  const int64_t N = s.B * s.T;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& world) -> absl::Status {
    parallel::ParallelConfig pc;
    parallel::ModelFacts facts;
    facts.num_experts = mc.router.num_experts;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, world, facts));
    GtpChain chain(exec, GtpOptions{});
    GTP_ASSIGN_OR_RETURN(auto layer, MoeLayer::Create("m", mc, s, pgs, &chain));
    for (int e = 0; e < mc.router.num_experts; ++e) {
      layer->router().expert_bias()[e] = 0.01f * ((e * 5) % 7) - 0.03f;
    }
    std::vector<float> x(N * s.C), dy(N * s.C);
    for (int64_t i = 0; i < N * s.C; ++i) {
      x[i] = PhiloxNormal(101, i);
      dy[i] = PhiloxNormal(102, i);
    }
    Tensor xd = exec.Empty({N, s.C}), dyd = exec.Empty({N, s.C});
    GTP_RETURN_IF_ERROR(
        Copy(Tensor::Wrap(x.data(), {N, s.C}, DType::kF32, Device::Cpu()), xd, exec.stream));
    GTP_RETURN_IF_ERROR(
        Copy(Tensor::Wrap(dy.data(), {N, s.C}, DType::kF32, Device::Cpu()), dyd, exec.stream));
    GTP_ASSIGN_OR_RETURN(Tensor y, layer->Forward(xd));
    res.y = Host(exec, y);
    GTP_ASSIGN_OR_RETURN(Tensor dx, layer->Backward(dyd));
    GTP_RETURN_IF_ERROR(chain.FinishBackward());
    res.dx = Host(exec, dx);
    res.gate_grad = Host(exec, layer->router().gate()->grad);
    res.fc1_grad = Host(exec, layer->fc1().main_grad());
    res.fc2_grad = Host(exec, layer->fc2().main_grad());
    res.counts = layer->router().TakeCounts();
    res.stats = layer->router().TakeStats();
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  return res;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-6, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i;
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_LT(err / scale, 2e-5) << what;
}

TEST(CudaMoeLayer, MatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  HeapAllocator host;
  CudaCachingAllocator dev(0);
  auto stream = Stream::Create(0);
  ASSERT_TRUE(stream.ok());
  kernels::cuda::BlasContext blas(0);
  kernels::Exec gpu{Device::Cuda(0), &dev, stream->get(), &blas};
  MoeShape s;
  s.C = 32;
  s.H = 48;
  s.B = 2;
  s.T = 64;
  s.init_std = 0.3f;
  s.out_std = 0.2f;
  s.seed = 9;
  struct Mode {
    const char* name;
    ScoreFunction score;
    bool pre;
    float cf;
    DropPolicy drop;
    AuxLossType aux;
    int groups, group_topk;
    bool bias;
  };
  for (Mode m : {Mode{"softmax pre, dropless", ScoreFunction::kSoftmax, true, 0.0f,
                      DropPolicy::kProbability, AuxLossType::kLane, 0, 0, false},
                 Mode{"sigmoid, groups, bias, capacity by probability, per-sequence aux",
                      ScoreFunction::kSigmoid, true, 1.0f, DropPolicy::kProbability,
                      AuxLossType::kSequence, 4, 2, true},
                 Mode{"softmax post, capacity by position", ScoreFunction::kSoftmax, false, 0.6f,
                      DropPolicy::kPosition, AuxLossType::kLane, 0, 0, false}}) {
    for (int variant = 0; variant < 4; ++variant) {
      for (bool swiglu : {false, true}) {
        // Both dispatchers, each unpadded and (with a capacity) padded.
        const bool pad = variant % 2 == 1;
        if (pad && m.cf <= 0) continue;
        MoeConfig mc;
        mc.dispatcher = variant < 2 ? Dispatcher::kAllToAll : Dispatcher::kAllGather;
        mc.router.pad_to_capacity = pad;
        RouterConfig& rc = mc.router;
        rc.num_experts = 8;
        rc.top_k = 2;
        rc.score = m.score;
        rc.pre_softmax = m.pre;
        rc.capacity_factor = m.cf;
        rc.drop_policy = m.drop;
        rc.aux_loss_coeff = 0.01f;
        rc.aux_loss_type = m.aux;
        rc.z_loss_coeff = 0.001f;
        rc.num_groups = m.groups;
        rc.group_topk = m.group_topk;
        rc.expert_bias = m.bias;
        s.swiglu = swiglu;
        const std::string what = std::string(m.name) + (swiglu ? " swiglu" : " gelu") +
                                 (variant < 2 ? " all-to-all" : " all-gather") +
                                 (pad ? " padded" : "");
        Result c = RunLayer(kernels::Exec::Cpu(host), mc, s), g = RunLayer(gpu, mc, s);
        ExpectClose(g.y, c.y, what + " y");
        ExpectClose(g.dx, c.dx, what + " dx");
        ExpectClose(g.gate_grad, c.gate_grad, what + " gate grad");
        ExpectClose(g.fc1_grad, c.fc1_grad, what + " fc1 grad");
        ExpectClose(g.fc2_grad, c.fc2_grad, what + " fc2 grad");
        EXPECT_EQ(g.counts, c.counts) << what;
        EXPECT_EQ(g.stats.dropped, c.stats.dropped) << what;
        EXPECT_EQ(g.stats.forwards, 1) << what;
        EXPECT_NEAR(g.stats.aux, c.stats.aux, 1e-5 * c.stats.aux) << what;
        EXPECT_NEAR(g.stats.z, c.stats.z, 1e-5 * c.stats.z) << what;
        if (m.cf > 0) {
          EXPECT_GT(c.stats.dropped, 0) << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace gtp::layers::moe
