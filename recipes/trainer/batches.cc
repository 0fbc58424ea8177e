#include "recipes/trainer/batches.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::recipes {

BatchStager::BatchStager(const proto::Recipe& r, const kernels::Exec& exec,
                         const data::GptDataset* train, const std::string& dump_tokens)
    : r_(r), exec_(exec), train_(train), dump_(dump_tokens) {}

absl::StatusOr<std::pair<Tensor, Tensor>> BatchStager::Batch(
    const data::GptDataset& ds, const std::vector<uint64_t>& samples,
    const std::pair<Tensor, Tensor>* dst) {
  const int64_t B = static_cast<int64_t>(samples.size()), T = r_.model().seq_len();
  Staging& slot = staging_slots_[next_slot_];
  next_slot_ = (next_slot_ + 1) % 2;
  if (!slot.tok.defined() || slot.tok.dim(0) != B) {
    Allocator& a = exec_.is_cuda() ? static_cast<Allocator&>(pinned_) : staging_;
    slot.tok = Tensor::Empty({B, T}, DType::kI32, a);
    slot.tgt = Tensor::Empty({B, T}, DType::kI32, a);
  }
  if (slot.copied) GTP_RETURN_IF_ERROR(slot.copied->Synchronize());
  host_tok_ = slot.tok;
  host_tgt_ = slot.tgt;
  GTP_RETURN_IF_ERROR(ds.CheckSource());
  ds.GetBatch(samples, host_tok_.data<int32_t>(), host_tgt_.data<int32_t>());
  GTP_RETURN_IF_ERROR(CheckTokenIds(ds, samples, T));
  if (&ds == train_) {
    GTP_RETURN_IF_ERROR(dump_.Append(host_tok_.data<int32_t>(), host_tgt_.data<int32_t>(), B * T));
  }
  if (!exec_.is_cuda()) return std::make_pair(host_tok_, host_tgt_);
  Tensor tok = dst ? dst->first : exec_.Empty({B, T}, DType::kI32);
  Tensor tgt = dst ? dst->second : exec_.Empty({B, T}, DType::kI32);
  GTP_RETURN_IF_ERROR(Copy(host_tok_, tok, exec_.stream, /*sync=*/false));
  GTP_RETURN_IF_ERROR(Copy(host_tgt_, tgt, exec_.stream, /*sync=*/false));
  if (!slot.copied) {
    GTP_ASSIGN_OR_RETURN(slot.copied, Event::Create());
  }
  slot.copied->Record(exec_.stream);
  return std::make_pair(tok, tgt);
}

absl::Status BatchStager::CheckTokenIds(const data::GptDataset& ds,
                                        const std::vector<uint64_t>& samples, int64_t T) const {
  // Token ids index the embedding and the softmax: one outside the
  // vocabulary used to read a zero row and train on a wrong target, silently.
  const int64_t vocab = r_.model().vocab_size(), n = static_cast<int64_t>(samples.size()) * T;
  const int32_t* tok = host_tok_.data<int32_t>();
  const int32_t* tgt = host_tgt_.data<int32_t>();
  int64_t bad = -1, worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (const int64_t id : {static_cast<int64_t>(tok[i]), static_cast<int64_t>(tgt[i])}) {
      if (id == -1 && tgt[i] == id) continue;  // an ignored target
      if (id < 0 || id >= vocab) {
        if (bad < 0) bad = i;
        worst = std::max(worst, id);
      }
    }
  }
  if (bad < 0) return absl::OkStatus();
  const int64_t id = tok[bad] < 0 || tok[bad] >= vocab ? tok[bad] : tgt[bad];
  return absl::InvalidArgumentError(absl::StrCat(
      "data: token id ", id, " in ", &ds == train_ ? "training" : "validation", " sample ",
      samples[bad / T], " (position ", bad % T, ") is outside model.vocab_size = ", vocab,
      worst >= vocab ? absl::StrCat(": the data was tokenized for a larger vocabulary; set "
                                    "model.vocab_size to at least ", worst + 1,
                                    " or tokenize with this model's tokenizer")
                     : std::string(": token ids must be >= 0")));
}

}  // namespace gtp::recipes
