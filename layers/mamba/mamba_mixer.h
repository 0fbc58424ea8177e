// layers/mamba/mamba_mixer.h — the Mamba-2 mixer, tensor-parallel by head,
// with GTP-sharded projections (issue 16).
//
//   z, x, B, C, dt = in_proj(h)        five column-parallel linears, GTP-sharded
//   x, B, C = silu(conv1d(x, B, C))     depthwise causal conv, kernel d_conv
//   dt = softplus(dt + dt_bias);  A = −exp(A_log)
//   y = SSD(x, dt, A, B, C, D)          core/kernels/ssm/ssd_scan.h, by chunks
//   out = out_proj(GatedRmsNorm(y, z))  row-parallel linear, GTP-sharded
//
// d_inner = expand·d_model, H = d_inner / head_dim heads, G groups of B/C
// (H % G == 0). TP splits heads and groups (H % TP == 0, G % TP == 0): each
// TP rank holds its heads' z, x, dt rows, its groups' B, C rows, their conv
// filters, dt_bias, A_log, D and norm weights (TP-sharded, replicated across
// GTP: their gradients are all-reduced over GTP like any replicated param).
// The gated norm is per group of d_inner / G channels, so a TP shard's norm
// is local. Input and output [B·T, d_model], replicated over TP (or split by
// rows under sequence parallelism, below). CPU or CUDA (the exec of the chain).
//
// Context parallelism (the "cp" group > 1; T is then this rank's T/CP
// tokens, its two load-balanced chunks of each sequence): the projections,
// softplus and the gated norm run on the rank's own tokens; the conv and the
// scan run on whole sequences of 1/CP of the TP rank's heads, the inputs
// exchanged by one all-to-all and the output by another (cp_exchange.h).
// Exact; needs the TP rank's heads divisible by CP, and each part's heads
// to hold whole B/C groups or lie in one. The conv/scan params' gradients
// land in this part's rows; the dp_cp reduction adds the other parts'. The in_proj
// is stored as its five parts ("<name>.in_proj_{z,x,B,C,dt}.weight"), each a
// topology-independent global tensor.
//
// Mixed precision (dtype bf16): the projections, their gathers and the
// mixer's input and output are bf16, and so are the SSM params' values (like
// the norms' weights: the optimizer keeps their f32 masters); everything
// between in_proj and out_proj (conv, softplus, A, the scan, the gated norm)
// runs in f32 on f32 copies, as Mamba implementations keep the scan in f32
// — except, on CUDA, the scan's chunk products, whose operands are rounded
// to bf16 as Mamba-2's own kernels do (kChunkedMmaBf16 where kAuto picks the
// warp-level kernels; an f32 model keeps their f32-accurate products).
// The in_proj GEMMs write their f32 results directly and out_proj's dgrad
// writes an f32 input gradient (LinearConfig::f32_output / f32_input_grad),
// so no cast pass sits between them and the f32 math. Every gradient is f32
// until it re-enters a projection's backward.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "layers/linear.h"
#include "layers/mamba/cp_exchange.h"
#include "layers/packed_linears.h"
#include "layers/sharded_param.h"
#include "layers/sublayer.h"
#include "parallel/process_groups.h"

namespace gtp::layers::mamba {

struct MambaConfig {
  int64_t d_model = 0;
  int64_t d_state = 16;  // N
  int64_t d_conv = 4;
  int64_t expand = 2;
  int64_t head_dim = 16;  // P
  int64_t n_groups = 1;   // G
  int64_t chunk = 128;
  float norm_eps = 1e-5f;
  float init_std = 0.02f;
  float out_std = 0.02f;
  uint64_t seed = 0;
  DType dtype = DType::kF32;  // f32, or bf16 (mixed precision, above)
  // in_proj and out_proj's GEMMs in block-scaled FP8 (LinearConfig::fp8;
  // needs bf16).
  bool fp8 = false;
  bool fp8_wgrad = true;  // with fp8: the wgrad GEMMs in fp8 too (LinearConfig)
  // Sequence parallelism: the mixer's input and output are this TP rank's
  // rows of [B·T] ([B·T/TP, d_model]); the rows are gathered before in_proj
  // and out_proj reduce-scatters them back (the scan runs on whole sequences,
  // its heads split over TP as without SP).
  bool sequence_parallel = false;
  // in_proj's B, C and dt parts (narrow: G·N, G·N and H rows) as one GEMM a
  // pass (layers/packed_linears.h; not with fp8). TransformerConfig::packing.
  ProjectionPacking packing = ProjectionPacking::kAuto;

