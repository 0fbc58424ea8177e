#include "tests/gtpfix.h"

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace gtp::testing {

int64_t Fixture::Int(const std::string& k) const {
  int64_t v = 0;
  EXPECT_TRUE(absl::SimpleAtoi(meta.at(k), &v)) << k;
  return v;
}

double Fixture::Real(const std::string& k) const {
  double v = 0;
  EXPECT_TRUE(absl::SimpleAtod(meta.at(k), &v)) << k;
  return v;
}

absl::StatusOr<Fixture> ReadFixture(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  auto get = [&](void* p, size_t n) { return static_cast<bool>(f.read(static_cast<char*>(p), n)); };
  char magic[8];
  uint32_t count = 0;
  if (!get(magic, 8) || std::memcmp(magic, "GTPFIX1\0", 8) != 0 || !get(&count, 4)) {
    return absl::DataLossError(absl::StrCat(path, ": not a GTPFIX1 file"));
  }
  Fixture fx;
  for (uint32_t i = 0; i < count; ++i) {
    uint16_t len = 0;
    uint8_t dtype = 0, rank = 0;
    if (!get(&len, 2)) return absl::DataLossError(absl::StrCat(path, ": truncated at entry ", i));
    std::string name(len, '\0');
    FixtureEntry e;
    if (!get(name.data(), len) || !get(&dtype, 1) || !get(&rank, 1) || dtype < 1 || dtype > 4) {
      return absl::DataLossError(absl::StrCat(path, ": bad entry ", i));
    }
    e.dtype = dtype;
    e.shape.resize(rank);
    int64_t numel = 1;
    for (auto& d : e.shape) {
      if (!get(&d, 8) || d < 0)
        return absl::DataLossError(absl::StrCat(path, ": bad shape of ", name));
      numel *= d;
    }
    const size_t elem = dtype == 2 ? 8 : dtype == 4 ? 1 : 4;
    e.bytes.resize(numel * elem);
    if (!get(e.bytes.data(), e.bytes.size())) {
      return absl::DataLossError(absl::StrCat(path, ": truncated data of ", name));
    }
    fx.entries[name] = std::move(e);
  }
  auto it = fx.entries.find("meta");
  if (it == fx.entries.end()) return absl::DataLossError(absl::StrCat(path, ": no meta"));
  const std::string text(it->second.bytes.begin(), it->second.bytes.end());
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    fx.meta[kv.first] = kv.second;
  }
  return fx;
}

}  // namespace gtp::testing
