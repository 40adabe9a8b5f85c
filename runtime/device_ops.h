#pragma once
/// Device ops: how an eager op reaches a device's implementation.
///
/// The runtime's kernels are CPU code. An op whose operands live on a device (CUDA) hands itself
/// to the runner the device's backend registered (cuda/eager.h: a one-node graph of the graph IR,
/// compiled once per signature), naming itself by its graph-IR op (ir/ops.def keyword) with
/// attributes in the `.kir` text form. Ops without a device path simply touch their operands'
/// memory, which Storage::data() refuses with a message, so nothing reads a device address.

#include "runtime/device.h"
#include "runtime/scalar.h"
#include "runtime/tensor.h"

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

/// An operand of a device op: a tensor, or (when `tensor` is undefined) the number `scalar`. A
/// wrapped Python number (Tensor::wrapScalar) becomes its number.
struct DeviceOperand {
  Tensor tensor;
  Scalar scalar;

  DeviceOperand(const Tensor &t);        // NOLINT: operands are written inline
  DeviceOperand(Scalar s) : scalar(s) {} // NOLINT
};

/// Runs graph-IR op `op` with attribute text `attrs` on `operands` on `device`; returns
/// `results` tensors on it (written into `into` when given).
using DeviceOpRunner = std::vector<Tensor> (*)(std::string_view op,
                                               std::span<const DeviceOperand> operands,
                                               std::string_view attrs, Device device, int results,
                                               std::span<const Tensor> into);

/// Installs the runner of device type `type` (never CPU).
void registerDeviceOps(DeviceType type, DeviceOpRunner runner);

/// Whether any of `ts` is a tensor on a device other than the CPU (wrapped numbers never are):
/// the test every op with a device path makes first.
inline bool onDevice(std::initializer_list<const Tensor *> ts) {
  for (const Tensor *t : ts)
    if (t && t->defined() && !t->isCpu())
      return true;
  return false;
}

/// Runs `op` on the device of the first device tensor of `operands` (see DeviceOpRunner);
/// throws kiln::Error when that device type has no runner.
std::vector<Tensor> runDeviceOp(std::string_view op, std::span<const DeviceOperand> operands,
                                std::string_view attrs = {}, int results = 1,
                                std::span<const Tensor> into = {});
/// The single result of runDeviceOp.
Tensor deviceOp(std::string_view op, std::initializer_list<DeviceOperand> operands,
                std::string_view attrs = {});

/// Attribute text helpers: `dim = [0, -1]` (nullopt: the attribute is left out), `dtype = f32`.
std::string dimsAttr(const char *name, const std::optional<Shape> &dims);
std::string dtypeAttr(const char *name, DType dtype);
/// Joins non-empty attribute texts with ", ".
std::string joinAttrs(std::initializer_list<std::string> attrs);

} // namespace kiln
