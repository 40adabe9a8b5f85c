#pragma once
/// Strided N-d iteration for eager CPU kernels (a small TensorIterator).
///
/// An NdLoop holds operands of one common shape (outputs first), each with byte strides (0 for a
/// broadcast dim). Dims are reordered so the innermost has the smallest output stride and merged
/// where every operand is contiguous across them, so most loops become one long 1-D run. run()
/// calls `inner(ptrs, strides, n)` for each 1-D run, splitting the work over the thread pool when
/// the tensor is large. cpuKernel turns a scalar lambda into such an inner loop, with a
/// contiguous fast path the compiler vectorizes.

#include "runtime/tensor.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

namespace kiln {

class NdLoop {
public:
  static constexpr int kMaxOperands = 8;

  /// operands[i] viewed with `shape` (already broadcast: use expand() for inputs).
  NdLoop(IntList shape, std::span<const Tensor> operands);

  int numOperands() const { return nops_; }
  int64_t numel() const { return numel_; }

  using InnerFn = void (*)(void *ctx, char **ptrs, const int64_t *strides, int64_t n);

  /// Runs inner over every element; parallel over the flattened index when numel >= 2 * grain.
  template <typename Inner> void run(Inner &&inner, int64_t grain = kElementwiseGrain) const {
    if (numel_ == 0)
      return;
    parallelFor(0, numel_, grain, [&](int64_t b, int64_t e) { runRange(b, e, inner); });
  }
  /// Same, always on the calling thread.
  template <typename Inner> void runSerial(Inner &&inner) const {
    if (numel_ > 0)
      runRange(0, numel_, inner);
  }

private:
  template <typename Inner> void runRange(int64_t begin, int64_t end, Inner &inner) const;

  int nops_ = 0;
  int64_t numel_ = 1;
  Shape shape_; // innermost first
  std::array<char *, kMaxOperands> base_{};
  std::array<Shape, kMaxOperands> strides_; // bytes, innermost first
};

template <typename Inner> void NdLoop::runRange(int64_t begin, int64_t end, Inner &inner) const {
  const int nd = static_cast<int>(shape_.size());
  std::array<char *, kMaxOperands> ptrs, row;
  std::array<int64_t, kMaxOperands> innerStrides{};
  if (nd == 0) {
    ptrs = base_;
    inner(ptrs.data(), innerStrides.data(), int64_t{1});
    return;
  }
  for (int k = 0; k < nops_; ++k)
    innerStrides[k] = strides_[k][0];
  // Decompose `begin` into a multi-index (innermost first).
  Shape idx(nd, 0);
  int64_t rem = begin;
  for (int d = 0; d < nd; ++d) {
    idx[d] = rem % shape_[d];
    rem /= shape_[d];
  }
  // `row` points at the start of the current row (idx[0] = 0); moving to the next row along
  // dim 1 steps it, and only a carry past dim 1 recomputes it (a transposed copy of 32-element
  // rows spent half its time recomputing). `inner` has one call site, so it stays inlined.
  bool fresh = true;
  int64_t pos = begin;
  while (pos < end) {
    if (fresh) {
      for (int k = 0; k < nops_; ++k) {
        char *p = base_[k];
        for (int d = 1; d < nd; ++d)
          p += idx[d] * strides_[k][d];
        row[k] = p;
      }
      fresh = false;
    }
    for (int k = 0; k < nops_; ++k)
      ptrs[k] = row[k] + idx[0] * innerStrides[k];
    int64_t n = std::min(shape_[0] - idx[0], end - pos);
    inner(ptrs.data(), innerStrides.data(), n);
    pos += n;
    idx[0] += n;
    if (idx[0] < shape_[0] || nd == 1)
      continue; // the range ended mid-row, or there is one row
    idx[0] = 0;
    if (++idx[1] < shape_[1]) {
      for (int k = 0; k < nops_; ++k)
        row[k] += strides_[k][1];
      continue;
    }
    for (int d = 1; d + 1 < nd && idx[d] == shape_[d]; ++d) {
      idx[d] = 0;
      ++idx[d + 1];
    }
    fresh = true;
  }
}

namespace detail {
template <typename Out, typename... In, typename F, size_t... I>
inline void contiguousLoopBody(F &f, char **ptrs, int64_t n, std::index_sequence<I...>) {
  Out *out = reinterpret_cast<Out *>(ptrs[0]);
  std::tuple<const In *...> ins{reinterpret_cast<const In *>(ptrs[I + 1])...};
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<Out>(f(std::get<I>(ins)[i]...));
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KILN_AVX512_CLONES 1
/// The float32 loop compiled for AVX-512 (run where the CPU has it): the math-heavy kernels
/// (exp, erf, gelu, sigmoid) take about 0.7x the time of the AVX2 build's loop. Only float
/// kernels get the clone, to bound code size. Each element is computed by the same operations
/// in both copies (FMA contraction is decided before vectorizing), so results are identical.
inline bool cpuHasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
  return has;
}
template <typename Out, typename... In, typename F, size_t... I>
[[gnu::target("avx512f,avx512vl,avx512dq,avx512bw")]] void
contiguousLoopAvx512(F &f, char **ptrs, int64_t n, std::index_sequence<I...> seq) {
  contiguousLoopBody<Out, In...>(f, ptrs, n, seq);
}
#endif

template <typename Out, typename... In, typename F, size_t... I>
inline void contiguousLoop(F &f, char **ptrs, int64_t n, std::index_sequence<I...> seq) {
#ifdef KILN_AVX512_CLONES
  if constexpr (std::is_same_v<Out, float> && (std::is_same_v<In, float> && ...))
    if (n >= 64 && cpuHasAvx512())
      return contiguousLoopAvx512<Out, In...>(f, ptrs, n, seq);
#endif
  contiguousLoopBody<Out, In...>(f, ptrs, n, seq);
}

template <typename Out, typename... In, typename F, size_t... I>
inline void stridedLoop(F &f, char **ptrs, const int64_t *strides, int64_t n,
                        std::index_sequence<I...>) {
  char *p[] = {ptrs[0], ptrs[I + 1]...};
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<Out *>(p[0]) =
        static_cast<Out>(f(*reinterpret_cast<const In *>(p[I + 1])...));
    p[0] += strides[0];
    ((p[I + 1] += strides[I + 1]), ...);
  }
}
} // namespace detail

