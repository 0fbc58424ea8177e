#include "comm/counting.h"

namespace gtp::comm {

ByteCounts ByteCounter::Snapshot() const {
  ByteCounts c;
  for (size_t i = 0; i < c.bytes.size(); ++i) {
    c.bytes[i] = bytes_[i].load(std::memory_order_relaxed);
    c.calls[i] = calls_[i].load(std::memory_order_relaxed);
  }
  return c;
}

void ByteCounter::Reset() {
  for (size_t i = 0; i < bytes_.size(); ++i) {
    bytes_[i].store(0, std::memory_order_relaxed);
    calls_[i].store(0, std::memory_order_relaxed);
  }
}

}  // namespace gtp::comm
