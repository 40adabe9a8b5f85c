// The shared gather/scatter kernels of the indexing ops (see [Note: restrided operands]).
#include "runtime/error.h"
#include "runtime/loops.h"
#include "runtime/ops/index_impl.h"

#include <cmath>

namespace kiln::ops::detail {

namespace {

template <typename T> void combine(T &acc, T v, ScatterMode mode) {
  switch (mode) {
  case ScatterMode::Assign:
    acc = v;
    break;
  case ScatterMode::Add:
    acc = static_cast<T>(acc + v);
    break;
  case ScatterMode::Multiply:
    acc = static_cast<T>(acc * v);
    break;
  case ScatterMode::Max:
    if constexpr (std::is_floating_point_v<T>)
      acc = (std::isnan(v) || v > acc) ? v : acc;
    else
      acc = v > acc ? v : acc;
    break;
  case ScatterMode::Min:
    if constexpr (std::is_floating_point_v<T>)
      acc = (std::isnan(v) || v < acc) ? v : acc;
    else
      acc = v < acc ? v : acc;
    break;
  }
}

} // namespace

void checkIndexDType(const Tensor &index, const char *op, bool allowInt32) {
  DType t = index.dtype();
  bool ok = t == DType::Int64 || (allowInt32 && t == DType::Int32);
  KILN_CHECK(ok, "{}: expected {} for index, but got {}", op,
             allowInt32 ? "dtype int32 or int64" : "dtype int64", dtypeName(t));
}

Tensor normalizeIndex(const Tensor &index, int64_t size, int64_t dim, bool allowNegative,
                      const char *op, ErrorKind kind) {
  Tensor out = Tensor::empty(index.sizes(), DType::Int64, index.device());
  if (index.numel() == 0)
    return out;
  Tensor ops[2] = {out, index};
  NdLoop loop(index.sizes(), ops);
  const int64_t lo = allowNegative ? -size : 0;
  auto run = [&]<typename I>() {
    loop.run([=](char **p, const int64_t *s, int64_t n) {
      char *o = p[0];
      const char *in = p[1];
      for (int64_t i = 0; i < n; ++i, o += s[0], in += s[1]) {
        int64_t v = *reinterpret_cast<const I *>(in);
        if (v < lo || v >= size)
          fail(kind, "{}: index {} is out of bounds for dimension {} with size {}", op, v, dim,
               size);
        *reinterpret_cast<int64_t *>(o) = v < 0 ? v + size : v;
      }
    });
  };
  if (index.dtype() == DType::Int32)
    run.template operator()<int32_t>();
  else
    run.template operator()<int64_t>();
  return out;
}

void gatherKernel(const Tensor &out, const Tensor &src, const Tensor &idx, int64_t mult) {
  if (out.numel() == 0)
    return;
  Tensor ops[3] = {out, src, idx};
  NdLoop loop(out.sizes(), ops);
  dispatchBySize(out.itemsize(), [&]<typename U>() {
    const int64_t step = mult * static_cast<int64_t>(sizeof(U));
    loop.run([step](char **p, const int64_t *s, int64_t n) {
      char *o = p[0];
      const char *from = p[1], *ix = p[2];
      for (int64_t i = 0; i < n; ++i, o += s[0], from += s[1], ix += s[2])
        *reinterpret_cast<U *>(o) =
            *reinterpret_cast<const U *>(from + *reinterpret_cast<const int64_t *>(ix) * step);
    });
  });
}

void scatterKernel(const Tensor &dst, const Tensor &src, const Tensor &idx, int64_t mult,
                   ScatterMode mode) {
  if (dst.numel() == 0)
    return;
  Tensor ops[3] = {dst, src, idx};
  NdLoop loop(dst.sizes(), ops);
  if (mode == ScatterMode::Assign) {
    dispatchBySize(dst.itemsize(), [&]<typename U>() {
      const int64_t step = mult * static_cast<int64_t>(sizeof(U));
      loop.run([step](char **p, const int64_t *s, int64_t n) {
        char *to = p[0];
        const char *from = p[1], *ix = p[2];
        for (int64_t i = 0; i < n; ++i, to += s[0], from += s[1], ix += s[2])
          *reinterpret_cast<U *>(to + *reinterpret_cast<const int64_t *>(ix) * step) =
              *reinterpret_cast<const U *>(from);
      });
    });
    return;
  }
  KILN_CHECK(!isReducedFloat(dst.dtype()), "scatter: reduced floats must be widened first");
  dispatchCompute(dst.dtype(), [&]<typename T>() {
    const int64_t step = mult * static_cast<int64_t>(sizeof(T));
    loop.runSerial([step, mode](char **p, const int64_t *s, int64_t n) {
      char *to = p[0];
      const char *from = p[1], *ix = p[2];
      for (int64_t i = 0; i < n; ++i, to += s[0], from += s[1], ix += s[2])
        combine(*reinterpret_cast<T *>(to + *reinterpret_cast<const int64_t *>(ix) * step),
                *reinterpret_cast<const T *>(from), mode);
    });
  });
}

ScatterMode scatterModeOf(const std::string &reduce, const char *op) {
  if (reduce.empty())
    return ScatterMode::Assign;
  if (reduce == "add" || reduce == "sum")
    return ScatterMode::Add;
  if (reduce == "multiply" || reduce == "prod")
    return ScatterMode::Multiply;
  if (reduce == "amax")
    return ScatterMode::Max;
  if (reduce == "amin")
    return ScatterMode::Min;
  fail(ErrorKind::Runtime,
       "{}: reduce argument must be either add or multiply (or sum, prod, "
       "mean, amax, amin for scatter_reduce), got '{}'",
       op, reduce);
}

} // namespace kiln::ops::detail
