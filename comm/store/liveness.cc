#include "comm/store/liveness.h"

#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gtp::comm {

std::shared_ptr<Liveness> Liveness::Start(std::shared_ptr<KeyValueStore> store, std::string prefix,
                                          int rank, int size, absl::Duration period) {
  std::shared_ptr<Liveness> l(new Liveness(std::move(store), std::move(prefix), rank, size, period));
  l->store_->Add(l->Key(rank), 1, period).IgnoreError();  // a missing first beat is diagnosed later
  Liveness* raw = l.get();
  l->thread_ = std::thread([raw] { raw->Beat(); });
  return l;
}

Liveness::Liveness(std::shared_ptr<KeyValueStore> store, std::string prefix, int rank, int size,
                   absl::Duration period)
    : store_(std::move(store)), prefix_(std::move(prefix)), rank_(rank), size_(size), period_(period) {}

Liveness::~Liveness() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::string Liveness::Key(int rank) const { return absl::StrCat(prefix_, "/beat/", rank); }

void Liveness::Beat() {
  absl::MutexLock l(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), period_)) {
    mu_.Unlock();
    // A store that is gone is what Diagnose reports; the beat just goes on.
    store_->Add(Key(rank_), 1, period_).IgnoreError();
    mu_.Lock();
  }
}

std::string Liveness::Diagnose() {
  absl::MutexLock one(&diagnose_mu_);
  {
    absl::MutexLock l(&mu_);
    if (diagnosed_) return diagnosis_;
  }
  auto read = [&](std::map<int, int64_t>* out) -> absl::Status {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      absl::StatusOr<std::string> v = store_->TryGet(Key(r), 2 * period_);
      if (v.status().code() == absl::StatusCode::kNotFound) {
        (*out)[r] = 0;  // never beat
        continue;
      }
      if (!v.ok()) return v.status();
      int64_t n = 0;
      (*out)[r] = absl::SimpleAtoi(*v, &n) ? n : 0;
    }
    return absl::OkStatus();
  };
  std::map<int, int64_t> before, after;
  absl::Status st = read(&before);
  if (st.ok()) {
    absl::SleepFor(3 * period_);
    st = read(&after);
  }
  std::string out;
  if (!st.ok()) {
    out = absl::StrCat("(world rank 0) is gone or unreachable: the rendezvous store it serves does ",
                       "not answer (", st.message(), ")");
  } else {
    std::vector<int> gone;
    for (const auto& [r, n] : before) {
      if (after[r] == n) gone.push_back(r);
    }
    if (gone.empty()) {
      out = "every other rank's heartbeat still runs (no peer is gone; after a timeout: a rank "
            "stuck, or ranks that disagree on the call)";
    } else {
      std::vector<std::string> names;
      for (int r : gone) names.push_back(absl::StrCat("(world rank ", r, ") is gone"));
      out = absl::StrCat(absl::StrJoin(names, ", "), " (its heartbeat in the rendezvous store stopped)");
    }
  }
  absl::MutexLock l(&mu_);
  diagnosed_ = true;
  diagnosis_ = out;
  return out;
}

}  // namespace gtp::comm
