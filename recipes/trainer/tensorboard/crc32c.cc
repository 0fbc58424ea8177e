#include "recipes/trainer/tensorboard/crc32c.h"

#include <array>

namespace gtp::recipes::tensorboard {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, std::string_view data) {
  uint32_t c = ~crc;
  for (unsigned char b : data) c = kTable[(c ^ b) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t Crc32c(std::string_view data) { return Crc32cExtend(0, data); }

uint32_t MaskedCrc32c(std::string_view data) {
  const uint32_t c = Crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

}  // namespace gtp::recipes::tensorboard
