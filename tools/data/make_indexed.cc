// tools/data/make_indexed: writes a Megatron-LM indexed dataset (.bin/.idx)
// from text files, JSONL files or the embedded corpus: byte-level tokens
// (vocabulary 256) by default, GPT-2 BPE ids with --vocab/--merges, or the ids
// of a Hugging Face tokenizer.json (Llama-3, Qwen2, GPT-2, ...) with
// --tokenizer_json, or of a SentencePiece tokenizer.model (Llama-2, Mistral)
// with --tokenizer_model. The pair loads in gtp (data/indexed_dataset.h) and
// in Megatron-LM.
//
//   bazel run //tools/data:make_indexed -- --output=/tmp/notes --documents=paragraph a.txt b.txt
//   bazel run //tools/data:make_indexed -- --output=/tmp/corpus_val --corpus=validation
//   bazel run //tools/data:make_indexed -- --output=/tmp/owt --json_key=text --append_eod
//       --vocab=gpt2/vocab.json --merges=gpt2/merges.txt owt.jsonl
//   bazel run //tools/data:make_indexed -- --output=/tmp/owt_llama3 --json_key=text --append_eod
//       --tokenizer_json=llama3/tokenizer.json --eod_token='<|end_of_text|>' owt.jsonl
//   bazel run //tools/data:make_indexed -- --output=/tmp/owt_llama2 --json_key=text --append_eod
//       --tokenizer_model=llama2/tokenizer.model owt.jsonl
//
// --documents: "file" (each file is one document), "line" (each non-empty
// line, with its newline), "paragraph" (text between empty lines, keeping one
// trailing empty line). --json_key=K reads JSONL instead: each non-empty line
// is an object whose string field K is one document (like Megatron's
// preprocess_data.py). --append_eod ends each document with --eod_token
// (a special token of the tokenizer.json, a vocab.json entry, a control piece
// of the tokenizer.model; default <|endoftext|>, or the tokenizer.model's
// end-of-sentence piece, </s>). --prepend_bos starts each document with
// --bos_token (default: the tokenizer.model's beginning-of-sentence piece,
// <s>; the first special token of the tokenizer.json among
// <|begin_of_text|>, <s>, <bos>; GPT-2 has none: name one). --dtype
// defaults to u8 for bytes and to Megatron's choice (u16 below 65500 ids,
// else i32) for BPE. A progress line (documents,
// documents/s) goes to stderr every second. Exit status: 0 written, 1 I/O or
// data error (one line on stderr naming the file), 2 bad flags.
#include <chrono>
#include <cstdio>
#include <filesystem>
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
#include "data/indexed_dataset.h"
#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/hf_tokenizer.h"
#include "data/tokenizer/sentencepiece_tokenizer.h"
#include "tools/data/input_file.h"

ABSL_FLAG(std::string, output, "", "output prefix: writes PREFIX.bin and PREFIX.idx (required)");
ABSL_FLAG(std::string, dtype, "",
          "token dtype: u8, u16, i16, i32, i64 (i8 cannot hold bytes); default u8 for bytes, "
          "u16/i32 by vocabulary size for BPE");
ABSL_FLAG(std::string, documents, "file", "document boundaries: file, line or paragraph");
ABSL_FLAG(std::string, corpus, "",
          "instead of files: the embedded corpus split (all, train, validation)");
ABSL_FLAG(std::string, vocab, "", "GPT-2 BPE vocab.json (with --merges): write BPE ids, not bytes");
ABSL_FLAG(std::string, merges, "", "GPT-2 BPE merges.txt (with --vocab)");
ABSL_FLAG(std::string, tokenizer_json, "",
          "a Hugging Face tokenizer.json (instead of --vocab/--merges): write its ids");
ABSL_FLAG(std::string, tokenizer_model, "",
          "a SentencePiece tokenizer.model (Llama-2, Mistral; instead of --vocab/--merges): write "
          "its ids");
ABSL_FLAG(std::string, json_key, "",
          "read JSONL: one object per line, this string field is the document");
ABSL_FLAG(bool, append_eod, false,
          "append --eod_token to every document (with a tokenizer, not for bytes)");
ABSL_FLAG(bool, prepend_bos, false,
          "start every document with --bos_token (Llama-2/Mistral <s>, Llama-3 "
          "<|begin_of_text|>; with a tokenizer, not for bytes)");
ABSL_FLAG(std::string, bos_token, "",
          "the beginning-of-document token --prepend_bos puts first (default: the "
          "--tokenizer_model's beginning-of-sentence piece; for --tokenizer_json the first of "
          "<|begin_of_text|>, <s>, <bos> that is a special token; --vocab: required)");
