// data/internal/permutation.h — a keyed random permutation of [0, n) that
// needs no memory: a 4-round Feistel network over the next power of four,
// with Philox as the round function, and cycle walking back into [0, n).
//
//   RandomPermutation p(n, key);
//   uint64_t j = p(i);     // bijection on [0, n); p(i) for i >= n aborts
//
// Used to shuffle the samples of an epoch (and the document order) without
// materialising an index the size of the dataset. Pure function of (n, key,
// i): thread-safe, non-blocking. Expected cost: fewer than 4 Feistel
// evaluations per call (the domain is < 4n).
#pragma once

#include <cstdint>

#include "core/philox.h"
#include "core/status.h"

namespace gtp::data_internal {

class RandomPermutation {
 public:
  RandomPermutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
    GTP_CHECK(n > 0, "permutation of an empty range");
    int bits = 0;
    while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
    if (bits < 2) bits = 2;
    if (bits & 1) ++bits;
    half_bits_ = bits / 2;
    half_mask_ = (uint64_t{1} << half_bits_) - 1;
  }

  uint64_t size() const { return n_; }

  uint64_t operator()(uint64_t i) const {
    GTP_CHECK(i < n_, "index ", i, " of a permutation of ", n_);
    if (n_ == 1) return 0;
    uint64_t x = Encrypt(i);
    while (x >= n_) x = Encrypt(x);  // cycle walking: stays a bijection on [0, n)
    return x;
  }

 private:
  uint64_t Encrypt(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & half_mask_;
    for (uint32_t round = 0; round < 4; ++round) {
      Philox4 r = PhiloxRaw(key_, right, round);
      uint64_t f = ((static_cast<uint64_t>(r.v[1]) << 32) | r.v[0]) & half_mask_;
      uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    return (left << half_bits_) | right;
  }

  uint64_t n_;
  uint64_t key_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
};

}  // namespace gtp::data_internal
