#include "recipes/trainer/token_dump.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gtp::recipes {
namespace {

std::vector<int32_t> ReadInts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int32_t> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

TEST(TokenDump, AppendsTokensThenTargetsInOrder) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/tokens.bin";
  std::remove(path.c_str());
  {
    TokenDump d(path);
    const int32_t tok1[] = {1, 2}, tgt1[] = {2, 3}, tok2[] = {7, 8}, tgt2[] = {8, 9};
    ASSERT_TRUE(d.Append(tok1, tgt1, 2).ok());
    ASSERT_TRUE(d.Append(tok2, tgt2, 2).ok());
  }
  {
    TokenDump d(path);  // a resumed run continues the file
    const int32_t tok[] = {4}, tgt[] = {5};
    ASSERT_TRUE(d.Append(tok, tgt, 1).ok());
  }
  EXPECT_EQ(ReadInts(path), (std::vector<int32_t>{1, 2, 2, 3, 7, 8, 8, 9, 4, 5}));
}

TEST(TokenDump, EmptyPathIsOff) {
  TokenDump d("");
  const int32_t x[] = {1};
  EXPECT_TRUE(d.Append(x, x, 1).ok());
}

TEST(TokenDump, UnwritablePathIsAnError) {
  TokenDump d("/nonexistent-dir/tokens.bin");
  const int32_t x[] = {1};
  const absl::Status st = d.Append(x, x, 1);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent-dir/tokens.bin"), std::string::npos);
}

// Checked before the run directory exists: a directory or a missing
// directory used to fail only in the first step, leaving the run dir behind.
TEST(TokenDump, CheckPathNamesWhatCannotBeWritten) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  EXPECT_TRUE(TokenDump::CheckPath("").ok());
  EXPECT_TRUE(TokenDump::CheckPath(tmp + "/new_tokens.bin").ok());
  {
    std::ofstream(tmp + "/old_tokens.bin") << "x";  // a resumed run appends
  }
  EXPECT_TRUE(TokenDump::CheckPath(tmp + "/old_tokens.bin").ok());
  for (const auto& [path, why] : std::vector<std::pair<std::string, std::string>>{
           {tmp, "is a directory"},
           {tmp + "/no/such/dir/t.bin", "its directory " + tmp + "/no/such/dir does not exist"},
           {tmp + "/old_tokens.bin/t.bin",
            "its directory " + tmp + "/old_tokens.bin is not a directory"}}) {
    const absl::Status st = TokenDump::CheckPath(path);
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << path;
    EXPECT_EQ(st.message(), "train.dump_tokens " + path + ": " + why +
                                ": give a file in an existing, writable directory (e.g. "
                                "train.dump_tokens=/tmp/tokens.bin)");
  }
  EXPECT_FALSE(std::ifstream(tmp + "/new_tokens.bin").good());  // nothing was created
}

}  // namespace
}  // namespace gtp::recipes
