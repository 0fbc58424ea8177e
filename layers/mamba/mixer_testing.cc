#include "layers/mamba/mixer_testing.h"

#include <cmath>
#include <limits>

#include "comm/local/local_communicator.h"
#include "core/philox.h"
#include "core/status.h"
#include "layers/gpt.h"
#include "layers/linear.h"
#include "parallel/process_groups.h"

namespace gtp::layers::mamba::testing {

namespace ops = kernels::ops;

namespace {

// t (any dtype, e's device) as host f32.
std::vector<float> HostF32(const kernels::Exec& e, const Tensor& t) {
  Tensor f = t;
  if (t.dtype() != DType::kF32) {
    f = e.Empty(t.shape(), DType::kF32);
    ops::Cast(e, t, f);
  }
  return DeviceToHost<float>(e, f);
}

std::vector<float> Normal(int64_t n, uint64_t key) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = PhiloxNormal(key, i);
  return v;
}

}  // namespace

MixerRun RunMixer(const kernels::Exec& e, const MambaConfig& c, int64_t B, int64_t T) {
  MixerRun res;
  const int64_t N = B * T;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build({}, w));
    GtpChain chain(e, {});
    GTP_ASSIGN_OR_RETURN(auto m, MambaMixer::Create("m", c, B, T, pgs, &chain));
    std::vector<ShardedParam*> sharded;
    std::vector<ReplicatedParam*> repl;
    m->CollectParams(&sharded, &repl);
    const std::vector<float> h = Normal(N * c.d_model, 5), r = Normal(N * c.d_model, 123);
    Tensor x = TensorFromHost(e, h.data(), {N, c.d_model}, c.dtype);
    GTP_ASSIGN_OR_RETURN(Tensor out, m->Forward(x, Tensor(), Direction::kForward));
    Tensor dout = TensorFromHost(e, r.data(), {N, c.d_model}, c.dtype);
    GTP_ASSIGN_OR_RETURN(Tensor dh, m->Backward(dout));
    GTP_RETURN_IF_ERROR(chain.FinishBackward());
    res.out = HostF32(e, out);
    res.dh = HostF32(e, dh);
    for (ShardedParam* p : sharded) res.grads.emplace_back(p->name(), HostF32(e, p->main_grad()));
    for (ReplicatedParam* p : repl) res.grads.emplace_back(p->name, HostF32(e, p->grad));
    return absl::OkStatus();
  });
  GTP_CHECK_OK(st);
  return res;
}

std::vector<HybridStep> TrainHybrid(const kernels::Exec& e, DType dtype, int steps) {
  GptConfig c = GptConfig::Gpt2(1000, 64, 5, 128, 2);  // HS = 64: the bf16 flash kernel's size
  c.layer_pattern = "M*-M-";
  c.block.seed = 21;
  c.block.dtype = dtype;
  c.block.mamba.d_state = 16;
  c.block.mamba.head_dim = 32;
  c.block.mamba.n_groups = 2;
  c.block.mamba.chunk = 16;
  const int64_t B = 2, T = 64;
  const float lr = 0.5f;
  std::vector<HybridStep> out;
  absl::Status st = comm::RunRanks(1, [&](comm::Communicator& w) -> absl::Status {
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build({}, w));
    GTP_ASSIGN_OR_RETURN(auto model, GptModel::Create(c, B, T, pgs, e));
    std::vector<int32_t> tok(B * T), tgt(B * T);
    for (int64_t i = 0; i < B * T; ++i) {
      tok[i] = PhiloxRaw(9, i).v[0] % 1000;
      tgt[i] = PhiloxRaw(9, i).v[1] % 1000;
    }
    Tensor dtok = HostToDevice(e, tok, {B, T}, /*wait=*/true);
    Tensor dtgt = HostToDevice(e, tgt, {B, T}, /*wait=*/true);
    for (int s = 0; s < steps; ++s) {
      HybridStep step;
      GTP_ASSIGN_OR_RETURN(step.loss, model->Forward(dtok, dtgt));
      GTP_RETURN_IF_ERROR(model->Backward());
      for (ShardedParam* p : model->sharded_params()) {
        step.grads.emplace_back(p->name(), HostF32(e, p->main_grad()));
        std::vector<float> v = HostF32(e, p->shard());
        const std::vector<float>& g = step.grads.back().second;
        for (size_t i = 0; i < v.size(); ++i) v[i] -= lr * g[i];
        CopyFromHostF32(e, v.data(), p->shard());
        p->MarkUpdated();
        ops::Fill(e, p->main_grad(), 0.0f);
      }
      for (ReplicatedParam* p : model->replicated_params()) {
        step.grads.emplace_back(p->name, HostF32(e, p->grad));
        std::vector<float> v = HostF32(e, p->value);
        const std::vector<float>& g = step.grads.back().second;
        for (size_t i = 0; i < v.size(); ++i) v[i] -= lr * g[i];
        CopyFromHostF32(e, v.data(), p->value);
        ops::Fill(e, p->grad, 0.0f);
      }
      out.push_back(std::move(step));
    }
    return absl::OkStatus();
  });
  GTP_CHECK_OK(st);
  return out;
}

double Bf16GradTolerance(const std::string& name) {
  const bool per_head =
      name.find(".A_log") != std::string::npos || name.find(".dt_bias") != std::string::npos;
  return per_head ? 1e-1 : 5e-2;
}

double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace gtp::layers::mamba::testing
