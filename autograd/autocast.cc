#include "autograd/autocast.h"

#include "autograd/ops.h"

#include <array>
#include <string>
#include <unordered_map>

namespace kiln::autograd::autocast {
namespace {

thread_local std::array<Region, 2> regions{Region{false, DType::BFloat16},
                                           Region{false, DType::Float16}};
thread_local bool enabledAnywhere = false;

size_t slot(DeviceType device) { return device == DeviceType::CUDA ? 1 : 0; }

void refresh() { enabledAnywhere = regions[0].enabled || regions[1].enabled; }

bool isNarrow(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

} // namespace

Region region(DeviceType device) { return regions[slot(device)]; }

void setRegion(DeviceType device, Region r) {
  regions[slot(device)] = r;
  refresh();
}

bool anyEnabled() { return enabledAnywhere; }

Tensor lower(const Tensor &t) {
  if (!enabledAnywhere || !t.defined())
    return t;
  const Region &r = regions[slot(t.device().type)];
  if (!r.enabled || !isFloating(t.dtype()) || t.dtype() == DType::Float64 || t.dtype() == r.dtype)
    return t;
  return autograd::to(t, r.dtype);
}

std::optional<Tensor> lower(const std::optional<Tensor> &t) {
  if (!t)
    return t;
  return lower(*t);
}

Tensor lowerOnCuda(const Tensor &t) {
  if (!enabledAnywhere || !t.defined() || t.device().type != DeviceType::CUDA)
    return t;
  return lower(t);
}

Tensor widen(const Tensor &t) {
  if (!enabledAnywhere || !t.defined() || !isNarrow(t.dtype()) ||
      !regions[slot(t.device().type)].enabled)
    return t;
  return autograd::to(t, DType::Float32);
}

Tensor widenOnCuda(const Tensor &t) {
  if (!enabledAnywhere || !t.defined() || t.device().type != DeviceType::CUDA)
    return t;
  return widen(t);
}

Policy policy(std::string_view keyword) {
  // The op lists of torch's autocast (aten/src/ATen/autocast_mode.cpp) that kiln's ops cover.
  static const std::unordered_map<std::string, Policy> table = {
      {"matmul", Policy::Lower},
      {"mm", Policy::Lower},
      {"bmm", Policy::Lower},
      {"linear", Policy::Lower},
      {"addmm", Policy::Lower},
      {"baddbmm", Policy::Lower},
      {"conv1d", Policy::Lower},
      {"conv2d", Policy::Lower},
      {"conv3d", Policy::Lower},
      {"conv_transpose1d", Policy::Lower},
      {"conv_transpose2d", Policy::Lower},
      {"conv_transpose3d", Policy::Lower},
      {"scaled_dot_product_attention", Policy::Lower},
      {"einsum", Policy::Lower}, // torch's runs as bmm (kiln's casts in kiln/_einsum_grad.py)
      {"mv", Policy::LowerOnCuda},
      {"addmv", Policy::LowerOnCuda},
      {"cross_entropy", Policy::Widen},
      {"nll_loss", Policy::Widen},
      {"mse_loss", Policy::Widen},
      {"l1_loss", Policy::Widen},
      {"smooth_l1_loss", Policy::Widen},
      {"huber_loss", Policy::Widen},
      {"kl_div", Policy::Widen},
      {"binary_cross_entropy", Policy::Widen},
      {"binary_cross_entropy_with_logits", Policy::Widen},
      {"prod", Policy::Widen},
      {"softmax", Policy::WidenOnCuda},
      {"log_softmax", Policy::WidenOnCuda},
      {"layer_norm", Policy::WidenOnCuda},
      {"group_norm", Policy::WidenOnCuda},
  };
  auto it = table.find(std::string(keyword));
  return it == table.end() ? Policy::None : it->second;
}

Suspend::Suspend() : cpu_(regions[0]), cuda_(regions[1]) {
  regions[0].enabled = regions[1].enabled = false;
  refresh();
}

Suspend::~Suspend() {
  regions[0] = cpu_;
  regions[1] = cuda_;
  refresh();
}

} // namespace kiln::autograd::autocast
