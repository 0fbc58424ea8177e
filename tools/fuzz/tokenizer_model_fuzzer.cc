// tools/fuzz/tokenizer_model_fuzzer.cc — SentencePiece tokenizer.model files
// (data/tokenizer/sentencepiece_tokenizer.h), an input users bring from
// outside: the bytes as a serialized ModelProto. A file that loads must
// encode a fixed multilingual text into ids inside its vocabulary and decode
// them again without failing; one that does not load must be refused with a
// message. Seeds: four of the models sentencepiece trained for the tests.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/strings/string_view.h"
#include "data/tokenizer/sentencepiece_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view proto(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gtp::data::SentencePieceTokenizer> tok =
      gtp::data::SentencePieceTokenizer::FromString(proto);
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
    (void)tok->Decode(ids);  // may refuse, must not crash
  }
  return 0;
}
