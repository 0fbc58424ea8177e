#include "checkpoint/atomic_file.h"

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gtp::checkpoint {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Dir(const std::string& name) {
  const std::string d = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AtomicFile, CommitReplacesTheFileWhole) {
  const std::string d = Dir("commit");
  ASSERT_TRUE(WriteFileAtomic(d + "/f", "old").ok());
  auto w = AtomicFileWriter::Create(d + "/f");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Append("new ").ok());
  EXPECT_EQ(Slurp(d + "/f"), "old");  // not yet
  ASSERT_TRUE((*w)->Append("bytes").ok());
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_EQ(Slurp(d + "/f"), "new bytes");
  EXPECT_FALSE(fs::exists(d + "/f.tmp"));
  EXPECT_EQ((*w)->Commit().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(AtomicFile, AWriterDroppedBeforeCommitLeavesNothing) {
  const std::string d = Dir("dropped");
  {
    auto w = AtomicFileWriter::Create(d + "/f");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append("partial").ok());
    EXPECT_TRUE(fs::exists(d + "/f.tmp"));
  }
  EXPECT_FALSE(fs::exists(d + "/f.tmp"));
  EXPECT_FALSE(fs::exists(d + "/f"));
}

TEST(AtomicFile, CannotCreateNamesTheFile) {
  auto w = AtomicFileWriter::Create("/nonexistent_dir_gtp/f");
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()),
              HasSubstr("cannot create /nonexistent_dir_gtp/f.tmp: No such file or directory"));
}

// A write that fails halfway (the file-size limit stands in for a full
// disk: write() returns EFBIG once the limit is reached) leaves neither the
// file nor its .tmp, and the error names the file and the reason.
TEST(AtomicFile, AFailedSafeTensorsWriteLeavesNoTmp) {
  const std::string d = Dir("full");
  SafeTensorsFile f;
  SafeTensor e;
  e.dtype = DType::kF32;
  e.shape = Shape({1024, 64});
  e.bytes.assign(1024 * 64 * 4, 7);
  f.tensors["w"] = e;
  // Past the limit write() fails with EFBIG instead of killing the process.
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status st = WriteSafeTensors(d + "/model.safetensors", f);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("cannot write " + d + "/model.safetensors.tmp: File too large"));
  EXPECT_FALSE(fs::exists(d + "/model.safetensors.tmp"));
  EXPECT_FALSE(fs::exists(d + "/model.safetensors"));
  // And the same file writes once there is room, and reads back.
  ASSERT_TRUE(WriteSafeTensors(d + "/model.safetensors", f).ok());
  auto back = ReadSafeTensors(d + "/model.safetensors");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tensors.at("w").bytes, e.bytes);
}

}  // namespace
}  // namespace gtp::checkpoint
