#include "tools/fuzz/fuzz_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace gtp::fuzz {

namespace {
std::string* g_dir = nullptr;
void RemoveScratch() {
  std::error_code ec;
  std::filesystem::remove_all(*g_dir, ec);
}
}  // namespace

const std::string& ScratchDir() {
  if (g_dir == nullptr) {
    std::string base = "/dev/shm";
    if (::access(base.c_str(), W_OK) != 0) {
      const char* t = std::getenv("TMPDIR");
      base = t != nullptr && *t != '\0' ? t : "/tmp";
    }
    std::string templ = base + "/gtp_fuzz_XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    g_dir = new std::string(templ);
    std::atexit(RemoveScratch);
  }
  return *g_dir;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), bytes.size());
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
}

uint8_t Input::Byte() { return pos_ < size_ ? static_cast<uint8_t>(data_[pos_++]) : 0; }

std::string Input::Part() {
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(Byte()) << (8 * i);
  const size_t take = std::min<size_t>(n, size_ - pos_);
  std::string out(data_ + pos_, take);
  pos_ += take;
  return out;
}

std::string Input::Rest() {
  std::string out(data_ + pos_, size_ - pos_);
  pos_ = size_;
  return out;
}

std::string Frame(const std::string& part) {
  std::string out;
  const uint32_t n = static_cast<uint32_t>(part.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + part;
}

}  // namespace gtp::fuzz
