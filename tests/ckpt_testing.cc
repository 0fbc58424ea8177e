#include "tests/ckpt_testing.h"

#include <cstdlib>
#include <filesystem>
#include <map>

#include "checkpoint/checkpoint.h"
#include "core/philox.h"

namespace gtp::testing {

std::string FreshDir(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  std::string p = std::string(d ? d : "/tmp") + "/" + name;
  std::filesystem::remove_all(p);
  return p;
}

::testing::AssertionResult SameGlobalTensors(const std::string& a, const std::string& b, int64_t it) {
  auto ga = checkpoint::ReadAllGlobal(checkpoint::IterationDir(a, it));
  auto gb = checkpoint::ReadAllGlobal(checkpoint::IterationDir(b, it));
  if (!ga.ok()) return ::testing::AssertionFailure() << a << ": " << ga.status();
  if (!gb.ok()) return ::testing::AssertionFailure() << b << ": " << gb.status();
  std::map<std::string, const std::vector<uint8_t>*> want;
  for (const auto& t : *ga) want[t.key] = &t.bytes;
  if (ga->size() != gb->size()) {
    return ::testing::AssertionFailure() << a << " holds " << ga->size() << " tensors, " << b
                                         << " " << gb->size();
  }
  for (const auto& t : *gb) {
    auto w = want.find(t.key);
    if (w == want.end()) return ::testing::AssertionFailure() << b << " has " << t.key << ", " << a << " not";
    if (*w->second != t.bytes) return ::testing::AssertionFailure() << t.key << " differs";
  }
  return ::testing::AssertionSuccess();
}

int32_t StepToken(const std::string& stream, int step, int64_t s, int64_t t, int64_t seq,
                  int64_t vocab) {
  return static_cast<int32_t>(PhiloxRaw(MixKey(KeyFromName(stream), step), s * (seq + 1) + t).v[0] %
                              vocab);
}

void FillStep(const std::string& stream, int step, int64_t first, int64_t vocab, const Tensor& tokens,
              const Tensor& targets) {
  const int64_t B = tokens.dim(0), seq = tokens.dim(1);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      tokens.data<int32_t>()[b * seq + t] = StepToken(stream, step, first + b, t, seq, vocab);
      targets.data<int32_t>()[b * seq + t] = StepToken(stream, step, first + b, t + 1, seq, vocab);
    }
  }
}

}  // namespace gtp::testing
