#pragma once
/// Autocast (torch.autocast): inside an enabled region of a device, the ops that gain from a
/// narrower type (matrix products, convolutions, attention) run in the region's dtype
/// (bfloat16 or float16), and the ops that lose accuracy in it (losses, long products; on CUDA
/// also softmax and the norms) run in float32. The differentiable op wrappers (ops.h) cast their
/// operands on entry through `lower` / `widen`, so the casts are recorded like any op and the
/// gradients come back in each operand's own dtype. State is per thread, as grad mode's.
///
/// `policy` names the same op lists by op-table keyword, for capture (kiln.compile inserts the
/// casts into the graph where a region is active, which eager would make).

#include "runtime/tensor.h"

#include <optional>
#include <string_view>

namespace kiln::autograd::autocast {

struct Region {
  bool enabled = false;
  DType dtype = DType::BFloat16; ///< the narrower type (torch's defaults: bf16 CPU, f16 CUDA)
};

Region region(DeviceType device);
void setRegion(DeviceType device, Region region);

/// Whether a region is enabled on any device: the one test on every op's fast path.
bool anyEnabled();

/// `t` in its device's region dtype when that region is enabled and `t` is a floating tensor of
/// another type except float64 (torch leaves float64 alone); `t` otherwise.
Tensor lower(const Tensor &t);
std::optional<Tensor> lower(const std::optional<Tensor> &t);
/// `lower` on CUDA tensors only (mv and addmv: on torch's CUDA list, not its CPU one).
Tensor lowerOnCuda(const Tensor &t);
/// `t` in float32 when its device's region is enabled and `t` is float16 or bfloat16.
Tensor widen(const Tensor &t);
/// `widen` on CUDA tensors only (softmax, log_softmax and the norms keep the narrow type under
/// CPU autocast, as torch's CPU op lists say).
Tensor widenOnCuda(const Tensor &t);

enum class Policy : uint8_t { None, Lower, LowerOnCuda, Widen, WidenOnCuda };
/// The policy of the op-table op spelled `keyword` (what the wrappers above apply).
Policy policy(std::string_view keyword);

/// Turns every region off for a scope (the backward engine: gradients run in the dtypes the
/// forward recorded, never re-cast).
class Suspend {
public:
  Suspend();
  ~Suspend();
  Suspend(const Suspend &) = delete;
  Suspend &operator=(const Suspend &) = delete;

private:
  Region cpu_, cuda_;
};

} // namespace kiln::autograd::autocast
