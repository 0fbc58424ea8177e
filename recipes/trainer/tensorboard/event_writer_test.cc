#include "recipes/trainer/tensorboard/event_writer.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recipes/trainer/tensorboard/crc32c.h"

namespace gtp::recipes::tensorboard {
namespace {

std::string Bytes(std::initializer_list<uint8_t> b) { return std::string(b.begin(), b.end()); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string TmpDir(const std::string& name) {
  const std::string d = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::remove_all(d);
  return d;
}

// Splits a file into its records' payloads, checking the framing and both CRCs.
std::vector<std::string> Records(const std::string& file) {
  std::vector<std::string> out;
  size_t at = 0;
  auto u32 = [&](size_t i) {
    uint32_t v;
    std::memcpy(&v, file.data() + i, 4);
    return v;
  };
  while (at < file.size()) {
    EXPECT_LE(at + 12, file.size());
    uint64_t n;
    std::memcpy(&n, file.data() + at, 8);
    EXPECT_EQ(u32(at + 8), MaskedCrc32c(file.substr(at, 8)));
    EXPECT_LE(at + 16 + n, file.size());
    out.push_back(file.substr(at + 12, n));
    EXPECT_EQ(u32(at + 12 + n), MaskedCrc32c(out.back()));
    at += 16 + n;
  }
  return out;
}

TEST(EncodeScalarEvent, WireFormatByHand) {
  // wall_time 1.5, step 3, one value {tag "a", simple_value 1.0}.
  // clang-format off
  const std::string want = Bytes({
      0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,  // 1: fixed64 1.5
      0x10, 0x03,                                            // 2: varint 3
      0x2a, 0x0a,                                            // 5: Summary, 10 bytes
      0x0a, 0x08,                                            //   1: Value, 8 bytes
      0x0a, 0x01, 'a',                                       //     1: tag "a"
      0x15, 0x00, 0x00, 0x80, 0x3f,                          //     2: fixed32 1.0f
  });
  // clang-format on
  EXPECT_EQ(EncodeScalarEvent(1.5, 3, {{"a", 1.0f}}), want);
}

TEST(EncodeScalarEvent, MultiByteVarintsAndSeveralValues) {
  const std::string e = EncodeScalarEvent(0.0, 300, {{"x", 0.0f}, {"yy", -2.0f}});
  // clang-format off
  const std::string want = Bytes({
      0x09, 0, 0, 0, 0, 0, 0, 0, 0,             // wall_time 0.0
      0x10, 0xac, 0x02,                          // step 300 = 0b10_0101100
      0x2a, 0x15,                                // Summary, 21 bytes
      0x0a, 0x08, 0x0a, 0x01, 'x', 0x15, 0, 0, 0, 0,
      0x0a, 0x09, 0x0a, 0x02, 'y', 'y', 0x15, 0x00, 0x00, 0x00, 0xc0,  // -2.0f = 0xc0000000
  });
  // clang-format on
  EXPECT_EQ(e, want);
}

TEST(EncodeFileVersionEvent, WireFormatByHand) {
  std::string want =
      Bytes({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x10, 0x00, 0x1a, 13});
  want += "brain.Event:2";
  EXPECT_EQ(EncodeFileVersionEvent(1.5), want);
}

TEST(EncodeRecord, ExactBytesOfOneRecord) {
  // Length 23 (u64 LE), masked CRC-32C of those 8 bytes, the payload, masked
  // CRC-32C of the payload; the CRCs computed independently (bitwise, Python).
  // clang-format off
  const std::string want = Bytes({
      0x17, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // length 23
      0xe7, 0xce, 0xf8, 0x1e,                          // masked CRC 0x1ef8cee7
      0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x10, 0x03, 0x2a, 0x0a,
      0x0a, 0x08, 0x0a, 0x01, 0x61, 0x15, 0x00, 0x00, 0x80, 0x3f,  // the event above
      0x59, 0x85, 0x99, 0x81,                          // masked CRC 0x81998559
  });
  // clang-format on
  EXPECT_EQ(EncodeRecord(EncodeScalarEvent(1.5, 3, {{"a", 1.0f}})), want);
}

TEST(EventWriter, WritesVersionThenOneFlushedEventPerCall) {
  const std::string dir = TmpDir("tb") + "/nested";  // made by Open
  absl::StatusOr<EventWriter> w = EventWriter::Open(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string name = std::filesystem::path(w->path()).filename();
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  ASSERT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_EQ(name.substr(name.size() - std::strlen(host) - 1), std::string(".") + host) << name;
  const std::string secs = name.substr(20, name.size() - 20 - std::strlen(host) - 1);
  EXPECT_EQ(secs.find_first_not_of("0123456789"), std::string::npos) << name;
  EXPECT_NEAR(std::stoll(secs), static_cast<long long>(time(nullptr)), 5);

  ASSERT_TRUE(w->WriteScalars(7, {{"train/loss", 2.5f}, {"train/lr", 1e-3f}}).ok());
  // Flushed: readable while the writer is still open.
  std::vector<std::string> r = Records(ReadFile(w->path()));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_NE(r[0].find("brain.Event:2"), std::string::npos);
  // Same bytes as the pure encoder, past the 9-byte wall time.
  EXPECT_EQ(r[1].substr(9),
            EncodeScalarEvent(0, 7, {{"train/loss", 2.5f}, {"train/lr", 1e-3f}}).substr(9));
  ASSERT_TRUE(w->Close().ok());
  EXPECT_TRUE(w->Close().ok());  // idempotent
  const absl::Status late = w->WriteScalars(8, {{"train/loss", 1.f}});
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(late.message().find(w->path()), std::string::npos) << late;
}

TEST(EventWriter, EachOpenIsANewFile) {
  const std::string dir = TmpDir("tb2");
  absl::StatusOr<EventWriter> a = EventWriter::Open(dir);
  absl::StatusOr<EventWriter> b = EventWriter::Open(dir);  // likely the same second
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->path(), b->path());
  ASSERT_TRUE(a->WriteScalars(1, {{"t", 1.f}}).ok());
  EXPECT_EQ(Records(ReadFile(a->path())).size(), 2u);
  EXPECT_EQ(Records(ReadFile(b->path())).size(), 1u);  // not clobbered by a
}

TEST(EventWriter, UncreatableDirectoryIsAnErrorNamingIt) {
  const std::string dir = TmpDir("tb3");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/file") << "x";
  absl::StatusOr<EventWriter> w = EventWriter::Open(dir + "/file/sub");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(dir + "/file/sub"), std::string::npos) << w.status();
}

}  // namespace
}  // namespace gtp::recipes::tensorboard
