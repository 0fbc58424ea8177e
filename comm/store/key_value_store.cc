#include "comm/store/key_value_store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gtp::comm {

namespace store_internal {
absl::StatusOr<int64_t> AddToValue(std::string* value, int64_t delta, std::string_view key) {
  int64_t v = 0;
  if (!value->empty() && !absl::SimpleAtoi(*value, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: Add on key '", std::string(key), "' whose value is not an integer"));
  }
  v += delta;
  *value = absl::StrCat(v);
  return v;
}
}  // namespace store_internal

absl::Status InMemoryStore::Set(std::string_view key, std::string_view value, absl::Duration) {
  absl::MutexLock l(&mu_);
  data_[std::string(key)] = std::string(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::Get(std::string_view key, absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return data_.count(key) > 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&present), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("store: key '", std::string(key), "' did not appear within ",
                                                    absl::FormatDuration(timeout)));
  }
  return data_.find(key)->second;
}

absl::StatusOr<std::string> InMemoryStore::TryGet(std::string_view key, absl::Duration) {
  absl::MutexLock l(&mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return absl::NotFoundError(absl::StrCat("store: no key '", std::string(key), "'"));
  return it->second;
}

absl::StatusOr<int64_t> InMemoryStore::Add(std::string_view key, int64_t delta, absl::Duration) {
  absl::MutexLock l(&mu_);
  return store_internal::AddToValue(&data_[std::string(key)], delta, key);
}

absl::Status InMemoryStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& k : keys) {
      if (!data_.count(k)) return false;
    }
    return true;
  };
  if (mu_.AwaitWithTimeout(absl::Condition(&all), timeout)) return absl::OkStatus();
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (!data_.count(k)) missing.push_back(absl::StrCat("'", k, "'"));
  }
  return absl::DeadlineExceededError(absl::StrCat("store: key(s) ", absl::StrJoin(missing, ", "),
                                                  " did not appear within ",
                                                  absl::FormatDuration(timeout)));
}

}  // namespace gtp::comm
