// data/tokenizer/tokenize: GPT-2 BPE ids of stdin, one output line per input
// line (the line's text without its '\n'), ids separated by spaces.
//
//   bazel run //data/tokenizer:tokenize -- --vocab=vocab.json --merges=merges.txt < text.txt
//
// The same lines through HF `tokenizers` (ByteLevel, add_prefix_space=False)
// must give the same ids. Exit status: 0 ok, 1 bad files, 2 bad flags.
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "core/cli.h"
#include "data/tokenizer/gpt2_tokenizer.h"

ABSL_FLAG(std::string, vocab, "", "vocab.json (required)");
ABSL_FLAG(std::string, merges, "", "merges.txt (required)");

int main(int argc, char** argv) {
  gtp::SetUsage("tokenize --vocab=vocab.json --merges=merges.txt < text");
  gtp::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_vocab).empty() || absl::GetFlag(FLAGS_merges).empty()) {
    std::fprintf(stderr, "tokenize: need --vocab and --merges\n");
    return 2;
  }
  absl::StatusOr<gtp::data::Gpt2Tokenizer> tok =
      gtp::data::Gpt2Tokenizer::Load(absl::GetFlag(FLAGS_vocab), absl::GetFlag(FLAGS_merges));
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenize: %s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  std::ios::sync_with_stdio(false);
  gtp::data::BpeCache cache;
  std::string line;
  std::vector<int32_t> ids;
  while (std::getline(std::cin, line)) {
    ids.clear();
    tok->EncodeAppend(line, &cache, &ids);
    std::cout << absl::StrJoin(ids, " ") << '\n';
  }
  std::cout.flush();
  return 0;
}
