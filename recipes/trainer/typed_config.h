// recipes/trainer/typed_config.h — the one translation of a (finalised)
// recipe into the typed configs the library takes: the layout, the model,
// the optimizer, the GTP options, the communication timeout. Pure functions;
// the trainer, its start-up checks and the tools (tools/generate, tools/eval)
// all read a recipe through them.
#pragma once

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "layers/gpt.h"
#include "layers/sharded_param.h"
#include "optimizer/optimizer.h"
#include "parallel/parallel_config.h"
#include "recipes/trainer/config.pb.h"

namespace gtp::recipes {

// The recipe's layout as the process-group builder takes it.
parallel::ParallelConfig ParallelConfigOf(const proto::Recipe& r);
// What the layout checks need of the model (sequence, heads, experts).
parallel::ModelFacts ModelFactsOf(const proto::Recipe& r);
// The whole layout on `world` ranks, checked before anything is written:
// InvalidArgument naming the setting (and, when only the rank orders are at
// fault, both order settings and the defaults that work).
absl::Status CheckLayout(const proto::Recipe& r, int world);
// The model a recipe builds (its model section, train.seed, precision and
// sequence parallelism).
layers::GptConfig ModelConfig(const proto::Recipe& r);
// The optimizer (AdamW or Muon for matrices, the lr schedule over
// train.steps, clipping).
optimizer::OptimizerConfig OptimConfig(const proto::Recipe& r);
// GTP wire formats: parallel.gtp_gather_dtype, parallel.gtp_reduce_scatter_dtype.
layers::GtpOptions GtpOptionsOf(const proto::Recipe& r);
// parallel.comm_timeout_s as a duration (0: keep the backend's default).
absl::Duration CommTimeout(const proto::Recipe& r);

}  // namespace gtp::recipes