ABSL_FLAG(std::string, eod_token, "",
          "the end-of-document token --append_eod appends (default: <|endoftext|>, or the "
          "--tokenizer_model's end-of-sentence piece, </s>; Llama-3: <|end_of_text|>)");

namespace gtp::tools {
namespace {

std::vector<int32_t> Bytes(absl::string_view text) {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
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

// Prints "N documents, D documents/s" to stderr at most once a second.
class Progress {
 public:
  void Tick(uint64_t docs) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    std::fprintf(stderr, "make_indexed: %llu documents, %.0f documents/s\n",
                 static_cast<unsigned long long>(docs), docs / Seconds());
  }
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() + 1e-9;
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;
};

// The id --prepend_bos puts first, from --bos_token or the tokenizer's own
// beginning-of-sequence token; an error naming --bos_token when there is none.
absl::StatusOr<int32_t> BosId(const std::optional<data::Gpt2Tokenizer>& gpt2,
                              const std::optional<data::HfTokenizer>& hf,
                              const std::optional<data::SentencePieceTokenizer>& spm) {
  const std::string flag = absl::GetFlag(FLAGS_bos_token);
  std::optional<int32_t> id;
  if (gpt2) {
    if (flag.empty()) {
      return absl::InvalidArgumentError(
          "--prepend_bos: GPT-2's vocabulary has no beginning-of-sequence token; name one with "
          "--bos_token (GPT-2 runs usually end documents with --append_eod instead)");
    }
    id = gpt2->TokenId(flag);
    if (!id) {
      return absl::InvalidArgumentError(absl::StrCat(absl::GetFlag(FLAGS_vocab), ": no ", flag,
                                                     " token for --prepend_bos"));
    }
  } else if (hf) {
    const std::vector<std::string> names =
        flag.empty() ? std::vector<std::string>{"<|begin_of_text|>", "<s>", "<bos>"}
                     : std::vector<std::string>{flag};
    for (const std::string& n : names) {
      if ((id = hf->SpecialTokenId(n))) break;
    }
    if (!id) {
      return absl::InvalidArgumentError(absl::StrCat(
          absl::GetFlag(FLAGS_tokenizer_json), ": ",
          flag.empty() ? "none of <|begin_of_text|>, <s>, <bos> is" : flag + " is not",
          " one of its special added tokens; name the beginning-of-document token with "
          "--bos_token"));
    }
  } else {
    id = flag.empty() ? spm->bos_id() : spm->SpecialTokenId(flag);
    if (!id) {
      return absl::InvalidArgumentError(absl::StrCat(
          absl::GetFlag(FLAGS_tokenizer_model), ": ",
          flag.empty() ? std::string("it has no beginning-of-sentence piece (trainer_spec.bos_piece "
                                     "as a CONTROL piece)")
                       : absl::StrCat(flag, " is not one of its control, unknown or "
                                            "user-defined pieces"),
          "; name the beginning-of-document piece with --bos_token (Llama-2, Mistral: <s>)"));
    }
  }
  return *id;
}

absl::Status Run(const std::vector<std::string>& files, uint64_t* num_docs, uint64_t* num_tokens,
                 std::string* dtype_name, double* seconds) {
  const std::string output = absl::GetFlag(FLAGS_output);
  const std::string eod_flag = absl::GetFlag(FLAGS_eod_token);
  const std::string eod_name = eod_flag.empty() ? "<|endoftext|>" : eod_flag;
  std::optional<data::Gpt2Tokenizer> gpt2;
  std::optional<data::HfTokenizer> hf;
  std::optional<data::SentencePieceTokenizer> spm;
  std::optional<int32_t> eod;
  int32_t vocab_size = 0;
  if (!absl::GetFlag(FLAGS_vocab).empty()) {
    GTP_ASSIGN_OR_RETURN(
        gpt2, data::Gpt2Tokenizer::Load(absl::GetFlag(FLAGS_vocab), absl::GetFlag(FLAGS_merges)));
    vocab_size = gpt2->vocab_size();
    if (absl::GetFlag(FLAGS_append_eod)) {
      eod = gpt2->TokenId(eod_name);
      if (!eod) {
        return absl::InvalidArgumentError(
            absl::StrCat(absl::GetFlag(FLAGS_vocab), ": no ", eod_name, " token for --append_eod"));
      }
    }
  } else if (!absl::GetFlag(FLAGS_tokenizer_json).empty()) {
    const std::string& path = absl::GetFlag(FLAGS_tokenizer_json);
    GTP_ASSIGN_OR_RETURN(hf, data::HfTokenizer::Load(path));
    std::fprintf(stderr, "make_indexed: %s: %s\n", path.c_str(), hf->Summary().c_str());
    vocab_size = hf->vocab_size();
    if (absl::GetFlag(FLAGS_append_eod)) {
      eod = hf->SpecialTokenId(eod_name);
      if (!eod) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": ", eod_name,
                         " is not one of its special added tokens; name the "
                         "end-of-document token with --eod_token (Llama-3: <|end_of_text|>, Qwen2: "
                         "<|endoftext|>)"));
      }
    }
  } else if (!absl::GetFlag(FLAGS_tokenizer_model).empty()) {
    const std::string& path = absl::GetFlag(FLAGS_tokenizer_model);
    GTP_ASSIGN_OR_RETURN(spm, data::SentencePieceTokenizer::Load(path));
    std::fprintf(stderr, "make_indexed: %s: %s\n", path.c_str(), spm->Summary().c_str());
    vocab_size = spm->vocab_size();
    if (absl::GetFlag(FLAGS_append_eod)) {
      eod = eod_flag.empty() ? spm->eos_id() : spm->SpecialTokenId(eod_flag);
      if (!eod) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": ",
            eod_flag.empty() ? std::string("it has no end-of-sentence piece (trainer_spec.eos_piece "
                                           "as a CONTROL piece)")
                             : absl::StrCat(eod_flag, " is not one of its control, unknown or "
                                                      "user-defined pieces"),
            "; name the end-of-document piece with --eod_token (Llama-2, Mistral: </s>)"));
      }
    }
  }
  std::optional<int32_t> bos;
  if (absl::GetFlag(FLAGS_prepend_bos)) {
    GTP_ASSIGN_OR_RETURN(bos, BosId(gpt2, hf, spm));
  }
  const bool bpe = gpt2 || hf || spm;
  data::IndexDType dtype = bpe ? data::OptimalIndexDType(vocab_size) : data::IndexDType::kU8;
  if (!absl::GetFlag(FLAGS_dtype).empty()) {
    GTP_ASSIGN_OR_RETURN(dtype, data::ParseIndexDType(absl::GetFlag(FLAGS_dtype)));
  }
  *dtype_name = data::IndexDTypeName(dtype);
  GTP_ASSIGN_OR_RETURN(auto writer, data::IndexedDatasetWriter::Create(output, dtype));
  data::BpeCache cache;
  std::vector<int32_t> ids;
  Progress progress;
  auto add = [&](absl::string_view doc) -> absl::Status {
    if (bpe) {
      ids.clear();
      if (bos) ids.push_back(*bos);
      if (gpt2) {
        gpt2->EncodeAppend(doc, &cache, &ids);
      } else if (hf) {
        hf->EncodeAppend(doc, &cache, &ids);
      } else {
        spm->EncodeAppend(doc, &ids);
      }
      if (eod) ids.push_back(*eod);
    } else {
      ids = Bytes(doc);
    }
    ++*num_docs;
    *num_tokens += ids.size();
    progress.Tick(*num_docs);
    return writer->AddDocument(ids);
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
    const std::string key = absl::GetFlag(FLAGS_json_key);
    for (const std::string& path : files) {
      GTP_ASSIGN_OR_RETURN(std::string text, tools::ReadInputFile(path));
      if (key.empty()) {
        for (absl::string_view doc : Split(text, mode)) GTP_RETURN_IF_ERROR(add(doc));
        continue;
      }
      GTP_RETURN_IF_ERROR(tools::ForEachJsonLine(path, text, key, add));
    }
  }
  *seconds = progress.Seconds();
  return writer->Finish();
}

}  // namespace
}  // namespace gtp::tools

