// tools/fuzz/fuzz_util.h — small helpers shared by the fuzz targets: a
// scratch directory per process and splitting one input into parts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gtp::fuzz {

// A directory private to this process (under /dev/shm when it is writable,
// else $TMPDIR or /tmp), made on first use and removed at exit.
const std::string& ScratchDir();

// Writes `bytes` to `path` (replacing it); aborts when it cannot.
void WriteFile(const std::string& path, const std::string& bytes);

// Reads an input front to back.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(reinterpret_cast<const char*>(data)), size_(size) {}
  // The next byte (0 past the end).
  uint8_t Byte();
  // A part of the input: a 4-byte little-endian length, then that many
  // bytes (fewer when the input ends first).
  std::string Part();
  // Everything not consumed yet.
  std::string Rest();

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

// The same framing, for writing seeds: 4-byte little-endian length + bytes.
std::string Frame(const std::string& part);

}  // namespace gtp::fuzz