/// Makes an NdLoop inner loop from `f(In...) -> Out` over typed operands (output first).
/// The contiguous case is a plain indexed loop so the compiler vectorizes it.
template <typename Out, typename... In, typename F> auto makeInner(F f) {
  return [f](char **ptrs, const int64_t *strides, int64_t n) mutable {
    constexpr size_t N = sizeof...(In);
    constexpr int64_t sizes[] = {int64_t(sizeof(Out)), int64_t(sizeof(In))...};
    bool contiguous = true;
    for (size_t k = 0; k <= N; ++k)
      contiguous = contiguous && strides[k] == sizes[k];
    if (contiguous) {
      detail::contiguousLoop<Out, In...>(f, ptrs, n, std::make_index_sequence<N>{});
      return;
    }
    if constexpr (N == 2) {
      // a op scalar: hoist the broadcast operand so the loop still vectorizes.
      using A = std::tuple_element_t<0, std::tuple<In...>>;
      using B = std::tuple_element_t<1, std::tuple<In...>>;
      Out *out = reinterpret_cast<Out *>(ptrs[0]);
      if (strides[0] == sizes[0] && strides[1] == sizes[1] && strides[2] == 0) {
        const A *a = reinterpret_cast<const A *>(ptrs[1]);
        const B b = *reinterpret_cast<const B *>(ptrs[2]);
        for (int64_t i = 0; i < n; ++i)
          out[i] = static_cast<Out>(f(a[i], b));
        return;
      }
      if (strides[0] == sizes[0] && strides[1] == 0 && strides[2] == sizes[2]) {
        const A a = *reinterpret_cast<const A *>(ptrs[1]);
        const B *b = reinterpret_cast<const B *>(ptrs[2]);
        for (int64_t i = 0; i < n; ++i)
          out[i] = static_cast<Out>(f(a, b[i]));
        return;
      }
    }
    detail::stridedLoop<Out, In...>(f, ptrs, strides, n, std::make_index_sequence<N>{});
  };
}

/// Runs out[i] = f(ins[i]...) over an output and inputs already of the kernel's C++ types and of
/// the output's shape (expanded views are fine).
template <typename Out, typename... In, typename F>
void cpuKernel(const Tensor &out, std::span<const Tensor> ins, F f) {
  std::array<Tensor, sizeof...(In) + 1> ops;
  ops[0] = out;
  for (size_t i = 0; i < ins.size(); ++i)
    ops[i + 1] = ins[i];
  NdLoop loop(out.sizes(), ops);
  loop.run(makeInner<Out, In...>(f));
}

/// The type a storage type is computed in: float for float16 and bfloat16, else itself.
template <typename T>
using OpMath = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

