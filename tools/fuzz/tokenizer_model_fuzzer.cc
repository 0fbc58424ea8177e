// tools/fuzz/tokenizer_model_fuzzer.cc — SentencePiece tokenizer.model files
// (data/tokenizer/sentencepiece_tokenizer.h), an input users bring from
// outside: the bytes as a serialized ModelProto. A file that loads must
// encode a fixed multilingual text into ids inside its vocabulary and decode
// them again without failing; one that does not load must be refused with a
// message. Seeds: four of the models sentencepiece trained for the tests.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "data/tokenizer/sentencepiece_tokenizer.h"
#include "tools/fuzz/tokenizer_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view proto(reinterpret_cast<const char*>(data), size);
  gtp::fuzz::CheckTokenizer(gtp::data::SentencePieceTokenizer::FromString(proto));
  return 0;
}
