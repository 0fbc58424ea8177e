// data/tokenizer/tokenize: BPE ids of stdin, one output line per input line
// (the line's text without its '\n'), ids separated by spaces.
//
//   bazel run //data/tokenizer:tokenize -- --vocab=vocab.json --merges=merges.txt < text.txt
//   bazel run //data/tokenizer:tokenize -- --tokenizer_json=tokenizer.json < text.txt
//   bazel run //data/tokenizer:tokenize -- --tokenizer_json=tokenizer.json --decode < ids.txt
//   bazel run //data/tokenizer:tokenize -- --tokenizer_model=tokenizer.model < text.txt
//
// The same lines through HF `tokenizers` (vocab/merges: ByteLevel with
// add_prefix_space=False; tokenizer.json: encode(line, add_special_tokens=False))
// or `sentencepiece` (tokenizer.model: sp.encode(line)) must give the same
// ids. --decode reads lines of ids and writes their text, one line each.
// Exit status: 0 ok, 1 bad files or ids, 2 bad flags.
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/cli.h"
#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/hf_tokenizer.h"
#include "data/tokenizer/sentencepiece_tokenizer.h"

ABSL_FLAG(std::string, vocab, "", "vocab.json (required)");
ABSL_FLAG(std::string, merges, "", "merges.txt (with --vocab)");
ABSL_FLAG(std::string, tokenizer_json, "",
          "a Hugging Face tokenizer.json (instead of --vocab/--merges)");
ABSL_FLAG(std::string, tokenizer_model, "",
          "a SentencePiece tokenizer.model (instead of --vocab/--merges)");
ABSL_FLAG(bool, decode, false,
          "read lines of ids and write their text (--tokenizer_json or --tokenizer_model)");
ABSL_FLAG(bool, summary, false, "print the tokenizer's summary line to stderr first");

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "tokenize: %s\n", std::string(s.message()).c_str());
  return 1;
}

// Lines of space-separated ids to text, one output line per input line.
template <typename Tokenizer>
int DecodeLines(const Tokenizer& tok) {
  std::string line;
  size_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    std::vector<int32_t> ids;
    for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      int32_t id;
      if (!absl::SimpleAtoi(field, &id)) {
        return Fail(absl::InvalidArgumentError(
            absl::StrCat("line ", line_no, ": \"", field, "\" is not a token id")));
      }
      ids.push_back(id);
    }
    absl::StatusOr<std::string> text = tok.Decode(ids);
    if (!text.ok()) {
      return Fail(absl::Status(text.status().code(),
                               absl::StrCat("line ", line_no, ": ", text.status().message())));
    }
    std::cout << *text << '\n';
  }
  std::cout.flush();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gtp::SetUsage(
      "tokenize --vocab=vocab.json --merges=merges.txt < text\n"
      "  tokenize --tokenizer_json=tokenizer.json [--decode] < text\n"
      "  tokenize --tokenizer_model=tokenizer.model [--decode] < text");
  gtp::ParseCommandLine(argc, argv);
  const bool bpe = !absl::GetFlag(FLAGS_vocab).empty() || !absl::GetFlag(FLAGS_merges).empty();
  const bool hf = !absl::GetFlag(FLAGS_tokenizer_json).empty();
  const bool spm = !absl::GetFlag(FLAGS_tokenizer_model).empty();
  if (bpe + hf + spm != 1 ||
      (bpe && (absl::GetFlag(FLAGS_vocab).empty() || absl::GetFlag(FLAGS_merges).empty())) ||
      (absl::GetFlag(FLAGS_decode) && bpe)) {
    std::fprintf(stderr,
                 "tokenize: need --vocab and --merges, or one of --tokenizer_json and "
                 "--tokenizer_model instead; --decode needs --tokenizer_json or --tokenizer_model\n");
    return 2;
  }
  std::ios::sync_with_stdio(false);
  gtp::data::BpeCache cache;
  std::string line;
  std::vector<int32_t> ids;
  if (spm) {
    absl::StatusOr<gtp::data::SentencePieceTokenizer> tok =
        gtp::data::SentencePieceTokenizer::Load(absl::GetFlag(FLAGS_tokenizer_model));
    if (!tok.ok()) return Fail(tok.status());
    if (absl::GetFlag(FLAGS_summary)) std::fprintf(stderr, "%s\n", tok->Summary().c_str());
    if (absl::GetFlag(FLAGS_decode)) return DecodeLines(*tok);
    while (std::getline(std::cin, line)) {
      ids.clear();
      tok->EncodeAppend(line, &ids);
      std::cout << absl::StrJoin(ids, " ") << '\n';
    }
    std::cout.flush();
    return 0;
  }
  if (hf) {
    absl::StatusOr<gtp::data::HfTokenizer> tok =
        gtp::data::HfTokenizer::Load(absl::GetFlag(FLAGS_tokenizer_json));
    if (!tok.ok()) return Fail(tok.status());
    if (absl::GetFlag(FLAGS_summary)) std::fprintf(stderr, "%s\n", tok->Summary().c_str());
    if (absl::GetFlag(FLAGS_decode)) return DecodeLines(*tok);
    while (std::getline(std::cin, line)) {
      ids.clear();
      tok->EncodeAppend(line, &cache, &ids);
      std::cout << absl::StrJoin(ids, " ") << '\n';
    }
    std::cout.flush();
    return 0;
  }
  absl::StatusOr<gtp::data::Gpt2Tokenizer> tok =
      gtp::data::Gpt2Tokenizer::Load(absl::GetFlag(FLAGS_vocab), absl::GetFlag(FLAGS_merges));
  if (!tok.ok()) return Fail(tok.status());
  while (std::getline(std::cin, line)) {
    ids.clear();
    tok->EncodeAppend(line, &cache, &ids);
    std::cout << absl::StrJoin(ids, " ") << '\n';
  }
  std::cout.flush();
  return 0;
}
