// tools/fuzz/tokenizer_json_fuzzer.cc — Hugging Face tokenizer.json files
// (data/tokenizer/hf_tokenizer.h), an input users bring from outside: the
// bytes as a tokenizer.json. A file that loads must encode a fixed
// multilingual text into ids inside its vocabulary and decode them again
// without failing; one that does not load must be refused with a message.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "data/tokenizer/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gtp::data::HfTokenizer> tok = gtp::data::HfTokenizer::FromString(json);
  if (!tok.ok()) {
    if (tok.status().message().empty()) std::abort();  // a refusal names what is wrong
    return 0;
  }
  static const char* const kTexts[] = {
      "Hello, world! 12345 don't",  "  two  spaces\n\ttab", "日本語のテキスト and ñandú",
      "emoji 🙂👍 and ZWJ 👩‍💻", "\xff\xfe invalid bytes", ""};
  for (const char* text : kTexts) {
    std::vector<int32_t> ids = tok->Encode(text);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok->vocab_size()) std::abort();  // an id outside the vocabulary
    }
    (void)tok->Decode(ids);  // may refuse (an id without text), must not crash
  }
  return 0;
}
