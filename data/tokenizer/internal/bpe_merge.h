// data/tokenizer/internal/bpe_merge.h — the BPE merge step both tokenizers
// run on one pre-token (Gpt2Tokenizer, HfTokenizer): the merge table keyed by
// the pair of token ids, and GPT-2's loop over it.
// Internal to data/tokenizer.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace gtp::data::tokenizer_internal {

// A merge: its rank (lower merges first) and the id of the merged token.
struct BpeMerge {
  int32_t rank;
  int32_t id;
};
// Keyed by BpePairKey(left id, right id).
using BpeMerges = absl::flat_hash_map<uint64_t, BpeMerge>;

inline uint64_t BpePairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// GPT-2's loop, in place: find the lowest-ranked adjacent pair of `word`,
// merge all its occurrences left to right, repeat until no pair has a rank.
void ApplyBpeMerges(const BpeMerges& merges, std::vector<int32_t>* word);

}  // namespace gtp::data::tokenizer_internal
