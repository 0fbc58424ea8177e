// Test helper: builds the GPT-2 of layers/testdata/gpt2_small.safetensors
// under TP2·GTP2 (4 ranks as threads), loads the PyTorch weights and saves a
// checkpoint to argv[2]. Usage: write_test_checkpoint <fixture> <root>
#include <cstdio>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/model_state.h"
#include "checkpoint/safetensors.h"
#include "comm/local/local_communicator.h"
#include "layers/gpt.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"

int main(int argc, char** argv) {
  using namespace gtp;
  if (argc != 3) return 2;
  auto fx = checkpoint::ReadSafeTensors(argv[1]);
  if (!fx.ok()) return std::fprintf(stderr, "%s\n", fx.status().ToString().c_str()), 1;
  auto meta = [&](const char* k) { return std::stoll(fx->metadata.at(k)); };
  layers::GptConfig cfg = layers::GptConfig::Gpt2(meta("vocab"), meta("n_pos"), meta("n_layer"),
                                                  meta("n_embd"), meta("n_head"));
  HeapAllocator host;
  absl::Status st = comm::RunRanks(4, [&](comm::Communicator& w) -> absl::Status {
    parallel::ParallelConfig pc;
    pc.tp = 2;
    pc.tp_num_weight_shards = 4;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, w));
    GTP_ASSIGN_OR_RETURN(auto model, layers::GptModel::Create(cfg, 1, meta("T"), pgs, kernels::Exec::Cpu(host)));
    for (const auto& [name, t] : fx->tensors) {
      if (name == "tokens" || name == "targets" || name == "logits" || name == "loss") continue;
      GTP_RETURN_IF_ERROR(model->LoadGlobal(name, t.data<float>(), t.shape));
    }
    GTP_ASSIGN_OR_RETURN(auto pieces, checkpoint::ModelPieces({model->sharded_params(), model->replicated_params()}, pgs));
    checkpoint::SaveOptions opt;
    opt.iteration = 7;
    opt.extra["model"] = "gpt2_small fixture";
    return checkpoint::Save(argv[2], pieces, w, opt);
  });
  if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
  return 0;
}
