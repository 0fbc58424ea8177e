// recipes/trainer/preflight.h — everything a run can check before its run
// directory exists, so that a refused run writes nothing (docs/RELIABILITY.md:
// "refuse before the first step"):
//   - the layout on the world the launcher gives (parallel.*, WORLD_SIZE);
//   - a model that cannot fit the memory there is (memory_check.h);
//   - the datasets: files, dtypes, each split's size (data.*);
//   - the tokenizer files the run records (data.tokenizer_vocab/merges,
//     data.tokenizer_json or data.tokenizer_model):
//     they load, and their ids fit model.vocab_size;
//   - train.sample_every (sampling.h's CheckSampling), train.dump_tokens
//     (token_dump.h) and train.tensorboard_dir: what the first step would
//     only find out;
//   - checkpoint.init_from: it resolves, its metadata.pb is intact and its
//     model is this run's (checkpointing.h's CheckInitFrom), unless the run
//     resumes its own checkpoint and never reads it.
// What only the ranks can find (token ids beyond the vocabulary in a batch,
// a tensor that does not fit) fails later; the trainer then removes a run
// directory that holds nothing but its start-up (run_lock.h).
#pragma once

#include "absl/status/status.h"
#include "recipes/trainer/config.pb.h"
#include "recipes/trainer/run_options.h"

namespace gtp::recipes {

// The first failed check, naming its setting (or file) and what works.
// Reads the datasets' indexes, the tokenizer files and init_from's
// metadata.pb; writes nothing. Blocks on those reads.
absl::Status Preflight(const proto::Recipe& recipe, const RunOptions& options);

}  // namespace gtp::recipes
