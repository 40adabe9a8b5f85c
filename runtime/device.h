#pragma once
/// Device: where a tensor's storage lives. CPU today; CUDA storage arrives with the CUDA backend,
/// which is why every Storage carries its device and every op checks that operands agree.

#include <cstdint>
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  bool operator==(const Device &) const = default;
  std::string str() const {
    return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index);
  }
  /// Parses "cpu", "cuda", "cuda:1"; throws kiln::Error on anything else.
  static Device parse(const std::string &s);
};

} // namespace kiln
