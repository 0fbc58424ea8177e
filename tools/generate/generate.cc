// tools/generate — sample text from a trainer checkpoint.
//
//   generate --checkpoint runs/gpt_tiny/checkpoints --prompt "The " --max_tokens 100
//            [--temperature 0.8] [--top_k 40] [--top_p 0.95] [--seed 1] [--stop TEXT]
//            [--vocab vocab.json --merges merges.txt | --tokenizer_json tokenizer.json |
//             --tokenizer_model tokenizer.model]
//            [--device cuda]
//
// The model comes from the recipe in the checkpoint's metadata and is built
// on one rank in f32 — on the CPU, or with --device=cuda on GPU 0; the
// weights are the checkpoint's global tensors (f32 masters of bf16 runs),
// read on the host and uploaded, so any saved layout loads. Decoding feeds
// one token at a time through a KV cache (layers/inference; on CUDA the
// cache and every op stay on the GPU, only each step's logits come back).
// Text: GPT-2 BPE with --vocab/--merges, a Hugging Face tokenizer.json with
// --tokenizer_json, a SentencePiece tokenizer.model with --tokenizer_model
// (default: the tokenizer the checkpoint's recipe records), else bytes
// (token id = byte, as the byte-level recipes' corpus). The tokenizer's
// end-of-text token stops generation, unprinted: GPT-2's <|endoftext|>; for
// tokenizer.json the first of <|end_of_text|>, <|endoftext|>, </s>,
// <|im_end|> it has; for tokenizer.model its end-of-sentence piece (</s>).
// An empty prompt starts from that token or a newline (bytes: documents end
// with an empty line). Sampling: temperature 0 is greedy; the same seed gives the same
// text (layers/inference/sampling.h).
//
// Stdout: the prompt, then each new token's text as it is produced, then
// one line "generated N tokens in S s (R tokens/s)" (the prompt's prefill
// included in S). Generation stops after --max_tokens or at the model's
// context length (seq_len), noted on stderr. Models it cannot run (Mamba,
// MoE, prefix embeddings), and --device=cuda where no GPU is visible, are
// refused with one line on stderr and exit status 1.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/local/local_communicator.h"
#include "core/allocator.h"
#include "core/cli.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cpu.h"
#include "core/kernels/cuda.h"
#include "core/status.h"
#include "core/user_path.h"
#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/hf_tokenizer.h"
#include "data/tokenizer/sentencepiece_tokenizer.h"
#include "layers/gpt.h"
#include "layers/inference/inference_session.h"
#include "layers/inference/sampling.h"
#include "layers/layer_kind.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"
#include "recipes/trainer/config.h"
#include "recipes/trainer/typed_config.h"
#include "tools/generate/checkpoint_model.h"

ABSL_FLAG(std::string, checkpoint, "", "checkpoint root (with `latest`) or an iter_ directory");
ABSL_FLAG(std::string, prompt, "", "text to continue");
ABSL_FLAG(std::string, vocab, "",
          "GPT-2 vocab.json (with --merges); default: the tokenizer the checkpoint's recipe records "
          "(data.tokenizer_vocab/merges, data.tokenizer_json or data.tokenizer_model), else byte "
          "tokens");
ABSL_FLAG(std::string, merges, "", "GPT-2 merges.txt (with --vocab)");
ABSL_FLAG(std::string, tokenizer_json, "",
          "a Hugging Face tokenizer.json (instead of --vocab/--merges); default: the one the "
          "checkpoint's recipe records (data.tokenizer_json)");
ABSL_FLAG(std::string, tokenizer_model, "",
          "a SentencePiece tokenizer.model (Llama-2, Mistral; instead of --vocab/--merges); "
          "default: the one the checkpoint's recipe records (data.tokenizer_model)");
ABSL_FLAG(int, max_tokens, 64, "tokens to generate");
ABSL_FLAG(std::string, stop, "",
          "stop once the generated text ends with this string (the tokenizer's end-of-text token, "
          "<|endoftext|>, tokenizer.json's or tokenizer.model's, always stops it, unprinted)");
ABSL_FLAG(float, temperature, 1.0f, "softmax temperature; 0: greedy (argmax)");
ABSL_FLAG(int, top_k, 0, "sample among the k most likely tokens; 0: all");
ABSL_FLAG(float, top_p, 1.0f, "nucleus: the most likely tokens holding this much probability");
ABSL_FLAG(uint64_t, seed, 0, "sampling seed (Philox): the same seed gives the same text");
ABSL_FLAG(std::string, device, "cpu", "cpu, or cuda (GPU 0; the model in f32)");

