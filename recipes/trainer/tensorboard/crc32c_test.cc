#include "recipes/trainer/tensorboard/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace gtp::recipes::tensorboard {
namespace {

TEST(Crc32c, KnownAnswers) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // the CRC catalogue's check value
  // RFC 3720 (iSCSI) appendix B.4.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up.push_back(static_cast<char>(i));
    down.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(down), 0x113FDB5Cu);
}

TEST(Crc32c, ExtendEqualsWhole) {
  const std::string s = "The quick brown fox jumps over the lazy dog";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    EXPECT_EQ(Crc32cExtend(Crc32c(s.substr(0, cut)), s.substr(cut)), Crc32c(s)) << cut;
  }
}

TEST(Crc32c, MaskRotatesAndAdds) {
  // ((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xa282ead8, mod 2^32.
  EXPECT_EQ(MaskedCrc32c("123456789"), 0xC78AB0E5u);
}

}  // namespace
}  // namespace gtp::recipes::tensorboard
