#pragma once
/// Extern nodes on the device: the GEMM externs of the extern contract (passes/lower/README.md)
/// through cuBLAS (cublas.h), so a program on a GPU does not copy their operands to the host
/// and back.
///
/// | op | inputs | computed as |
/// | --- | --- | --- |
/// | `mm` | a [m, k], b [k, n] | one GEMM |
/// | `bmm` | a [B, m, k], b [B, k, n] | one strided batched GEMM |
/// | `matmul` | a, b (`transpose_a`/`transpose_b`: the operand's last two dims swapped) |
/// torch.matmul: 1-d operands as a row / column, batch dims broadcast | | `linear` | x [..., k],
/// weight [n, k][, bias [n]] | x @ weight^T; a bias is first broadcast into the output by a rank-1
/// GEMM (ones[m] ⊗ bias), then the product is added with beta = 1 |
///
/// [Note: GEMMs on cuBLAS]
/// cuBLAS is column-major and kiln's tensors are strided row-major, so each product
/// C[m, n] = A[m, k] @ B[k, n] runs as C^T = B^T @ A^T: a row-major matrix with unit column
/// stride *is* its transpose in column-major order with the row stride as leading dimension, and
/// a matrix with unit row stride (a transposed view) is read with CUBLAS_OP_T. Batch dims of
/// size 1 are dropped, a batch dim an operand broadcasts gets batch stride 0, a batch dim B does
/// not have and A and C step over by whole matrices is folded into m (linear and
/// matmul([.., m, k], [k, n]) are one GEMM), adjacent batch dims that step uniformly are merged,
/// and the innermost remaining one becomes the strided batch (one cuBLAS call per index of the
/// others). float32 and float64 use S/Dgemm; float16 and bfloat16 use GemmEx with float32
/// accumulation, rounded once on store as kiln's eager kernels do. k = 0 writes zeros.
///
/// Every call runs on the device's default stream, after the work queued before it, with one
/// cuBLAS handle per device (created once, never destroyed: it belongs to the primary context,
/// which lives as long as the process); a driver device's primary context is made current first.

#include "codegen/cuda/device.h"
#include "ir/attribute.h"
#include "runtime/dtype.h"

#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::codegen::cuda {

/// A tensor in device memory: `address` of element 0, strides in elements.
struct DeviceTensor {
  uint64_t address = 0;
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes, strides;
};

/// Computes one extern node on `device` into preallocated `outputs` (one per output buffer,
/// laid out as given), reading `inputs`; may allocate workspace through device.allocate().
using DeviceExternFn =
    std::function<void(CudaDevice &device, std::span<const DeviceTensor> inputs,
                       std::span<const DeviceTensor> outputs, const ir::Attributes &attrs)>;

/// Thrown by a DeviceExternFn that cannot run this particular call on the device, before it
/// queues or writes anything: an operand whose matrices have no unit stride (cuBLAS needs one),
/// mixed or non-floating dtypes (the eager kernel then reports torch's error or computes
/// integers), a bias that is not [n], a size or leading dimension past cuBLAS's 32-bit ints.
/// The caller catches it and runs the extern on the host instead. Malformed calls (operand
/// counts, ranks, shapes that disagree with the output) throw kiln::Error, as the host path
/// would.
class DeviceExternDeclined : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The device implementation of extern `op`, or null when `op` has none here (the caller then
/// runs it on the host) or cuBLAS is unavailable (`reason` set when non-null).
const DeviceExternFn *findDeviceExtern(std::string_view op, std::string *reason = nullptr);

} // namespace kiln::codegen::cuda
