// tools/ckpt/hf_import.h — a Hugging Face model directory → a gtp checkpoint
// (`ckpt import --format hf`), the inverse of `ckpt export --format hf`.
//
//   GTP_ASSIGN_OR_RETURN(HfModel m, ReadHfModel("/models/gpt2"));   // config.json + safetensors
//   GTP_RETURN_IF_ERROR(WriteCheckpoint(m, "/runs/gpt2_init/checkpoints"));
//
// Families (and the conventions export writes, mirrored exactly):
//   GPT2LMHeadModel   fused c_attn [C, 3C] split into q/k/v, every Conv1D
//                     weight ([in, out]) transposed to gtp's [out, in], tied
//                     embeddings (an lm_head.weight, if present, must equal wte).
//   LlamaForCausalLM  q/k/v/o and down_proj as they are (both [out, in], both
//                     rotate-half RoPE), gate_proj and up_proj stacked into
//                     gtp's fused mlp.fc = [gate; up], untied lm_head.
// The vocabulary tables are padded with zero rows to gtp's V_pad =
// round_up(V, vocab_pad_multiple = 128), as the trainer stores them; export
// strips them again. Weights are read as f32 (bf16 / f16 files are widened,
// exactly).
//
// Anything the gtp model cannot represent — another architecture, an
// activation other than the tanh GELU / SiLU, a norm epsilon other than
// 1e-5, biases on a Llama, untied GPT-2 or tied Llama heads, RoPE scaling, a
// missing, unexpected or mis-shaped tensor — is an error naming the field or
// tensor and what was expected. All functions return Status; thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "recipes/trainer/config.pb.h"

namespace gtp::tools {

struct HfModel {
  std::string architecture;     // "GPT2LMHeadModel" | "LlamaForCausalLM"
  recipes::proto::Model model;  // the recipe model section config.json describes
  // gtp parameter names and global shapes (as a trainer checkpoint holds
  // them: [out, in] weights, vocabulary tables [V_pad, C]), f32.
  std::vector<checkpoint::GlobalTensor> tensors;
  // What config.json sets that gtp's model does not have and that changes
  // training only, not the function the weights compute (a dropout rate):
  // "key value" each, for the importer to say so.
  std::vector<std::string> training_only;
};

// Reads <dir>/config.json and <dir>/model.safetensors (or the shards that
// <dir>/model.safetensors.index.json lists).
absl::StatusOr<HfModel> ReadHfModel(const std::string& dir);

// Writes `m` as a one-rank checkpoint at iteration 0 under `root` (root/
// iter_0000000 + root/latest), its metadata holding the recipe (name
// "hf_import", the model section only) so that `ckpt export --format hf` and
// the trainer's checkpoint.init_from know the model. Any layout loads it
// (checkpoint.h reshards on load). FailedPrecondition when `root` already
// holds a checkpoint. Blocks.
absl::Status WriteCheckpoint(const HfModel& m, const std::string& root, const std::string& source);

}  // namespace gtp::tools
