// tools/fuzz/safetensors_fuzzer.cc — checkpoint::ReadSafeTensors (the 8-byte
// header length, the JSON header, offsets and sizes). Input: the file.
// A file that reads must write and read back to the same tensors.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "checkpoint/safetensors.h"
#include "tools/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = gtp::fuzz::ScratchDir() + "/in.safetensors";
  gtp::fuzz::WriteFile(path, std::string(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<gtp::checkpoint::SafeTensorsFile> f = gtp::checkpoint::ReadSafeTensors(path);
  if (!f.ok()) return 0;
  const std::string again_path = gtp::fuzz::ScratchDir() + "/again.safetensors";
  absl::Status st = gtp::checkpoint::WriteSafeTensors(again_path, *f);
  absl::StatusOr<gtp::checkpoint::SafeTensorsFile> again =
      st.ok() ? gtp::checkpoint::ReadSafeTensors(again_path) : absl::StatusOr<gtp::checkpoint::SafeTensorsFile>(st);
  bool same = again.ok() && again->metadata == f->metadata &&
              again->tensors.size() == f->tensors.size();
  for (auto a = f->tensors.begin(), b = same ? again->tensors.begin() : a; same && a != f->tensors.end();
       ++a, ++b) {
    same = a->first == b->first && a->second.dtype == b->second.dtype &&
           a->second.shape == b->second.shape && a->second.bytes == b->second.bytes;
  }
  if (!same) {
    std::fprintf(stderr, "write + read of a valid file changed it: %s\n",
                 again.ok() ? "different tensors" : std::string(again.status().message()).c_str());
    std::abort();
  }
  return 0;
}
