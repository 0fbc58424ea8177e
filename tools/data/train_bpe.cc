// tools/data/train_bpe: trains a GPT-2-style byte-level BPE on text, JSONL or
// the embedded corpus and writes vocab.json + merges.txt (the files
// Gpt2Tokenizer, make_indexed, `tokenize` and HF `tokenizers` load) and the
// same vocabulary as tokenizer.json (HfTokenizer, --tokenizer_json, HF).
//
//   bazel run //tools/data:train_bpe -- --input=$PWD/a.txt,$PWD/b.txt --vocab_size=8192
//       --out_dir=/tmp/bpe
//   bazel run //tools/data:train_bpe -- --input=$PWD/owt.jsonl --json_key=text
//       --vocab_size=32000 --out_dir=/tmp/owt_bpe
//   bazel run //tools/data:train_bpe -- --corpus=train --vocab_size=512 --out_dir=/tmp/corpus_bpe
//
// Each text file is pre-tokenized whole; with --json_key each non-empty line
// is a JSON object whose string field is one document. --vocab_size counts
// the 256 byte tokens, the merges and <|endoftext|> (the last id); training
// stops early when no pair is left. The algorithm, its tie rule and the
// output layout: data/tokenizer/bpe_trainer.h. Same input, same files.
// Progress (merges, the current pair count, merges/s) goes to stderr every
// second; the summary line gives bytes/s of counting and merges/s.
// Exit status: 0 written, 1 I/O or data error (one line naming the file),
// 2 bad flags.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "core/cli.h"
#include "core/status.h"
#include "core/user_path.h"
#include "data/corpus.h"
#include "data/tokenizer/bpe_trainer.h"
#include "tools/data/input_file.h"

ABSL_FLAG(std::vector<std::string>, input, {}, "text or JSONL files, comma-separated");
ABSL_FLAG(std::string, json_key, "",
          "read JSONL: one object per line, this string field is the document");
ABSL_FLAG(std::string, corpus, "",
          "instead of --input: the embedded corpus split (all, train, validation)");
ABSL_FLAG(int32_t, vocab_size, 0,
          "tokens in all: 256 bytes + merges + <|endoftext|> (required, >= 257)");
ABSL_FLAG(std::string, out_dir, "",
          "writes OUT_DIR/vocab.json, merges.txt and tokenizer.json (required)");

namespace gtp::tools {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count() + 1e-9;
}

absl::Status Count(data::BpeWordCounts* words) {
  if (!absl::GetFlag(FLAGS_corpus).empty()) {
    GTP_ASSIGN_OR_RETURN(data::CorpusSplit split,
                         data::ParseCorpusSplit(absl::GetFlag(FLAGS_corpus)));
    const data::DocumentRange r = data::EmbeddedCorpusSplit(split);
    const auto& off = data::EmbeddedCorpusDocumentOffsets();
    for (size_t d = r.begin; d < r.end; ++d) {
      words->AddText(data::EmbeddedCorpus().substr(off[d], off[d + 1] - off[d]));
    }
    return absl::OkStatus();
  }
  const std::string key = absl::GetFlag(FLAGS_json_key);
  for (const std::string& path : absl::GetFlag(FLAGS_input)) {
    GTP_ASSIGN_OR_RETURN(std::string text, tools::ReadInputFile(path));
    if (key.empty()) {
      words->AddText(text);
      continue;
    }
    GTP_RETURN_IF_ERROR(tools::ForEachJsonLine(path, text, key, [&](absl::string_view doc) {
      words->AddText(doc);
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

absl::Status Run() {
  const Clock::time_point start = Clock::now();
  data::BpeWordCounts words;
  GTP_RETURN_IF_ERROR(Count(&words));
  const double count_s = Since(start);
  std::fprintf(stderr, "train_bpe: %lld bytes, %lld words (%zu distinct) in %.2f s (%.1f MB/s)\n",
               static_cast<long long>(words.num_bytes()), static_cast<long long>(words.num_words()),
               words.counts().size(), count_s, words.num_bytes() / count_s / 1e6);

  data::BpeTrainerOptions o;
  o.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  const int64_t max_merges = o.vocab_size - 256 - static_cast<int64_t>(o.special_tokens.size());
  const Clock::time_point merge_start = Clock::now();
  Clock::time_point last = merge_start;
  o.on_merge = [&](int64_t merges, int64_t count) {
    const Clock::time_point now = Clock::now();
    if (now - last < std::chrono::seconds(1)) return;
    last = now;
    std::fprintf(stderr, "train_bpe: merge %lld/%lld (pair count %lld), %.0f merges/s\n",
                 static_cast<long long>(merges), static_cast<long long>(max_merges),
                 static_cast<long long>(count), merges / Since(merge_start));
  };
  GTP_ASSIGN_OR_RETURN(data::BpeVocab v, data::TrainBpe(words, o));
  const double merge_s = Since(merge_start);
  const std::string dir = absl::GetFlag(FLAGS_out_dir);
  GTP_RETURN_IF_ERROR(v.Write(dir));
  std::printf(
      "wrote %s/vocab.json, merges.txt and tokenizer.json: %d tokens (256 bytes, %d merged, %d "
      "special), %zu merges%s in %.2f s (%.0f merges/s; %.1f MB/s counting %lld bytes)\n",
      dir.c_str(), v.vocab_size(), v.vocab_size() - 256 - v.num_special, v.num_special,
      v.merges.size(), static_cast<int64_t>(v.merges.size()) < max_merges ? " (no pair left)" : "",
      merge_s, v.merges.size() / merge_s, words.num_bytes() / count_s / 1e6,
      static_cast<long long>(words.num_bytes()));
  return absl::OkStatus();
}

}  // namespace
}  // namespace gtp::tools

int main(int argc, char** argv) {
  gtp::SetUsage(
      "Trains a GPT-2 byte-level BPE.\n"
      "  train_bpe --input=a.txt,b.txt --vocab_size=N --out_dir=DIR\n"
      "  train_bpe --input=docs.jsonl --json_key=text --vocab_size=N --out_dir=DIR\n"
      "  train_bpe --corpus=all|train|validation --vocab_size=N --out_dir=DIR");
  std::vector<char*> args = gtp::ParseCommandLine(argc, argv);
  // Paths typed by the user mean the directory `bazel run` was called from.
  absl::SetFlag(&FLAGS_out_dir, gtp::UserPath(absl::GetFlag(FLAGS_out_dir)));
  {
    std::vector<std::string> inputs = absl::GetFlag(FLAGS_input);
    for (std::string& in : inputs) in = gtp::UserPath(in);
    absl::SetFlag(&FLAGS_input, inputs);
  }
  // (A stray argument was refused with the flags' summary, which it satisfied.)
  if (args.size() > 1) {
    std::fprintf(
        stderr,
        "train_bpe: unexpected argument '%s': train_bpe takes only flags (input files go in "
        "--input=a.txt,b.txt; see --help)\n",
        args[1]);
    return 2;
  }
  const bool corpus = !absl::GetFlag(FLAGS_corpus).empty();
  if (absl::GetFlag(FLAGS_out_dir).empty() || absl::GetFlag(FLAGS_vocab_size) < 257 ||
      corpus == !absl::GetFlag(FLAGS_input).empty() ||
      (corpus && !absl::GetFlag(FLAGS_json_key).empty())) {
    std::fprintf(stderr,
                 "train_bpe: need --out_dir, --vocab_size >= 257 and either --input or --corpus; "
                 "--json_key needs --input (see --help)\n");
    return 2;
  }
  absl::Status s = gtp::tools::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "train_bpe: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
