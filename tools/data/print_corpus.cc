// tools/data/print_corpus: writes the embedded byte-level corpus (or a split
// of it) to stdout, so you can read what byte-level recipes train on.
//
//   bazel run //tools/data:print_corpus -- --split=validation | less
//
// Exit status: 0, or 2 for bad flags.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "core/cli.h"
#include "data/corpus.h"

ABSL_FLAG(std::string, split, "all", "all, train or validation");
ABSL_FLAG(int64_t, max_bytes, -1, "stop after this many bytes (-1: no limit)");

int main(int argc, char** argv) {
  gtp::SetUsage("Prints the embedded corpus. Flags: --split, --max_bytes.");
  gtp::ParseCommandLine(argc, argv);
  auto split = gtp::data::ParseCorpusSplit(absl::GetFlag(FLAGS_split));
  if (!split.ok()) {
    std::fprintf(stderr, "print_corpus: %s\n", std::string(split.status().message()).c_str());
    return 2;
  }
  gtp::data::DocumentRange r = gtp::data::EmbeddedCorpusSplit(*split);
  const auto& off = gtp::data::EmbeddedCorpusDocumentOffsets();
  absl::string_view text =
      gtp::data::EmbeddedCorpus().substr(off[r.begin], off[r.end] - off[r.begin]);
  int64_t max_bytes = absl::GetFlag(FLAGS_max_bytes);
  if (max_bytes >= 0 && static_cast<size_t>(max_bytes) < text.size()) {
    text = text.substr(0, static_cast<size_t>(max_bytes));
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}
