// tests/gtpfix.h — the GTPFIX1 fixture format that tools/reference/torch_fixture.py
// writes (float64 PyTorch references of a GPT-2-style and a Llama-style model:
// weights, logits, every gradient), read by the tests that compare with it.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gtp::testing {

struct FixtureEntry {
  int dtype = 0;  // 1 f32, 2 f64, 3 i32, 4 text
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  template <typename T>
  std::vector<T> as() const {
    std::vector<T> v(bytes.size() / sizeof(T));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
    return v;
  }
};

struct Fixture {
  std::map<std::string, FixtureEntry> entries;
  std::map<std::string, std::string> meta;  // the "meta" entry's key=value lines
  // meta[k] as a number; a gtest failure (and 0) when it is not one.
  int64_t Int(const std::string& k) const;
  double Real(const std::string& k) const;
};

// NotFound when `path` cannot be opened, DataLoss naming what is malformed.
absl::StatusOr<Fixture> ReadFixture(const std::string& path);

}  // namespace gtp::testing
