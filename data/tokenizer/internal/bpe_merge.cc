#include "data/tokenizer/internal/bpe_merge.h"

#include <climits>

namespace gtp::data::tokenizer_internal {

void ApplyBpeMerges(const BpeMerges& merges, std::vector<int32_t>* word) {
  std::vector<int32_t> next;
  while (word->size() > 1) {
    int32_t best_rank = INT32_MAX, best_id = -1, left = -1, right = -1;
    for (size_t i = 0; i + 1 < word->size(); ++i) {
      auto it = merges.find(BpePairKey((*word)[i], (*word)[i + 1]));
      if (it != merges.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best_id = it->second.id;
        left = (*word)[i];
        right = (*word)[i + 1];
      }
    }
    if (best_id < 0) break;
    next.clear();
    for (size_t i = 0; i < word->size();) {
      if (i + 1 < word->size() && (*word)[i] == left && (*word)[i + 1] == right) {
        next.push_back(best_id);
        i += 2;
      } else {
        next.push_back((*word)[i++]);
      }
    }
    word->swap(next);
  }
}

}  // namespace gtp::data::tokenizer_internal