namespace gtp::tools {
namespace {

absl::Status Generate() {
  const std::string path = absl::GetFlag(FLAGS_checkpoint);
  if (path.empty()) return absl::InvalidArgumentError("--checkpoint is required");
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device, " is not supported: cpu or cuda"));
  }
  const bool cuda = device == "cuda";
  if (cuda && CudaDeviceCount() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=cuda: no CUDA device is visible (", NoGpuReason(), ")"));
  }
  const int max_tokens = absl::GetFlag(FLAGS_max_tokens);
  if (max_tokens < 0) return absl::InvalidArgumentError("--max_tokens must be >= 0");
  layers::inference::SamplingOptions so;
  so.temperature = absl::GetFlag(FLAGS_temperature);
  so.top_k = absl::GetFlag(FLAGS_top_k);
  so.top_p = absl::GetFlag(FLAGS_top_p);
  so.seed = absl::GetFlag(FLAGS_seed);
  // (Written so that NaN fails: it compares false with everything.)
  if (!(so.temperature >= 0 && std::isfinite(so.temperature))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--temperature must be a finite number >= 0 (0: greedy), got ", so.temperature));
  }
  if (so.top_k < 0) return absl::InvalidArgumentError(absl::StrCat("--top_k must be >= 0 (0: off), got ", so.top_k));
  if (!(so.top_p > 0 && so.top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("--top_p must be in (0, 1] (1: off), got ", so.top_p));
  }
  GTP_ASSIGN_OR_RETURN(CheckpointRecipe ck, ReadCheckpointRecipe(path));
  const auto& m = ck.recipe.model();
  if (m.moe().num_experts() > 0) {
    return absl::UnimplementedError("generate: mixture-of-experts models are not supported");
  }
  GTP_ASSIGN_OR_RETURN(const std::vector<layers::LayerKind> kinds, recipes::LayerKindsOf(m));
  if (layers::AnyMixer(kinds, layers::MixerKind::kMamba) || layers::AnyFfn(kinds, layers::FfnKind::kMoe)) {
    return absl::UnimplementedError(
        absl::StrCat("generate: hybrid models with Mamba or MoE layers (", "layer_pattern \"",
                     m.layer_pattern(), "\") are not supported"));
  }
  // Tokens.
  std::optional<data::Gpt2Tokenizer> bpe;
  std::string vocab = absl::GetFlag(FLAGS_vocab), merges = absl::GetFlag(FLAGS_merges);
  std::string hf_json = absl::GetFlag(FLAGS_tokenizer_json);
  std::string spm_model = absl::GetFlag(FLAGS_tokenizer_model);
  if (vocab.empty() != merges.empty()) {
    return absl::InvalidArgumentError("give both --vocab and --merges, or neither (byte tokens)");
  }
  if (!vocab.empty() + !hf_json.empty() + !spm_model.empty() > 1) {
    return absl::InvalidArgumentError(
        "give one of --vocab/--merges, --tokenizer_json and --tokenizer_model, not two");
  }
  const bool flagged = !vocab.empty() || !hf_json.empty() || !spm_model.empty();
  if (!flagged && !ck.recipe.data().tokenizer_model().empty()) {
    spm_model = ck.recipe.data().tokenizer_model();
    if (!std::filesystem::exists(spm_model)) {
      return absl::NotFoundError(absl::StrCat("the checkpoint's recipe records the tokenizer ",
                                              spm_model,
                                              ", which is not there: give it with --tokenizer_model"));
    }
    std::fprintf(stderr, "(tokenizer %s from the checkpoint's recipe)\n", spm_model.c_str());
  }
  if (!flagged && spm_model.empty() && !ck.recipe.data().tokenizer_json().empty()) {
    hf_json = ck.recipe.data().tokenizer_json();
    if (!std::filesystem::exists(hf_json)) {
      return absl::NotFoundError(absl::StrCat("the checkpoint's recipe records the tokenizer ",
                                              hf_json,
                                              ", which is not there: give it with --tokenizer_json"));
    }
    std::fprintf(stderr, "(tokenizer %s from the checkpoint's recipe)\n", hf_json.c_str());
  }
  if (!flagged && spm_model.empty() && hf_json.empty() && !ck.recipe.data().tokenizer_vocab().empty()) {
    // The run's own tokenizer (it used to print <301><262>… for a BPE model).
    vocab = ck.recipe.data().tokenizer_vocab();
    merges = ck.recipe.data().tokenizer_merges();
    if (!std::filesystem::exists(vocab) || !std::filesystem::exists(merges)) {
      return absl::NotFoundError(absl::StrCat(
          "the checkpoint's recipe records the tokenizer ", vocab, " and ", merges,
          ", which are not there: give them with --vocab and --merges"));
    }
    std::fprintf(stderr, "(tokenizer %s from the checkpoint's recipe)\n", vocab.c_str());
  }
  std::vector<int32_t> prompt;
  const std::string text = absl::GetFlag(FLAGS_prompt);
  std::optional<data::HfTokenizer> hf;
  std::optional<data::SentencePieceTokenizer> spm;
  std::optional<int32_t> eot;  // ends generation, unprinted
  std::string eot_name;
  if (!spm_model.empty()) {
    GTP_ASSIGN_OR_RETURN(data::SentencePieceTokenizer t, data::SentencePieceTokenizer::Load(spm_model));
    spm.emplace(std::move(t));
    eot = spm->eos_id();
    if (eot) {
      eot_name = spm->IdToPiece(*eot);
      std::fprintf(stderr, "(stops at %s, id %d)\n", eot_name.c_str(), *eot);
    }
    prompt = spm->Encode(text);
    if (prompt.empty()) {
      if (!eot) {
        return absl::InvalidArgumentError(
            "an empty prompt needs an end-of-sentence piece (</s>) in the tokenizer.model");
      }
      prompt.push_back(*eot);
    }
  } else if (!hf_json.empty()) {
    GTP_ASSIGN_OR_RETURN(data::HfTokenizer t, data::HfTokenizer::Load(hf_json));
    hf.emplace(std::move(t));
    for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>"}) {
      eot = hf->SpecialTokenId(name);
      if (!eot) eot = hf->TokenId(name);
      if (eot) {
        eot_name = name;
        break;
      }
    }
    if (eot) std::fprintf(stderr, "(stops at %s, id %d)\n", eot_name.c_str(), *eot);
    prompt = hf->Encode(text);
    if (prompt.empty()) {
      if (!eot) {
        return absl::InvalidArgumentError(
            "an empty prompt needs an end-of-text token (<|end_of_text|>, <|endoftext|>, </s> or "
            "<|im_end|>) in the tokenizer");
      }
      prompt.push_back(*eot);
    }
  } else if (!vocab.empty()) {
    GTP_ASSIGN_OR_RETURN(data::Gpt2Tokenizer t, data::Gpt2Tokenizer::Load(vocab, merges));
    bpe.emplace(std::move(t));
    prompt = bpe->Encode(text);
    if (prompt.empty()) {
      const std::optional<int32_t> eot = bpe->TokenId("<|endoftext|>");
      if (!eot)
        return absl::InvalidArgumentError("an empty prompt needs <|endoftext|> in the vocabulary");
      prompt.push_back(*eot);
    }
  } else {
    for (unsigned char ch : text) prompt.push_back(ch);
    if (prompt.empty()) prompt.push_back('\n');
  }
  for (int32_t id : prompt) {
    if (id >= m.vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt token ", id, " is outside the model's vocabulary of ", m.vocab_size()));
    }
  }
  if (bpe) {
    eot = bpe->TokenId("<|endoftext|>");
    eot_name = "<|endoftext|>";
  }
  // tokenizer.json and tokenizer.model: a token's text can depend on its
  // neighbours (Metaspace or the dummy prefix strip the first space, byte
  // fallback spans tokens), so the ids so far are decoded whole and the new
  // text is what follows what was printed; text ending in an incomplete
  // character (U+FFFD) waits for the next id.
  std::function<absl::StatusOr<std::string>(absl::Span<const int32_t>)> decode_all;
  if (hf) decode_all = [&](absl::Span<const int32_t> ids) { return hf->Decode(ids); };
  if (spm) decode_all = [&](absl::Span<const int32_t> ids) { return spm->Decode(ids); };
  std::vector<int32_t> hf_ids = prompt;
  std::string hf_printed;
  if (decode_all) {
    absl::StatusOr<std::string> p = decode_all(prompt);
    if (p.ok()) hf_printed = *p;
  }
  auto piece = [&](int32_t id) -> std::string {
    if (decode_all) {
      hf_ids.push_back(id);
      absl::StatusOr<std::string> all = decode_all(hf_ids);
      if (!all.ok()) {
        hf_ids.pop_back();
        return absl::StrCat("<", id, ">");
      }
      if (!absl::StartsWith(*all, hf_printed) || absl::EndsWith(*all, "\xEF\xBF\xBD")) return "";
      std::string s = all->substr(hf_printed.size());
      hf_printed = *all;
      return s;
    }
    if (bpe) {
      absl::StatusOr<std::string> s = bpe->Decode({id});
      return s.ok() ? *s : absl::StrCat("<", id, ">");
    }
    return id < 256 ? std::string(1, static_cast<char>(id)) : absl::StrCat("<", id, ">");
  };
  kernels::cpu::SetGemmThreads(1);  // one token's GEMMs are too small to split
  return comm::RunRanks(1, [&](comm::Communicator& world) -> absl::Status {
    HeapAllocator host;
    kernels::Exec exec = kernels::Exec::Cpu(host);
    // On CUDA: outlive the model and the session (declared first).
    std::unique_ptr<CudaCachingAllocator> dev;
    std::optional<Stream> stream;
    std::unique_ptr<kernels::cuda::BlasContext> blas;
    if (cuda) {
      dev = std::make_unique<CudaCachingAllocator>(0);
      GTP_ASSIGN_OR_RETURN(Stream s, Stream::Create(0));
      stream.emplace(std::move(s));
      blas = std::make_unique<kernels::cuda::BlasContext>(0);
      exec = kernels::Exec{Device::Cuda(0), dev.get(), stream->get(), blas.get()};
    }
    parallel::ParallelConfig pc;
    GTP_ASSIGN_OR_RETURN(auto pgs, parallel::ProcessGroupCollection::Build(pc, world));
    layers::GptConfig mc = recipes::ModelConfig(ck.recipe);
    mc.block.dtype = DType::kF32;  // bf16 runs: their f32 masters
    mc.block.sequence_parallel = false;
    mc.block.recompute = false;
    mc.pipeline = layers::PipelinePart{};
    GTP_ASSIGN_OR_RETURN(auto model, layers::GptModel::Create(mc, 1, 1, pgs, exec));
    GTP_RETURN_IF_ERROR(LoadGlobalWeights(ck.dir, *model));  // host reads, uploaded on CUDA
    GTP_ASSIGN_OR_RETURN(auto session,
                         layers::inference::InferenceSession::Create(*model, mc.max_seq_len, exec));
    if (static_cast<int64_t>(prompt.size()) > session->max_len()) {
      return absl::InvalidArgumentError(absl::StrCat("the prompt has ", prompt.size(),
                                                     " tokens; the model's context is ",
                                                     session->max_len()));
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    GTP_ASSIGN_OR_RETURN(std::vector<float> logits, session->Append(prompt));
    const int64_t V = session->vocab_size();
    logits.erase(logits.begin(), logits.end() - V);
    int n = 0;
    const std::string stop = absl::GetFlag(FLAGS_stop);
    std::string generated;  // for --stop
    while (n < max_tokens) {
      const int32_t next = layers::inference::SampleToken(logits, so, n);
      ++n;
      if (eot && next == *eot) {
        std::fprintf(stderr, "\n(stopped at %s)\n", eot_name.c_str());
        break;
      }
      const std::string s = piece(next);
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
      generated += s;
      if (!stop.empty() && absl::EndsWith(generated, stop)) break;
      if (n == max_tokens) break;
      if (session->length() == session->max_len()) {
        std::fprintf(stderr, "\n(stopped after %d tokens: the model's context is %lld tokens)\n", n,
                     static_cast<long long>(session->max_len()));
        break;
      }
      GTP_ASSIGN_OR_RETURN(logits, session->Append({next}));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("\ngenerated %d tokens in %.3f s (%.1f tokens/s)\n", n, s, s > 0 ? n / s : 0.0);
    return absl::OkStatus();
  });
}

}  // namespace
}  // namespace gtp::tools

int main(int argc, char** argv) {
  gtp::SetUsage("samples text from a gtp checkpoint; see tools/generate/README.md");
  gtp::ParseCommandLine(argc, argv);
  // Paths typed by the user mean the directory `bazel run` was called from.
  for (auto* f : {&FLAGS_checkpoint, &FLAGS_vocab, &FLAGS_merges, &FLAGS_tokenizer_json,
                  &FLAGS_tokenizer_model}) {
    absl::SetFlag(f, gtp::UserPath(absl::GetFlag(*f)));
  }
  absl::Status st = gtp::tools::Generate();
  if (!st.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
