#pragma once
/// Strided, dtype-converting copies and fills: the kernels behind copy_, to(), contiguous(),
/// clone() and fill_(). Both sides may have any strides; dst must not overlap src.

#include "runtime/tensor.h"

namespace kiln {

/// dst[...] = cast(src[...]); src must already have dst's shape (expand it first).
void copyInto(const Tensor &dst, const Tensor &src);
/// dst[...] = value cast to dst's dtype.
void fillInto(const Tensor &dst, const Scalar &value);

/// C++ value conversion with PyTorch's semantics (float -> int truncates; to bool is != 0).
template <typename To, typename From> inline To convertValue(From v) {
  if constexpr (std::is_same_v<To, bool>)
    return static_cast<float>(v) != 0.0f || static_cast<double>(v) != 0.0;
  else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>)
    return To(static_cast<float>(v));
  else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>)
    return static_cast<To>(static_cast<float>(v));
  else
    return static_cast<To>(v);
}

} // namespace kiln
