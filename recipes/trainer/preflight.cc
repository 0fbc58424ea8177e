#include "recipes/trainer/preflight.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "data/gpt_dataset.h"
#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/hf_tokenizer.h"
#include "data/tokenizer/sentencepiece_tokenizer.h"
#include "recipes/trainer/checkpointing.h"
#include "recipes/trainer/memory_check.h"
#include "recipes/trainer/sampling.h"
#include "recipes/trainer/state.h"
#include "recipes/trainer/token_dump.h"
#include "recipes/trainer/typed_config.h"
#include "recipes/trainer/world.h"

namespace gtp::recipes {

namespace {

// data.tokenizer_vocab/merges (or tokenizer_json, tokenizer_model) are recorded in every checkpoint for
// tools/generate and `ckpt export`: files that did not exist were recorded
// unread, and failed there.
absl::Status CheckTokenizer(const proto::Recipe& r) {
  const auto& d = r.data();
  if (!d.tokenizer_json().empty()) {
    absl::StatusOr<data::HfTokenizer> tok = data::HfTokenizer::Load(d.tokenizer_json());
    if (!tok.ok()) {
      return absl::Status(tok.status().code(),
                          absl::StrCat("data.tokenizer_json: ", tok.status().message(),
                                       " (the tokenizer.json the dataset was tokenized with; "
                                       "leave it unset for none)"));
    }
    if (tok->vocab_size() > r.model().vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.tokenizer_json ", d.tokenizer_json(), " has ", tok->vocab_size(),
                       " token ids but model.vocab_size is ", r.model().vocab_size(),
                       ": set model.vocab_size=", tok->vocab_size(), " or more"));
    }
  }
  if (!d.tokenizer_model().empty()) {
    absl::StatusOr<data::SentencePieceTokenizer> tok =
        data::SentencePieceTokenizer::Load(d.tokenizer_model());
    if (!tok.ok()) {
      return absl::Status(tok.status().code(),
                          absl::StrCat("data.tokenizer_model: ", tok.status().message(),
                                       " (the tokenizer.model the dataset was tokenized with; "
                                       "leave it unset for none)"));
    }
    if (tok->vocab_size() > r.model().vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.tokenizer_model ", d.tokenizer_model(), " has ", tok->vocab_size(),
                       " token ids but model.vocab_size is ", r.model().vocab_size(),
                       ": set model.vocab_size=", tok->vocab_size(), " or more"));
    }
  }
  if (d.tokenizer_vocab().empty()) return absl::OkStatus();
  absl::StatusOr<data::Gpt2Tokenizer> tok =
      data::Gpt2Tokenizer::Load(d.tokenizer_vocab(), d.tokenizer_merges());
  if (!tok.ok()) {
    return absl::Status(
        tok.status().code(),
        absl::StrCat("data.tokenizer_vocab/data.tokenizer_merges: ", tok.status().message(),
                     " (the vocab.json and merges.txt the dataset was tokenized with; "
                     "leave both unset for none)"));
  }
  if (tok->vocab_size() > r.model().vocab_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.tokenizer_vocab ", d.tokenizer_vocab(), " has ", tok->vocab_size(),
                     " token ids but model.vocab_size is ", r.model().vocab_size(),
                     ": set model.vocab_size=", tok->vocab_size(), " or more"));
  }
  return absl::OkStatus();
}

// train.tensorboard_dir (relative: inside the run directory) is a directory
// or can be made one: the nearest part of it that exists is a writable
// directory. (A file there failed the run after it wrote its directory.)
absl::Status CheckTensorboardDir(const proto::Recipe& r, const std::string& run_dir) {
  namespace fs = std::filesystem;
  if (r.train().tensorboard_dir().empty()) return absl::OkStatus();
  fs::path dir(r.train().tensorboard_dir());
  if (dir.is_relative()) dir = fs::path(run_dir) / dir;
  std::error_code ec;
  fs::path p = dir.lexically_normal();
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  if (p.empty()) p = ".";
  if (!fs::is_directory(p, ec) || access(p.c_str(), W_OK) != 0) {
    const std::string where = p == dir.lexically_normal()
                                  ? std::string()
                                  : absl::StrCat(": cannot create ", dir.string());
    return absl::PermissionDeniedError(absl::StrCat(
        "train.tensorboard_dir ", r.train().tensorboard_dir(), where, ": ", p.string(),
        fs::is_directory(p, ec) ? " cannot be written" : " is not a directory",
        " (give a directory, new or existing; a relative one goes inside the run directory)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Preflight(const proto::Recipe& recipe, const RunOptions& options) {
  GTP_ASSIGN_OR_RETURN(const int world, WorldSize(recipe));
  GTP_RETURN_IF_ERROR(CheckLayout(recipe, world));
  // A model that cannot fit is refused before a byte is allocated.
  int local = world;  // threads: every rank in this process
  if (UnderLauncher(recipe)) {
    const char* lws = std::getenv("LOCAL_WORLD_SIZE");
    if (lws == nullptr || !absl::SimpleAtoi(lws, &local) || local < 1) local = 1;
  }
  GTP_RETURN_IF_ERROR(CheckModelFits(recipe, world, ThisMachine(local)));
  {
    std::unique_ptr<data::GptDataset> t, v;
    GTP_RETURN_IF_ERROR(MakeDatasets(recipe, &t, &v));
  }
  GTP_RETURN_IF_ERROR(CheckTokenizer(recipe));
  GTP_RETURN_IF_ERROR(CheckSampling(recipe));
  GTP_RETURN_IF_ERROR(TokenDump::CheckPath(recipe.train().dump_tokens()));
  if (options.run_dir.empty())
    return absl::OkStatus();  // an evaluation: its checkpoint is read next
  GTP_RETURN_IF_ERROR(CheckTensorboardDir(recipe, options.run_dir));
  // init_from is read only by a run that does not resume its own checkpoint.
  const std::string own = options.run_dir + "/" + recipe.checkpoint().dir();
  std::error_code ec;
  if (recipe.checkpoint().no_resume() || !std::filesystem::exists(own + "/latest", ec)) {
    GTP_RETURN_IF_ERROR(CheckInitFrom(recipe));
  }
  return absl::OkStatus();
}

}  // namespace gtp::recipes
