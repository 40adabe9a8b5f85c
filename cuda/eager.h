#pragma once
/// Eager CUDA ops: every op on CUDA tensors is a one-node graph of the graph IR, compiled through
/// the same pipeline as kiln.compile's graphs (driver/ → loop IR → codegen/cuda) and cached per
/// signature, not a hand-written kernel per op.
///
/// [Note: eager signatures]
/// The graph's text is the cache key. Sizes are duck-sized: 0 and 1 stay literal (they decide
/// broadcasting), every other size becomes a symbol, equal sizes the same symbol (`s0`, `s1`, in
/// order of appearance), so one compile serves every shape with the same pattern. A
/// non-contiguous operand (a transpose, an expand) makes the text carry its concrete sizes and
/// strides instead. Python numbers are scalar inputs (`%a1: float`), not constants, so `x * 0.5`
/// and `x * 0.25` share a program; their value types follow the graph IR's promotion (weak
/// scalars), which is the eager CPU kernels' too.

#include "ir/sym_int.h"
#include "runtime/device_ops.h"
#include "runtime/tensor.h"

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cuda {

/// Runs graph-IR op `op` (an ops.def keyword) with attribute text `attrs` (as inside `{...}`,
/// e.g. `dim = [-1], keepdim = true`; empty for none) on `operands`, which are on `device` (0-d
/// CPU tensors are moved there, as torch allows); returns `results` tensors on `device`. `into`,
/// when given, holds preallocated contiguous results to write instead. Throws kiln::Error
/// (NotImplemented) naming the op when it has no CUDA lowering. This is the runtime's
/// DeviceOpRunner for CUDA (runtime/device_ops.h).
std::vector<Tensor> runEagerOp(std::string_view op, std::span<const DeviceOperand> operands,
                               std::string_view attrs, Device device, int results = 1,
                               std::span<const Tensor> into = {});

/// The graph text runEagerOp compiles for these arguments (golden tests of the signature);
/// `sizes`, when given, receives the value of each size symbol the text names (`s0`).
std::string eagerGraphText(std::string_view op, std::span<const DeviceOperand> operands,
                           std::string_view attrs, Device device, int results = 1,
                           ir::SymbolValues *sizes = nullptr);

/// Eager programs compiled so far in this process (each signature once).
size_t eagerProgramsCompiled();

} // namespace kiln::cuda
