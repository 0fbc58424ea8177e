// core/device.h — where a tensor's memory lives.
#pragma once

#include <string>

namespace gtp {

struct Device {
  enum class Kind { kCPU, kCUDA };
  Kind kind = Kind::kCPU;
  int index = 0;  // CUDA ordinal; 0 for CPU

  static Device Cpu() { return Device{Kind::kCPU, 0}; }
  static Device Cuda(int index = 0) { return Device{Kind::kCUDA, index}; }
  bool is_cpu() const { return kind == Kind::kCPU; }
  bool is_cuda() const { return kind == Kind::kCUDA; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string ToString() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

}  // namespace gtp
