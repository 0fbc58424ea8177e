// data/internal/corpus_text.h — the hand-written documents of the embedded
// corpus (data/corpus_text.cc). Internal to data/: use corpus.h.
#pragma once

#include <cstddef>

namespace gtp::data_internal {

extern const char* const kHandwrittenDocuments[];
extern const size_t kNumHandwrittenDocuments;

}  // namespace gtp::data_internal
