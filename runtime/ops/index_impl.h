#pragma once
/// Internal kernels shared by the indexing ops: index validation and the two strided
/// "offset" kernels every gather-like and scatter-like op reduces to. Not part of the op API.
///
/// [Note: restrided operands]
/// A gather along an indexed dim is run as a plain elementwise loop over the output's shape: the
/// source is viewed with the output's sizes and stride 0 on the indexed dims ("restrided"), and
/// each element adds idx * mult elements to its source pointer. Scatters are the mirror image
/// with the destination restrided. So one NdLoop handles any strides, broadcasting and threads.

#include "runtime/error.h"
#include "runtime/tensor.h"

#include <cstdint>
#include <string>

namespace kiln::ops::detail {

/// Checks that index has an integer dtype accepted by `op` (int64, and int32 when allowInt32).
void checkIndexDType(const Tensor &index, const char *op, bool allowInt32);

/// A contiguous int64 copy of `index` with every value checked against a dim of `size`;
/// negatives are wrapped when allowNegative, else rejected. Errors name op, index, dim and size.
/// kind is the error's kind: torch raises IndexError from indexing, RuntimeError from gather.
Tensor normalizeIndex(const Tensor &index, int64_t size, int64_t dim, bool allowNegative,
                      const char *op, ErrorKind kind = ErrorKind::Index);

/// out[i] = src[i + idx[i] * mult] for every element i of out's shape. src is restrided (see
/// the note), idx is an int64 tensor expanded to out's shape, mult is in elements.
/// out and src share a dtype.
void gatherKernel(const Tensor &out, const Tensor &src, const Tensor &idx, int64_t mult);

enum class ScatterMode { Assign, Add, Multiply, Max, Min };

/// dst[i + idx[i] * mult] (op)= src[i]: the mirror of gatherKernel. dst is restrided, src is of
/// dst's shape and dtype. Assign runs in parallel (duplicates: one of the writes wins); the
/// reducing modes run serially so that duplicate indices combine deterministically. Reduced
/// floats must be widened by the caller (compute on a float32 copy, then copy back).
void scatterKernel(const Tensor &dst, const Tensor &src, const Tensor &idx, int64_t mult,
                   ScatterMode mode);

/// The ScatterMode for torch's reduce names ("", "add", "multiply", "sum", "prod", "amax",
/// "amin"); throws naming op for anything else.
ScatterMode scatterModeOf(const std::string &reduce, const char *op);

} // namespace kiln::ops::detail
