// tools/fuzz/tokenizer_json_fuzzer.cc — Hugging Face tokenizer.json files
// (data/tokenizer/hf_tokenizer.h), an input users bring from outside: the
// bytes as a tokenizer.json. A file that loads must encode a fixed
// multilingual text into ids inside its vocabulary and decode them again
// without failing; one that does not load must be refused with a message.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "data/tokenizer/hf_tokenizer.h"
#include "tools/fuzz/tokenizer_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  gtp::fuzz::CheckTokenizer(gtp::data::HfTokenizer::FromString(json));
  return 0;
}
