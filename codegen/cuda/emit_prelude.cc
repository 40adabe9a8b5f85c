// The device helpers every emitted module starts with: vector accesses, float16/bfloat16
// conversions, wrapping integer arithmetic, Python division, NaN-propagating max/min, and the
// reduction accumulators with their warp and block merges. Plain CUDA C++17 with no #include:
// NVRTC compiles it without the toolkit's headers (the nvidia-cuda-nvrtc wheel ships none). It
// also compiles as host C++ under host_emulator.cc's shims (the one #ifdef __CUDA_ARCH__).

#include "codegen/cuda/emit.h"

namespace kiln::codegen::cuda {

namespace {

constexpr std::string_view kPrelude = R"cuda(namespace kiln {

// ---- memory -------------------------------------------------------------------------------
template <typename T, int N> struct alignas(sizeof(T) * N) Vec {
  T v[N];
};
template <int N, typename T> __device__ __forceinline__ Vec<T, N> load_vec(const T *p) {
  return *reinterpret_cast<const Vec<T, N> *>(p);
}
template <int N, typename T> __device__ __forceinline__ void store_vec(T *p, const Vec<T, N> &v) {
  *reinterpret_cast<Vec<T, N> *>(p) = v;
}

// ---- float16 / bfloat16 bits <-> float (round to nearest even; NaN stays NaN) ---------------
#ifdef __CUDA_ARCH__
__device__ __forceinline__ float h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short f2h(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
#else // compiled for the host by codegen/cuda/host_emulator.cc, which defines these
__device__ __forceinline__ float h2f(unsigned short h) { return kiln_host_h2f(h); }
__device__ __forceinline__ unsigned short f2h(float f) { return kiln_host_f2h(f); }
#endif
__device__ __forceinline__ float bf2f(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ unsigned short f2bf(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return 0x7fc0; // the quiet NaN of runtime/half.h
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float round_f16(float f) { return h2f(f2h(f)); }
__device__ __forceinline__ float round_bf16(float f) { return bf2f(f2bf(f)); }

__device__ __forceinline__ float inff() { return __uint_as_float(0x7f800000u); }
__device__ __forceinline__ float nanf() { return __uint_as_float(0x7fc00000u); }
__device__ __forceinline__ double inf() { return __longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ double nan() { return __longlong_as_double(0x7ff8000000000000LL); }

/// Float to integer like the interpreter: toward zero; NaN and values outside int64: INT64_MIN.
__device__ __forceinline__ long long f2i(double x) {
  return (x > -9.3e18 && x < 9.2e18) ? (long long)x : (-9223372036854775807LL - 1);
}

// ---- integers: two's complement wrapping through unsigned arithmetic ----------------------
template <typename T> struct Wide {
  typedef unsigned int U;
};
template <> struct Wide<long long> {
  typedef unsigned long long U;
};
template <typename T> __device__ __forceinline__ T add(T a, T b) {
  return (T)((typename Wide<T>::U)a + (typename Wide<T>::U)b);
}
template <typename T> __device__ __forceinline__ T sub(T a, T b) {
  return (T)((typename Wide<T>::U)a - (typename Wide<T>::U)b);
}
template <typename T> __device__ __forceinline__ T mul(T a, T b) {
  return (T)((typename Wide<T>::U)a * (typename Wide<T>::U)b);
}
template <typename T> __device__ __forceinline__ T neg(T a) { return sub(T(0), a); }
template <typename T> __device__ __forceinline__ T abs(T a) { return a < T(0) ? neg(a) : a; }
__device__ __forceinline__ float add(float a, float b) { return a + b; }
__device__ __forceinline__ double add(double a, double b) { return a + b; }
__device__ __forceinline__ float mul(float a, float b) { return a * b; }
__device__ __forceinline__ double mul(double a, double b) { return a * b; }

template <typename T> __device__ __forceinline__ bool negative(T a) { return a < T(0); }
__device__ __forceinline__ bool negative(unsigned char) { return false; }

/// Python floor division and modulo of integers; a zero divisor gives 0 (unspecified).
template <typename T> __device__ __forceinline__ T floordiv(T a, T b) {
  if (b == T(0))
    return T(0);
  if (negative(T(-1)) && b == T(-1))
    return neg(a); // INT_MIN // -1 wraps
  T q = (T)(a / b), r = (T)(a % b);
  return (r != T(0) && negative(r) != negative(b)) ? (T)(q - T(1)) : q;
}
template <typename T> __device__ __forceinline__ T mod(T a, T b) {
  if (b == T(0) || (negative(T(-1)) && b == T(-1)))
    return T(0);
  T r = (T)(a % b);
  return (r != T(0) && negative(r) != negative(b)) ? (T)(r + b) : r;
}
/// Integer power by squaring over 64 bits, wrapped to T; a negative exponent gives 1/a truncated
/// (torch's: 1 for a == 1, +-1 for a == -1, else 0).
template <typename T> __device__ __forceinline__ T pow(T a, T b) {
  if ((long long)b < 0)
    return (long long)a == 1 ? T(1) : (long long)a == -1 ? ((b & 1) ? (T)-1 : T(1)) : T(0);
  unsigned long long r = 1, base = (unsigned long long)(long long)a;
  for (unsigned long long e = (unsigned long long)(long long)b; e != 0; e >>= 1, base *= base)
    if (e & 1)
      r *= base;
  return (T)(long long)r;
}

// ---- index arithmetic (long long, divisors nonzero): Python floordiv and mod ------------------
__device__ __forceinline__ long long idiv(long long a, long long b) {
  long long q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ long long imod(long long a, long long b) {
  long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
__device__ __forceinline__ long long imax(long long a, long long b) { return a < b ? b : a; }
/// An indirect load's position (wrapped when negative positions count from the end); one out of
/// [0, extent) is recorded in `error` as {1, position, extent} and reads element 0 instead.
__device__ __forceinline__ long long checked_position(long long p, long long extent, bool wrap,
                                                      long long *error) {
  long long q = wrap && p < 0 ? p + extent : p;
  if (q >= 0 && q < extent)
    return q;
  error[1] = p;
  error[2] = extent;
  error[0] = 1;
  return 0;
}
__device__ __forceinline__ long long imin(long long a, long long b) { return b < a ? b : a; }
/// The `philox` prim: word (select & 3) of the Philox4x32-10 block at `counter` (sub-block
/// select >> 2) under `key`, as runtime/philox.h computes it on the host.
__device__ __forceinline__ long long philox(long long key, long long counter, long long select) {
  unsigned long long c = (unsigned long long)counter, k = (unsigned long long)key;
  unsigned int c0 = (unsigned int)c, c1 = (unsigned int)(c >> 32);
  unsigned int c2 = (unsigned int)((unsigned long long)select >> 2), c3 = 0u;
  unsigned int k0 = (unsigned int)k, k1 = (unsigned int)(k >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    unsigned int h0 = __umulhi(0xD2511F53u, c0), l0 = 0xD2511F53u * c0;
    unsigned int h1 = __umulhi(0xCD9E8D57u, c2), l1 = 0xCD9E8D57u * c2;
    c0 = h1 ^ c1 ^ k0;
    c1 = l1;
    c2 = h0 ^ c3 ^ k1;
    c3 = l0;
  }
  int w = (int)(select & 3);
  return (long long)(w == 0 ? c0 : w == 1 ? c1 : w == 2 ? c2 : c3);
}

// ---- floats: torch's floor division and Python modulo; max/min propagate NaN ----------------
__device__ __forceinline__ float fmod_(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double fmod_(double a, double b) { return ::fmod(a, b); }
__device__ __forceinline__ float floor_(float a) { return floorf(a); }
__device__ __forceinline__ double floor_(double a) { return ::floor(a); }
__device__ __forceinline__ float copysign_(float a, float b) { return copysignf(a, b); }
__device__ __forceinline__ double copysign_(double a, double b) { return ::copysign(a, b); }
template <typename F> __device__ __forceinline__ F floordiv_f(F a, F b) {
  if (b == F(0))
    return a / b;
  F m = fmod_(a, b);
  F d = (a - m) / b;
  if (m != F(0) && ((b < F(0)) != (m < F(0))))
    d -= F(1);
  if (d == F(0))
    return copysign_(F(0), a / b);
  F f = floor_(d);
  return d - f > F(0.5) ? f + F(1) : f;
}
template <typename F> __device__ __forceinline__ F mod_f(F a, F b) {
  F r = fmod_(a, b);
  return (r != F(0) && ((r < F(0)) != (b < F(0)))) ? r + b : r;
}
template <typename T> __device__ __forceinline__ T max(T a, T b) {
  return (a != a) ? a : (b != b) ? b : (a < b ? b : a);
}
template <typename T> __device__ __forceinline__ T min(T a, T b) {
  return (a != a) ? a : (b != b) ? b : (b < a ? b : a);
}

// ---- reductions --------------------------------------------------------------------------
__device__ __forceinline__ float shfl_down(float v, int d) { return __shfl_down_sync(0xffffffffu, v, d); }
__device__ __forceinline__ double shfl_down(double v, int d) { return __shfl_down_sync(0xffffffffu, v, d); }
__device__ __forceinline__ int shfl_down(int v, int d) { return __shfl_down_sync(0xffffffffu, v, d); }
__device__ __forceinline__ long long shfl_down(long long v, int d) {
  return __shfl_down_sync(0xffffffffu, v, d);
}

// An accumulator A holds a partial result: push(value, flat position) folds in one point,
// merge(other) another accumulator, shfl_down(d) reads lane + d's. Kernels start from an
// explicit identity (the empty reduction's result).
template <typename T> struct Sum {
  T acc;
  __device__ __forceinline__ void push(T v, long long) { acc = add(acc, v); }
  __device__ __forceinline__ void merge(const Sum &o) { acc = add(acc, o.acc); }
  __device__ __forceinline__ Sum shfl_down(int d) const { return Sum{kiln::shfl_down(acc, d)}; }
};
template <typename T> struct Prod {
  T acc;
  __device__ __forceinline__ void push(T v, long long) { acc = mul(acc, v); }
  __device__ __forceinline__ void merge(const Prod &o) { acc = mul(acc, o.acc); }
  __device__ __forceinline__ Prod shfl_down(int d) const { return Prod{kiln::shfl_down(acc, d)}; }
};
template <typename T> struct Max {
  T acc;
  __device__ __forceinline__ void push(T v, long long) { acc = kiln::max(acc, v); }
  __device__ __forceinline__ void merge(const Max &o) { acc = kiln::max(acc, o.acc); }
  __device__ __forceinline__ Max shfl_down(int d) const { return Max{kiln::shfl_down(acc, d)}; }
};
template <typename T> struct Min {
  T acc;
  __device__ __forceinline__ void push(T v, long long) { acc = kiln::min(acc, v); }
  __device__ __forceinline__ void merge(const Min &o) { acc = kiln::min(acc, o.acc); }
  __device__ __forceinline__ Min shfl_down(int d) const { return Min{kiln::shfl_down(acc, d)}; }
};
/// argmax/argmin: the first extreme position; a NaN beats every number; index -1 is empty.
template <typename T, bool IsMax> struct ArgBest {
  T value;
  long long index;
  static __device__ __forceinline__ bool wins(T a, long long ia, T b, long long ib) {
    if (ia < 0 || ib < 0)
      return ib < 0 && ia >= 0;
    bool an = a != a, bn = b != b;
    if (an || bn)
      return an && (!bn || ia < ib);
    return (IsMax ? a > b : a < b) || (a == b && ia < ib);
  }
  __device__ __forceinline__ void push(T v, long long at) {
    if (wins(v, at, value, index)) {
      value = v;
      index = at;
    }
  }
  __device__ __forceinline__ void merge(const ArgBest &o) { push(o.value, o.index); }
  __device__ __forceinline__ ArgBest shfl_down(int d) const {
    return ArgBest{kiln::shfl_down(value, d), kiln::shfl_down(index, d)};
  }
};
template <typename T> using ArgMax = ArgBest<T, true>;
template <typename T> using ArgMin = ArgBest<T, false>;
/// Welford's running mean and m2 (sum of squared deviations); Chan et al.'s pairwise merge.
template <typename T> struct Welford {
  T mean, m2;
  long long count;
  __device__ __forceinline__ void push(T x, long long) {
    count += 1;
    T d = x - mean;
    mean += d / (T)count;
    m2 += d * (x - mean);
  }
  __device__ __forceinline__ void merge(const Welford &o) {
    if (o.count == 0)
      return;
    if (count == 0) {
      *this = o;
      return;
    }
    long long n = count + o.count;
    T d = o.mean - mean, share = (T)o.count / (T)n;
    mean += d * share;
    m2 += o.m2 + d * d * (T)count * share;
    count = n;
  }
  __device__ __forceinline__ Welford shfl_down(int d) const {
    return Welford{kiln::shfl_down(mean, d), kiln::shfl_down(m2, d), kiln::shfl_down(count, d)};
  }
};

template <typename A> __device__ __forceinline__ A warp_reduce(A a) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1)
    a.merge(a.shfl_down(d));
  return a;
}
/// The block's merged accumulator, valid in thread 0. Every thread of the block calls it;
/// blockDim.x is a multiple of 32 (at most 1024). `smem` holds 32 accumulators.
template <typename A> __device__ __forceinline__ A block_reduce(A a, A *smem, const A &identity) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  a = warp_reduce(a);
  if (lane == 0)
    smem[warp] = a;
  __syncthreads();
  if (warp == 0) {
    a = lane < (int)(blockDim.x >> 5) ? smem[lane] : identity;
    a = warp_reduce(a);
  }
  __syncthreads(); // smem is reused by the block's next output
  return a;
}
/// block_reduce, with the result in every thread of the block.
template <typename A>
__device__ __forceinline__ A block_allreduce(A a, A *smem, const A &identity) {
  a = block_reduce(a, smem, identity);
  if (threadIdx.x == 0)
    smem[0] = a;
  __syncthreads();
  a = smem[0];
  __syncthreads(); // smem is reused by the block's next reduction
  return a;
}

} // namespace kiln
)cuda";

} // namespace

std::string_view cudaPrelude() { return kPrelude; }

} // namespace kiln::codegen::cuda
