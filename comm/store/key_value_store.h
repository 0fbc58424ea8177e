// comm/store/key_value_store.h — the rendezvous store interface.
//
// Ranks meet at a key-value store to exchange what they need to connect (the
// NCCL unique id, UCX worker addresses, sub-group ids). The shape follows
// XLA's KeyValueStoreInterface: a pure interface whose every method says how
// it blocks and times out. Implementations: TcpStoreClient (comm/store/
// tcp_store.h) for processes, InMemoryStore (below) for threads of one
// process.
//
// Keys and values are arbitrary byte strings. Errors: DeadlineExceeded when a
// wait runs out (naming the key), Unavailable when the store cannot be
// reached, InvalidArgument for Add on a value that is not an integer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gtp::comm {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  // Sets `key` to `value` (overwriting). Blocks at most `timeout` for the
  // store to acknowledge. Thread-safe.
  virtual absl::Status Set(std::string_view key, std::string_view value,
                           absl::Duration timeout) = 0;
  // Blocks until `key` exists and returns its value; DeadlineExceeded after
  // `timeout`. Thread-safe.
  virtual absl::StatusOr<std::string> Get(std::string_view key, absl::Duration timeout) = 0;
  // Returns the value or NotFound without waiting for the key (it still waits
  // up to `timeout` for the store to answer). Thread-safe.
  virtual absl::StatusOr<std::string> TryGet(std::string_view key, absl::Duration timeout) = 0;
  // Atomically adds `delta` to the integer stored at `key` (absent = 0) and
  // returns the new value. Blocks at most `timeout`. Thread-safe.
  virtual absl::StatusOr<int64_t> Add(std::string_view key, int64_t delta,
                                      absl::Duration timeout) = 0;
  // Blocks until every key in `keys` exists; DeadlineExceeded naming the
  // missing keys after `timeout`. Thread-safe.
  virtual absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) = 0;
};

// A store in this process's memory, for ranks that are threads. Thread-safe.
class InMemoryStore : public KeyValueStore {
 public:
  absl::Status Set(std::string_view key, std::string_view value, absl::Duration timeout) override;
  absl::StatusOr<std::string> Get(std::string_view key, absl::Duration timeout) override;
  absl::StatusOr<std::string> TryGet(std::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(std::string_view key, int64_t delta, absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string, std::less<>> data_ ABSL_GUARDED_BY(mu_);
};

namespace store_internal {
// Shared by the implementations: the Add arithmetic on a stored value.
absl::StatusOr<int64_t> AddToValue(std::string* value, int64_t delta, std::string_view key);
}  // namespace store_internal

}  // namespace gtp::comm
