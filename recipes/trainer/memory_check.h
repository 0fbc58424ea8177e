// recipes/trainer/memory_check.h — refuses, before anything is allocated, a
// model whose training state cannot fit the memory there is (a setting such
// as model.n_embd=4000000000 used to abort inside a 1 TB allocation).
//
// A lower bound, not a plan: every parameter needs at least its f32 weight,
// its f32 gradient and its optimizer state — AdamW's two moments (16 bytes),
// Muon's momentum (12 bytes: Muon's matrices; AdamW's tables need more) —
// held once across the world. So the busiest rank holds at least
// bytes · N / world on its GPU, and the ranks of one machine together at
// least bytes · N · local / world of its memory on CPU. Activations, buffers
// and a bf16 run's extra copies only add to that, so a refusal is certain;
// passing does not promise the run fits.
#pragma once

#include "absl/status/status.h"
#include "recipes/trainer/config.pb.h"

namespace gtp::recipes {

// What the memory is compared with (bytes; 0: unknown, not checked).
struct MemoryCapacity {
  double host = 0;    // this machine's physical memory
  double device = 0;  // one GPU's memory (cuda runs)
  int local_ranks = 1;  // ranks of the run on this machine (they share `host`)
};

// This machine: physical memory, GPU 0's total memory (0 without a GPU),
// and `local_ranks` as given.
MemoryCapacity ThisMachine(int local_ranks);

// FailedPrecondition naming the model settings, the parameter count and
// both byte figures when the lower bound exceeds the capacity.
absl::Status CheckModelFits(const proto::Recipe& r, int world, const MemoryCapacity& cap);

}  // namespace gtp::recipes