  int64_t d_inner() const { return expand * d_model; }
  int64_t n_heads() const { return d_inner() / head_dim; }
};

// A block's mixer ('M' layers of hybrid stacks; layers/sublayer.h).
class MambaMixer : public Mixer {
 public:
  // B sequences of T tokens. InvalidArgument naming the field (heads vs head
  // dim, groups vs heads or TP, ...).
  static absl::StatusOr<std::unique_ptr<MambaMixer>> Create(const std::string& name,
                                                            const MambaConfig& c, int64_t B,
                                                            int64_t T,
                                                            const parallel::ProcessGroupCollection& pgs,
                                                            GtpChain* chain);
  // h [B·T, d_model] (dtype) → [B·T, d_model] (dtype) ([B·T/TP, d_model]
  // each under sequence parallelism). Keeps activations
  // for Backward. Only enqueues on a CUDA exec (no host synchronisation,
  // so a CUDA graph can capture it), apart from the projections' and the
  // TP collectives' own waits. `dir` kRecompute: the same forward again
  // right before Backward (activation recompute), its weights gathered on
  // the chain's recompute slot; the kernels are deterministic, so the
  // activations are bit-identical to the first forward's.
  absl::StatusOr<Tensor> Forward(const Tensor& h, const Tensor& residual, Direction dir) override;
  // dout (dtype) → dh (=, dtype); parameter gradients (f32) accumulate.
  absl::StatusOr<Tensor> Backward(const Tensor& dout) override;
  void DropActivations() override;
  void CollectParams(std::vector<ShardedParam*>* sharded,
                     std::vector<ReplicatedParam*>* repl) override;

 private:
  MambaMixer() = default;
  MambaConfig c_;
  kernels::Exec exec_;
  GtpChain* chain_ = nullptr;  // its timeline (set after Create): the mixer's trace spans
  comm::Communicator* tp_ = nullptr;
  int64_t B_ = 0, T_ = 0, di_ = 0, h_ = 0, g_ = 0;  // TP-local d_inner, heads, groups
  bool sp_ = false;  // sequence parallel (TP > 1)
  std::unique_ptr<ColumnParallelLinear> in_z_, in_x_;
  std::unique_ptr<PackedLinears> in_bcdt_;  // in_proj's B, C, dt
  std::unique_ptr<RowParallelLinear> out_;
  ReplicatedParam conv_x_w_, conv_x_b_, conv_b_w_, conv_b_b_, conv_c_w_, conv_c_b_;
  ReplicatedParam dt_bias_, a_log_, d_, norm_w_;
  // The SSM params' values in f32, for one forward and its backward: the
  // values themselves in f32 models, copies made by Forward in bf16 ones.
  struct F32Values {
    Tensor conv_x_w, conv_x_b, conv_b_w, conv_b_b, conv_c_w, conv_c_b, dt_bias, a_log, d, norm_w;
  };
  F32Values v32_;
  // This CP part's rows of the conv/scan params (all rows without CP).
  struct PartSlices {
    Tensor conv_x_w, conv_x_b, conv_b_w, conv_b_b, conv_c_w, conv_c_b, a, d;
  };
  PartSlices Slices(const F32Values& v) const;
  absl::Status SetUpContextParallel(const std::string& name,
                                    const parallel::ProcessGroupCollection& pgs);
  // Context parallelism: null without it. The channels each CP part takes
  // of x (and y), of B and C, and of dt; hs_ heads per part.
  std::unique_ptr<HeadExchange> cp_;
  ChannelSplit x_split_, bc_split_, dt_split_;
  int64_t hs_ = 0;
  // Saved, all f32: z, raw dt (this rank's tokens); in the scan's layout
  // (whole sequences under CP, [B, T_scan, channels]) the conv inputs and
  // outputs and dt; A; the scan output and norm rstd (this rank's tokens).
  Tensor z_, dtr_, xs_, bs_, cs_, dts_, xc_, bc_, cc_, a_, y_, rstd_;
};

}  // namespace gtp::layers::mamba
