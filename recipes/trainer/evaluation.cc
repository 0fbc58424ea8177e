#include "recipes/trainer/evaluation.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "recipes/trainer/step.h"

namespace gtp::recipes {

namespace {

// Forward-only pipeline over the validation micro-batches: each rank runs
// its chunks in virtual-stage order, every micro-batch per chunk.
absl::StatusOr<float> EvaluatePipeline(RankState& st, BatchStager& batches, int64_t B, int64_t n) {
  const int P = st.pp->size(), s = st.pp->rank(), V = P * static_cast<int>(st.parts.size());
  const int next = (s + 1) % P, prev = (s + P - 1) % P;
  std::vector<std::pair<comm::WorkPtr, Tensor>> sends;
  for (size_t c = 0; c < st.parts.size(); ++c) {
    layers::GptModel& part = *st.parts[c];
    const int v = static_cast<int>(c) * P + s;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<uint64_t> samples(B);
      for (int64_t b = 0; b < B; ++b) {
        samples[b] = ((i * st.data->size() + st.data->rank()) * B + b) % st.valid->samples_per_epoch();
      }
      GTP_ASSIGN_OR_RETURN(auto batch, batches.Batch(*st.valid, samples));
      Tensor input;
      if (v > 0) {
        input = st.exec.Empty({part.activation_rows(), st.recipe.model().n_embd()}, part.config().block.dtype);
        GTP_RETURN_IF_ERROR(comm::Run(st.pp->Recv(input.raw_data(), input.numel(), input.dtype(),
                                                prev, static_cast<int>(v * n + i))));
      }
      GTP_ASSIGN_OR_RETURN(Tensor out, part.ForwardPart(batch.first, input, batch.second));
      part.DropActivations();
      if (v < V - 1) {
        GTP_ASSIGN_OR_RETURN(comm::WorkPtr w, st.pp->Send(out.raw_data(), out.numel(), out.dtype(),
                                                        next, static_cast<int>((v + 1) * n + i)));
        sends.emplace_back(std::move(w), out);
      }
    }
  }
  for (auto& [w, t] : sends) GTP_RETURN_IF_ERROR(w->Wait());
  float sum = 0;
  if (st.parts.back()->has_head()) {
    GTP_ASSIGN_OR_RETURN(sum, st.parts.back()->TakeLossSum());
  }
  return MeanOverHeadRanks(st.host, st.pp->size(), st.parts.back()->has_head(), sum, n);
}

}  // namespace

// Mean loss over n micro-batches per lane of the validation split (no
// gradient): validation samples 0 .. n·lanes·B − 1, the same samples on
// every layout with as many of them.
absl::StatusOr<float> Evaluate(RankState& st, BatchStager& batches, int64_t n,
                               const std::function<bool()>& stop_requested) {
  const int64_t B = st.recipe.train().micro_batch();
  double sum = 0;
  if (n <= 0) return absl::InvalidArgumentError("evaluation needs at least one micro-batch");
  if (st.runner) return EvaluatePipeline(st, batches, B, n);
  for (int64_t i = 0; i < n; ++i) {
    // Every kStopCheckEvery micro-batches the ranks agree (max over the host
    // world) whether any of them was asked to stop: one rank leaving alone
    // would hang the others' next collective.
    if (stop_requested && i > 0 && i % kStopCheckEvery == 0) {
      int32_t mine = stop_requested() ? 1 : 0, any = 0;
      GTP_RETURN_IF_ERROR(comm::Run(st.host.AllReduce(&mine, &any, 1, DType::kI32, comm::ReduceOp::kMax)));
      if (any) {
        return absl::CancelledError(
            absl::StrCat("evaluation stopped by a signal after ", i, " of ", n, " micro-batches"));
      }
    }
    std::vector<uint64_t> samples(B);
    for (int64_t b = 0; b < B; ++b) {
      samples[b] = ((i * st.data->size() + st.data->rank()) * B + b) % st.valid->samples_per_epoch();
    }
    GTP_ASSIGN_OR_RETURN(auto batch, batches.Batch(*st.valid, samples));
    GTP_ASSIGN_OR_RETURN(float loss, st.model->Forward(batch.first, batch.second));
    sum += loss;
  }
  float loss = static_cast<float>(sum / n);
  GTP_RETURN_IF_ERROR(
      comm::Run(st.host.AllReduce(&loss, &loss, 1, DType::kF32, comm::ReduceOp::kMean)));
  return loss;
}

absl::StatusOr<int64_t> EvalMicroBatches(const RankState& st, int64_t samples) {
  const int64_t B = st.recipe.train().micro_batch(), per_batch = B * st.data->size();
  if (samples <= 0) return st.recipe.train().eval_batches();
  if (samples % per_batch != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(samples, " validation samples do not split into whole micro-batches of ", B,
                     " × ", st.data->size(), " data lanes: give a multiple of ", per_batch));
  }
  const uint64_t split = st.valid->samples_per_epoch();
  if (split < static_cast<uint64_t>(per_batch)) {
    return absl::OutOfRangeError(absl::StrCat(
        "the validation split holds ", split, " samples of ", st.recipe.model().seq_len(),
        " tokens, fewer than one micro-batch of ", B, " × ", st.data->size(),
        " data lanes: use fewer lanes or a smaller train.micro_batch, or give the split more "
        "(data.valid_fraction)"));
  }
  if (static_cast<uint64_t>(samples) > split) {
    return absl::OutOfRangeError(
        absl::StrCat(samples, " validation samples, but the validation split holds ", split,
                     " samples of ", st.recipe.model().seq_len(), " tokens: give at most ",
                     split / per_batch * per_batch, " (a multiple of ", per_batch, ")"));
  }
  return samples / per_batch;
}

}  // namespace gtp::recipes
