#pragma once
/// Eager scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention).

#include "runtime/tensor.h"

#include <optional>

namespace kiln::ops {

/// softmax(query @ key^T * scale + mask) @ value over the last two dims; the leading (batch,
/// head) dims of query, key and value broadcast. query (..., L, E), key (..., S, E),
/// value (..., S, Ev) -> (..., L, Ev) of query's dtype.
///
/// - attnMask (optional, undefined when absent) broadcasts to (..., L, S): a bool mask keeps
///   the positions that are true; a float mask (float32 or query's dtype) is added to the scores.
/// - isCausal masks with the top-left aligned lower triangle (query i sees keys j <= i).
/// - scale defaults to 1 / sqrt(E). A row whose scores are all -inf gives zeros (torch's safe
///   softmax), NaN scores give NaN.
/// - enableGqa lets key/value have fewer heads (dim -3) than query: query head h uses key head
///   h / (Hq / Hk).
/// - dropoutP > 0 zeroes attention probabilities with that probability (scaling the rest by
///   1 / (1 - dropoutP)), drawing from the default generator like ops::dropout.
///
/// Each (batch, block of query rows) is one task: Q·K^T with a BLAS GEMM, the masked softmax in
/// place, then ·V with a second GEMM. With dropout the probabilities are materialized first.
/// float16/bfloat16 are computed in float32.
Tensor scaledDotProductAttention(const Tensor &query, const Tensor &key, const Tensor &value,
                                 const Tensor &attnMask, double dropoutP, bool isCausal,
                                 std::optional<double> scale, bool enableGqa);

} // namespace kiln::ops
