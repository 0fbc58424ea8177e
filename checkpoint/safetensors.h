// checkpoint/safetensors.h — read and write the safetensors format
// (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets: [begin, end]},
// "__metadata__": {string: string}}, then the raw little-endian tensor bytes
// (offsets relative to the end of the header).
//
// All functions return Status for I/O and format errors, naming the file and
// the offending entry. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/status.h"

namespace gtp::checkpoint {

struct SafeTensor {
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<uint8_t> bytes;  // numel · SizeOf(dtype)

  // Typed view; aborts when T does not match dtype.
  template <typename T>
  const T* data() const {
    GTP_CHECK(DTypeOf<T>::value == dtype, "safetensor is ", DTypeName(dtype));
    return reinterpret_cast<const T*>(bytes.data());
  }
};

struct SafeTensorsFile {
  std::map<std::string, SafeTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads and validates a whole file (offsets in range, contiguous, sizes
// consistent with dtype and shape). Supported dtypes: F32, BF16, F16, I32,
// I64, U8, F8_E4M3, F8_E5M2.
absl::StatusOr<SafeTensorsFile> ReadSafeTensors(const std::string& path);

// Writes `file` (tensors in name order) whole or not at all (AtomicFileWriter:
// a failed write leaves no file and no .tmp).
absl::Status WriteSafeTensors(const std::string& path, const SafeTensorsFile& file);

// safetensors dtype string ("F32", "BF16", ...) of a DType.
const char* SafeTensorsDType(DType t);

}  // namespace gtp::checkpoint
