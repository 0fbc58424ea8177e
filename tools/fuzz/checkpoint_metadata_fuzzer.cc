// tools/fuzz/checkpoint_metadata_fuzzer.cc — checkpoint::ReadCheckpointMetadata
// (metadata.pb: the serialised proto::Metadata, its CRC-32 and "GTPM").
//
// Input: one mode byte, then the file. Odd mode: the rest is the proto's
// bytes and the harness appends the right trailer, so the parser and the
// checks after it see every input. Even mode: the rest is metadata.pb as
// is, so the trailer check itself is fuzzed (it must refuse almost all).
#include <zlib.h>

#include <cstdint>
#include <string>

#include "checkpoint/checkpoint.h"
#include "tools/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gtp::fuzz::Input in(data, size);
  const bool fix_trailer = in.Byte() & 1;
  std::string bytes = in.Rest();
  if (fix_trailer) {
    const uint32_t crc = static_cast<uint32_t>(
        ::crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
    bytes += "GTPM";
  }
  const std::string dir = gtp::fuzz::ScratchDir();
  gtp::fuzz::WriteFile(dir + "/metadata.pb", bytes);
  (void)gtp::checkpoint::ReadCheckpointMetadata(dir);
  return 0;
}