int main(int argc, char** argv) {
  gtp::SetUsage(
      "Writes byte-level text as a Megatron .bin/.idx pair.\n"
      "  make_indexed --output=PREFIX [--documents=file|line|paragraph] [--dtype=u8] FILE...\n"
      "  make_indexed --output=PREFIX --corpus=all|train|validation\n"
      "  make_indexed --output=PREFIX --vocab=vocab.json --merges=merges.txt [--json_key=text]\n"
      "               [--append_eod] [--documents=line] FILE...\n"
      "  make_indexed --output=PREFIX --tokenizer_json=tokenizer.json [--json_key=text]\n"
      "               [--append_eod --eod_token=TOKEN] [--documents=line] FILE...\n"
      "  make_indexed --output=PREFIX --tokenizer_model=tokenizer.model [--json_key=text]\n"
      "               [--append_eod [--eod_token=TOKEN]] [--prepend_bos [--bos_token=TOKEN]]\n"
      "               [--documents=line] FILE...");
  std::vector<char*> args = gtp::ParseCommandLine(argc, argv);
  // Paths typed by the user mean the directory `bazel run` was called from.
  for (auto* f : {&FLAGS_output, &FLAGS_vocab, &FLAGS_merges, &FLAGS_tokenizer_json,
                  &FLAGS_tokenizer_model}) {
    absl::SetFlag(f, gtp::UserPath(absl::GetFlag(*f)));
  }
  std::vector<std::string> files;
  for (auto it = args.begin() + 1; it != args.end(); ++it) files.push_back(gtp::UserPath(*it));
  const std::string mode = absl::GetFlag(FLAGS_documents);
  const bool corpus = !absl::GetFlag(FLAGS_corpus).empty();
  const bool bpe = !absl::GetFlag(FLAGS_vocab).empty();
  const bool hf = !absl::GetFlag(FLAGS_tokenizer_json).empty();
  const bool spm = !absl::GetFlag(FLAGS_tokenizer_model).empty();
  if (absl::GetFlag(FLAGS_output).empty() || (corpus == !files.empty()) ||
      (mode != "file" && mode != "line" && mode != "paragraph") ||
      bpe != !absl::GetFlag(FLAGS_merges).empty() ||
      ((absl::GetFlag(FLAGS_append_eod) || absl::GetFlag(FLAGS_prepend_bos)) && !bpe && !hf &&
       !spm) ||
      (corpus && !absl::GetFlag(FLAGS_json_key).empty())) {
    std::fprintf(stderr,
                 "make_indexed: need --output and either input files or --corpus; "
                 "--documents is file, line or paragraph; --vocab and --merges go together; "
                 "--append_eod and --prepend_bos need them, --tokenizer_json or --tokenizer_model; "
                 "--json_key needs files "
                 "(see --help)\n");
    return 2;
  }
  if (!absl::GetFlag(FLAGS_json_key).empty() && mode != "file") {
    std::fprintf(stderr,
                 "make_indexed: --documents=%s splits text files; with --json_key each JSONL object is "
                 "one document: drop --documents\n",
                 mode.c_str());
    return 2;
  }
  // A token named for a step that is off would be ignored: refused instead.
  if (!absl::GetFlag(FLAGS_eod_token).empty() && !absl::GetFlag(FLAGS_append_eod)) {
    std::fprintf(stderr, "make_indexed: --eod_token names the token --append_eod appends; add --append_eod\n");
    return 2;
  }
  if (!absl::GetFlag(FLAGS_bos_token).empty() && !absl::GetFlag(FLAGS_prepend_bos)) {
    std::fprintf(stderr, "make_indexed: --bos_token names the token --prepend_bos puts first; add --prepend_bos\n");
    return 2;
  }
  if (hf && (bpe || !absl::GetFlag(FLAGS_merges).empty())) {
    std::fprintf(stderr,
                 "make_indexed: --tokenizer_json is instead of --vocab/--merges, not with them\n");
    return 2;
  }
  if (spm && (hf || bpe || !absl::GetFlag(FLAGS_merges).empty())) {
    std::fprintf(stderr,
                 "make_indexed: --tokenizer_model is instead of --vocab/--merges and "
                 "--tokenizer_json, not with them: give one tokenizer\n");
    return 2;
  }
  {
    // A prefix, not a directory: --output=DIR/ wrote the hidden DIR/.bin and DIR/.idx.
    const std::string& out = absl::GetFlag(FLAGS_output);
    const std::string name = std::filesystem::path(out).filename().string();
    if (name.empty() || name == "." || name == "..") {
      std::fprintf(
          stderr,
          "make_indexed: --output=%s names a directory, but --output is a prefix (it writes "
          "PREFIX.bin and PREFIX.idx): give a name in it, e.g. --output=%s%sdata\n",
          out.c_str(), out.c_str(), out.back() == '/' ? "" : "/");
      return 2;
    }
  }
  uint64_t docs = 0, tokens = 0;
  std::string dtype;
  double seconds = 0;
  absl::Status s = gtp::tools::Run(files, &docs, &tokens, &dtype, &seconds);
  if (!s.ok()) {
    std::fprintf(stderr, "make_indexed: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("wrote %s.bin and %s.idx: %llu documents, %llu tokens (%s), %.0f documents/s\n",
              absl::GetFlag(FLAGS_output).c_str(), absl::GetFlag(FLAGS_output).c_str(),
              static_cast<unsigned long long>(docs), static_cast<unsigned long long>(tokens),
              dtype.c_str(), docs / (seconds + 1e-9));
  return 0;
}
