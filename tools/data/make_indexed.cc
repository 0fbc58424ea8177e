// tools/data/make_indexed: writes a Megatron-LM indexed dataset (.bin/.idx)
// of byte-level tokens (vocabulary 256), from text files or from the embedded
// corpus. The pair loads in gtp (data/indexed_dataset.h) and in Megatron-LM.
//
//   bazel run //tools/data:make_indexed -- --output=/tmp/notes --documents=paragraph a.txt b.txt
//   bazel run //tools/data:make_indexed -- --output=/tmp/corpus_val --corpus=validation
//
// --documents: "file" (each file is one document), "line" (each non-empty
// line, with its newline), "paragraph" (text between empty lines, keeping one
// trailing empty line). Exit status: 0 written, 1 I/O or data error (one line
// on stderr naming the file), 2 bad flags.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "data/corpus.h"
#include "data/indexed_dataset.h"

ABSL_FLAG(std::string, output, "", "output prefix: writes PREFIX.bin and PREFIX.idx (required)");
ABSL_FLAG(std::string, dtype, "u8", "token dtype: u8, u16, i16, i32, i64 (i8 cannot hold bytes)");
ABSL_FLAG(std::string, documents, "file", "document boundaries: file, line or paragraph");
ABSL_FLAG(std::string, corpus, "",
          "instead of files: the embedded corpus split (all, train, validation)");

namespace gtp::tools {
namespace {

std::vector<int32_t> Bytes(absl::string_view text) {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return ss.str();
}

// Splits `text` into documents by `mode`; empty documents are dropped.
std::vector<absl::string_view> Split(absl::string_view text, const std::string& mode) {
  std::vector<absl::string_view> docs;
  if (mode == "file") {
    if (!text.empty()) docs.push_back(text);
    return docs;
  }
  const absl::string_view sep = mode == "line" ? "\n" : "\n\n";
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find(sep, begin);
    end = end == absl::string_view::npos ? text.size() : end + sep.size();
    absl::string_view doc = text.substr(begin, end - begin);
    if (doc.find_first_not_of("\n") != absl::string_view::npos) docs.push_back(doc);
    begin = end;
    while (mode == "paragraph" && begin < text.size() && text[begin] == '\n') ++begin;
  }
  return docs;
}

absl::Status Run(const std::vector<std::string>& files, uint64_t* num_docs, uint64_t* num_tokens) {
  const std::string output = absl::GetFlag(FLAGS_output);
  GTP_ASSIGN_OR_RETURN(data::IndexDType dtype, data::ParseIndexDType(absl::GetFlag(FLAGS_dtype)));
  GTP_ASSIGN_OR_RETURN(auto writer, data::IndexedDatasetWriter::Create(output, dtype));
  auto add = [&](absl::string_view doc) -> absl::Status {
    ++*num_docs;
    *num_tokens += doc.size();
    return writer->AddDocument(Bytes(doc));
  };
  if (!absl::GetFlag(FLAGS_corpus).empty()) {
    GTP_ASSIGN_OR_RETURN(data::CorpusSplit split,
                         data::ParseCorpusSplit(absl::GetFlag(FLAGS_corpus)));
    data::DocumentRange r = data::EmbeddedCorpusSplit(split);
    const auto& off = data::EmbeddedCorpusDocumentOffsets();
    for (size_t d = r.begin; d < r.end; ++d) {
      GTP_RETURN_IF_ERROR(add(data::EmbeddedCorpus().substr(off[d], off[d + 1] - off[d])));
    }
  } else {
    const std::string mode = absl::GetFlag(FLAGS_documents);
    for (const std::string& path : files) {
      GTP_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
      for (absl::string_view doc : Split(text, mode)) GTP_RETURN_IF_ERROR(add(doc));
    }
  }
  return writer->Finish();
}

}  // namespace
}  // namespace gtp::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes byte-level text as a Megatron .bin/.idx pair.\n"
      "  make_indexed --output=PREFIX [--documents=file|line|paragraph] [--dtype=u8] FILE...\n"
      "  make_indexed --output=PREFIX --corpus=all|train|validation");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> files(args.begin() + 1, args.end());
  const std::string mode = absl::GetFlag(FLAGS_documents);
  const bool corpus = !absl::GetFlag(FLAGS_corpus).empty();
  if (absl::GetFlag(FLAGS_output).empty() || (corpus == !files.empty()) ||
      (mode != "file" && mode != "line" && mode != "paragraph")) {
    std::fprintf(stderr,
                 "make_indexed: need --output and either input files or --corpus; "
                 "--documents is file, line or paragraph (see --help)\n");
    return 2;
  }
  uint64_t docs = 0, tokens = 0;
  absl::Status s = gtp::tools::Run(files, &docs, &tokens);
  if (!s.ok()) {
    std::fprintf(stderr, "make_indexed: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("wrote %s.bin and %s.idx: %llu documents, %llu tokens (%s)\n",
              absl::GetFlag(FLAGS_output).c_str(), absl::GetFlag(FLAGS_output).c_str(),
              static_cast<unsigned long long>(docs), static_cast<unsigned long long>(tokens),
              absl::GetFlag(FLAGS_dtype).c_str());
  return 0;
}
