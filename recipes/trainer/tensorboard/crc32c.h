// recipes/trainer/tensorboard/crc32c.h — CRC-32C (Castagnoli), the checksum
// of TFRecord framing (and of iSCSI, ext4, SSE4.2's crc32 instruction).
//
//   uint32_t c = Crc32c("123456789");       // 0xE3069283
//   uint32_t d = Crc32cExtend(Crc32c("1234"), "56789");  // the same
//   uint32_t m = MaskedCrc32c(bytes);       // as stored in a TFRecord
//
// Reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF,
// one table lookup per byte (ample for a few hundred bytes a step). Pure;
// thread-safe; never fails.
#pragma once

#include <cstdint>
#include <string_view>

namespace gtp::recipes::tensorboard {

// CRC-32C of `data`.
uint32_t Crc32c(std::string_view data);

// The CRC-32C of A+B, given crc = Crc32c(A) and data = B.
uint32_t Crc32cExtend(uint32_t crc, std::string_view data);

// TFRecord's masked form, ((c >> 15) | (c << 17)) + 0xa282ead8 of c = Crc32c(data):
// a CRC stored next to data that itself holds CRCs would otherwise be weak.
uint32_t MaskedCrc32c(std::string_view data);

}  // namespace gtp::recipes::tensorboard
