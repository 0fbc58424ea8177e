// comm/store/liveness.h — which ranks of a world are still alive, through the
// rendezvous store (used by the NCCL backend, which cannot tell).
//
// NCCL reports a dead peer as a transport error or a timeout, never by name.
// Each rank's Liveness adds one to its counter "<prefix>/beat/<rank>" in the
// rendezvous store every `period` from a thread of its own; after a failure,
// Diagnose() reads every other rank's counter, waits 3 periods, reads them
// again, and names the ranks whose counter did not move — or rank 0, the
// store's host, when the store stops answering.
//
//   auto live = Liveness::Start(store, "gtp/nccl", rank, size, absl::Milliseconds(500));
//   ... on a failure:  absl::StrCat(error, "; ", live->Diagnose())
//
// Thread-safe. Diagnose blocks for about 3 periods (plus the store's
// timeouts when the store is gone).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/store/key_value_store.h"

namespace gtp::comm {

class Liveness {
 public:
  // Starts beating (the first beat before it returns, so a rank that has
  // started is never taken for dead).
  static std::shared_ptr<Liveness> Start(std::shared_ptr<KeyValueStore> store, std::string prefix,
                                         int rank, int size, absl::Duration period);
  ~Liveness();
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // "(world rank 2) is gone (its heartbeat … stopped)" naming every rank
  // that stopped beating, "(world rank 0) is gone or unreachable: the
  // rendezvous store …" when the store does not answer, or "every other
  // rank's heartbeat still runs …" — never empty. The first call does the work; later calls return its answer.
  std::string Diagnose();

 private:
  Liveness(std::shared_ptr<KeyValueStore> store, std::string prefix, int rank, int size,
           absl::Duration period);
  std::string Key(int rank) const;
  void Beat();

  std::shared_ptr<KeyValueStore> store_;
  const std::string prefix_;
  const int rank_, size_;
  const absl::Duration period_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool diagnosed_ ABSL_GUARDED_BY(mu_) = false;
  std::string diagnosis_ ABSL_GUARDED_BY(mu_);
  absl::Mutex diagnose_mu_;  // one diagnosis at a time
  std::thread thread_;
};

}  // namespace gtp::comm
