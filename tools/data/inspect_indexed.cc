// tools/data/inspect_indexed: validates a Megatron-LM indexed dataset
// (.bin/.idx) and prints its shape and first documents.
//
//   bazel run //tools/data:inspect_indexed -- /data/owt_text_document --show=2 --text
//
// Exit status: 0 valid, 1 unreadable or corrupt (one line naming the file),
// 2 bad flags.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cli.h"
#include "core/user_path.h"
#include "data/indexed_dataset.h"

ABSL_FLAG(int, show, 3, "print the first N documents");
ABSL_FLAG(int, max_tokens, 32, "tokens (or bytes with --text) to print per document");
ABSL_FLAG(bool, text, false, "print documents as bytes (byte-level data)");

int main(int argc, char** argv) {
  gtp::SetUsage("inspect_indexed PREFIX [--show=N] [--max_tokens=N] [--text]");
  std::vector<char*> args = gtp::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "inspect_indexed: give exactly one PREFIX (without .bin/.idx)\n");
    return 2;
  }
  // (Negative counts used to be taken as 0.)
  if (absl::GetFlag(FLAGS_show) < 0 || absl::GetFlag(FLAGS_max_tokens) < 0) {
    std::fprintf(stderr, "inspect_indexed: --show and --max_tokens must be >= 0, got %d and %d\n",
                 absl::GetFlag(FLAGS_show), absl::GetFlag(FLAGS_max_tokens));
    return 2;
  }
  auto opened = gtp::data::IndexedDataset::Open(gtp::UserPath(args[1]));  // as typed under `bazel run`
  if (!opened.ok()) {
    std::fprintf(stderr, "inspect_indexed: %s\n", std::string(opened.status().message()).c_str());
    return 1;
  }
  const gtp::data::IndexedDataset& ds = **opened;
  size_t min_len = ds.num_documents() ? SIZE_MAX : 0, max_len = 0;
  for (size_t d = 0; d < ds.num_documents(); ++d) {
    min_len = std::min(min_len, ds.document_length(d));
    max_len = std::max(max_len, ds.document_length(d));
  }
  std::printf("prefix     %s\n", ds.path_prefix().c_str());
  std::printf("dtype      %s\n", gtp::data::IndexDTypeName(ds.dtype()));
  std::printf("sequences  %zu\n", ds.num_sequences());
  std::printf("documents  %zu\n", ds.num_documents());
  std::printf("tokens     %llu\n", static_cast<unsigned long long>(ds.num_tokens()));
  std::printf("doc length min %zu, mean %.1f, max %zu\n", min_len,
              ds.num_documents() ? double(ds.num_tokens()) / ds.num_documents() : 0.0, max_len);
  const size_t show = std::min<size_t>(std::max(0, absl::GetFlag(FLAGS_show)), ds.num_documents());
  const size_t max_tokens = std::max(0, absl::GetFlag(FLAGS_max_tokens));
  for (size_t d = 0; d < show; ++d) {
    size_t n = std::min(max_tokens, ds.document_length(d));
    std::vector<int32_t> tok(n);
    ds.Read(d, 0, n, tok.data());
    std::string body;
    if (absl::GetFlag(FLAGS_text)) {
      for (int32_t t : tok) {
        if (t == '\n')
          body += "\\n";
        else if (t >= 0x20 && t < 0x7f)
          body += static_cast<char>(t);
        else
          body += absl::StrCat("\\x", absl::Hex(t & 0xff, absl::kZeroPad2));
      }
      body = "\"" + body + "\"";
    } else {
      body = "[" + absl::StrJoin(tok, " ") + "]";
    }
    std::printf("doc %zu (%zu tokens): %s%s\n", d, ds.document_length(d), body.c_str(),
                n < ds.document_length(d) ? " ..." : "");
  }
  return 0;
}
