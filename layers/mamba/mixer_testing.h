// layers/mamba/mixer_testing.h — runs shared by the Mamba mixer's CPU and
// GPU tests: one mixer forward/backward, and a hybrid GptModel trained for a
// few SGD steps, each on any exec (CPU or CUDA) and in f32 or bf16, with
// deterministic params (the layers' seeded inits) and inputs, returning host
// f32 copies so that two runs can be compared. One rank. Every function
// blocks (it synchronises the exec's stream to read results back).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/kernels/ops.h"
#include "layers/mamba/mamba_mixer.h"

namespace gtp::layers::mamba::testing {

using Named = std::vector<std::pair<std::string, std::vector<float>>>;

struct MixerRun {
  std::vector<float> out, dh;  // [B·T, d_model]
  Named grads;                 // every param's gradient (f32), local layout, in CollectParams order
};

// The mixer of `c` (c.dtype) on `e`: h [B·T, d_model] = PhiloxNormal(5, i),
// dout = PhiloxNormal(123, i) (both rounded to c.dtype), one Forward and
// Backward. Aborts (GTP_CHECK_OK) on a Status error.
MixerRun RunMixer(const kernels::Exec& e, const MambaConfig& c, int64_t B, int64_t T);

struct HybridStep {
  float loss = 0;
  Named grads;  // every param's gradient (f32), local layout
};

// The hybrid GPT of the tests (layer pattern "M*-M-", vocab 1000, C = 128,
// 2 attention heads of 64, Mamba d_inner 256 in 8 heads of 32, 2 groups,
// d_state 16, chunk 16; B = 2, T = 64), `steps` steps of forward, backward
// and plain SGD (lr 0.5, on the host: value −= lr·grad, rounded to the
// value's dtype) on one fixed batch. Aborts on a Status error.
std::vector<HybridStep> TrainHybrid(const kernels::Exec& e, DType dtype, int steps);

// The bound on RelErr of a bf16 run's gradient of param `name` against an
// f32 run's after a couple of steps: 5e-2, and 1e-1 for the per-head A_log
// and dt_bias, whose gradients sum the scan's dt terms over every row while
// their bf16 values move every dt and A by up to ~1% (dt_bias ≈ −4.6 has a
// bf16 spacing of 1/32).
double Bf16GradTolerance(const std::string& name);

// ‖got − want‖ / ‖want‖ (L2); +inf when got holds a non-finite value or the
// sizes differ, so that NaN never passes a bound.
double RelErr(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace gtp::layers::mamba::testing
