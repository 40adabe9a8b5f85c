#include "runtime/device_ops.h"

#include "runtime/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln {

namespace {
DeviceOpRunner runners[2] = {nullptr, nullptr};

std::string_view shortName(DType t) {
  switch (t) {
  case DType::Bool:
    return "b8";
  case DType::UInt8:
    return "u8";
  case DType::Int8:
    return "i8";
  case DType::Int16:
    return "i16";
  case DType::Int32:
    return "i32";
  case DType::Int64:
    return "i64";
  case DType::Float16:
    return "f16";
  case DType::BFloat16:
    return "bf16";
  case DType::Float32:
    return "f32";
  case DType::Float64:
    return "f64";
  }
  return "?";
}
} // namespace

DeviceOperand::DeviceOperand(const Tensor &t) {
  if (t.defined() && t.isWrappedNumber())
    scalar = t.item();
  else
    tensor = t;
}

void registerDeviceOps(DeviceType type, DeviceOpRunner runner) {
  KILN_CHECK(type != DeviceType::CPU, "registerDeviceOps: CPU ops are the runtime's own");
  runners[static_cast<int>(type)] = runner;
}

std::vector<Tensor> runDeviceOp(std::string_view op, std::span<const DeviceOperand> operands,
                                std::string_view attrs, int results, std::span<const Tensor> into) {
  Device device;
  for (const DeviceOperand &o : operands)
    if (o.tensor.defined() && !o.tensor.isCpu()) {
      device = o.tensor.device();
      break;
    }
  KILN_CHECK(device.type != DeviceType::CPU, "runDeviceOp({}): no operand is on a device", op);
  DeviceOpRunner runner = runners[static_cast<int>(device.type)];
  KILN_CHECK(runner, "kiln: '{}' on {}: no ops are registered for that device", op, device.str());
  return runner(op, operands, attrs, device, results, into);
}

Tensor deviceOp(std::string_view op, std::initializer_list<DeviceOperand> operands,
                std::string_view attrs) {
  return runDeviceOp(op, std::span<const DeviceOperand>(operands.begin(), operands.size()), attrs)
      .at(0);
}

std::string dimsAttr(const char *name, const std::optional<Shape> &dims) {
  return dims ? fmt::format("{} = [{}]", name, fmt::join(*dims, ", ")) : std::string();
}

std::string dtypeAttr(const char *name, DType dtype) {
  return fmt::format("{} = {}", name, shortName(dtype));
}

std::string joinAttrs(std::initializer_list<std::string> attrs) {
  std::string out;
  for (const std::string &a : attrs)
    if (!a.empty())
      out += (out.empty() ? "" : ", ") + a;
  return out;
}

} // namespace kiln
