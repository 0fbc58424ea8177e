// tools/fuzz/tokenizer_checks.h — what every tokenizer fuzz target asks of a
// tokenizer file it was given: a file that loads must encode a fixed
// multilingual text (CJK, emoji with ZWJ, invalid bytes) into ids inside its
// vocabulary and decode them without crashing (Decode may refuse); one that
// does not load must be refused with a message. Aborts otherwise.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/status/statusor.h"

namespace gtp::fuzz {

template <typename Tokenizer>
void CheckTokenizer(const absl::StatusOr<Tokenizer>& tok) {
  if (!tok.ok()) {
    if (tok.status().message().empty()) std::abort();  // a refusal names what is wrong
    return;
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
}

}  // namespace gtp::fuzz