namespace detail {
/// Elements cpuKernelWidened converts per block (its float buffers stay in L1).
inline constexpr int64_t kWidenBlock = 256;
template <typename T> inline constexpr bool kNarrowFloat = !std::is_same_v<OpMath<T>, T>;

/// float16 <-> float over n contiguous values, vectorized with F16C (half_convert.cc).
void widenHalves(const Half *src, float *dst, int64_t n);
void narrowToHalves(const float *src, Half *dst, int64_t n);

/// dst[i] = the i-th element at p (byte stride `stride`) in its compute type.
template <typename S>
inline void loadBlock(const char *p, int64_t stride, int64_t m, OpMath<S> *dst) {
  if constexpr (std::is_same_v<S, Half>)
    if (stride == int64_t(sizeof(S)))
      return widenHalves(reinterpret_cast<const Half *>(p), dst, m);
  if (stride == int64_t(sizeof(S))) {
    const S *s = reinterpret_cast<const S *>(p);
    for (int64_t i = 0; i < m; ++i)
      dst[i] = static_cast<OpMath<S>>(s[i]);
  } else {
    for (int64_t i = 0; i < m; ++i)
      dst[i] = static_cast<OpMath<S>>(*reinterpret_cast<const S *>(p + i * stride));
  }
}

template <typename Out, typename R>
inline void storeBlock(char *p, int64_t stride, int64_t m, const R *src) {
  if constexpr (std::is_same_v<Out, Half> && std::is_same_v<R, float>)
    if (stride == int64_t(sizeof(Out)))
      return narrowToHalves(src, reinterpret_cast<Half *>(p), m);
  if (stride == int64_t(sizeof(Out))) {
    Out *o = reinterpret_cast<Out *>(p);
    for (int64_t i = 0; i < m; ++i)
      o[i] = static_cast<Out>(src[i]);
  } else {
    for (int64_t i = 0; i < m; ++i)
      *reinterpret_cast<Out *>(p + i * stride) = static_cast<Out>(src[i]);
  }
}
} // namespace detail

/// Runs out[i] = f(ins[i]...) like cpuKernel, with f called on the operands' compute types
/// (OpMath: float for float16/bfloat16 storage) and its result stored as Out. 16-bit operands
/// are converted a block at a time into float buffers, f runs over the buffers, and the results
/// are converted back. Converting per element instead lets GCC see through the widening: it
/// narrows `x != x` or `x + y` of widened halves back to _Float16 operations, which are libgcc
/// calls without AVX512-FP16 (float16 exp was 40x slower than bfloat16's), and the loop stays
/// scalar. The block loops vectorize (vcvtph2ps / vcvtps2ph with F16C).
template <typename Out, typename... In, typename F>
void cpuKernelWidened(const Tensor &out, std::span<const Tensor> ins, F f) {
  if constexpr (!detail::kNarrowFloat<Out> && !(detail::kNarrowFloat<In> || ...)) {
    cpuKernel<Out, In...>(out, ins, [f](In... x) -> Out { return static_cast<Out>(f(x...)); });
  } else {
    constexpr size_t N = sizeof...(In);
    using R = decltype(f(std::declval<OpMath<In>>()...));
    std::array<Tensor, N + 1> ops;
    ops[0] = out;
    for (size_t i = 0; i < ins.size(); ++i)
      ops[i + 1] = ins[i];
    NdLoop loop(out.sizes(), ops);
    loop.run([f](char **ptrs, const int64_t *strides, int64_t n) {
      std::tuple<std::array<OpMath<In>, detail::kWidenBlock>...> bufs;
      std::array<R, detail::kWidenBlock> results;
      for (int64_t i0 = 0; i0 < n; i0 += detail::kWidenBlock) {
        const int64_t m = std::min(detail::kWidenBlock, n - i0);
        [&]<size_t... I>(std::index_sequence<I...>) {
          (detail::loadBlock<std::tuple_element_t<I, std::tuple<In...>>>(
               ptrs[I + 1] + i0 * strides[I + 1], strides[I + 1], m, std::get<I>(bufs).data()),
           ...);
          // The float loop, with its AVX-512 clone where the CPU has one.
          char *block[] = {reinterpret_cast<char *>(results.data()),
                           reinterpret_cast<char *>(std::get<I>(bufs).data())...};
          detail::contiguousLoop<R, OpMath<In>...>(f, block, m, std::make_index_sequence<N>{});
        }(std::make_index_sequence<N>{});
        detail::storeBlock<Out>(ptrs[0] + i0 * strides[0], strides[0], m, results.data());
      }
    });
  }
}

} // namespace kiln
