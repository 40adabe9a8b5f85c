// A stand-in for libcublas (tests/cpp/cuda_cublas_test.cc loads it through $KILN_CUBLAS): the
// entry points kiln resolves, computing naive column-major GEMMs on host pointers exactly as
// cuBLAS defines them, and rejecting what cuBLAS rejects (leading dimensions below the rows of
// the stored matrix, negative sizes, unknown operations or types) with
// CUBLAS_STATUS_INVALID_VALUE. So the test checks kiln's row-major to column-major mapping
// against eager matmul on the CPU. Calls are counted per entry point.

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>

namespace {

constexpr int kSuccess = 0, kNotInitialized = 1, kInvalidValue = 7, kNotSupported = 15;

struct Handle {
  int magic = 0x6b696c6e;
  void *stream = reinterpret_cast<void *>(1);
};

std::map<std::string, long> &counts() {
  static std::map<std::string, long> c;
  return c;
}
int failNext = 0;

/// Counts `fn` and returns the status a test asked the next call to fail with (else 0).
int enter(const char *fn) {
  ++counts()[fn];
  return std::exchange(failNext, 0);
}

bool valid(const void *h) { return h && static_cast<const Handle *>(h)->magic == 0x6b696c6e; }

float fromBits16(uint16_t bits, bool bf16) {
  if (bf16) {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

uint16_t toBits16(float f, bool bf16) {
  if (bf16) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000)
      return 0x7fc0;
    return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  }
  _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

/// Element access of the types GemmEx takes (cudaDataType_t 0, 1, 2, 14).
double load(const void *p, int type, int64_t i) {
  switch (type) {
  case 0:
    return static_cast<const float *>(p)[i];
  case 1:
    return static_cast<const double *>(p)[i];
  default:
    return fromBits16(static_cast<const uint16_t *>(p)[i], type == 14);
  }
}

void store(void *p, int type, int64_t i, double v) {
  switch (type) {
  case 0:
    static_cast<float *>(p)[i] = static_cast<float>(v);
    return;
  case 1:
    static_cast<double *>(p)[i] = v;
    return;
  default:
    static_cast<uint16_t *>(p)[i] = toBits16(static_cast<float>(v), type == 14);
  }
}

int check(const void *h, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc,
          int batch = 1) {
  if (!valid(h))
    return kNotInitialized;
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1) || m < 0 || n < 0 || k < 0 || batch < 0)
    return kInvalidValue;
  auto atLeast = [](int ld, int rows) { return ld >= (rows > 1 ? rows : 1); };
  if (!atLeast(lda, ta == 0 ? m : k) || !atLeast(ldb, tb == 0 ? k : n) || !atLeast(ldc, m))
    return kInvalidValue;
  return kSuccess;
}

/// C = alpha op(A) op(B) + beta C, column-major, accumulating in `Acc`; C is not read when
/// beta is 0 (cuBLAS's rule, so NaN garbage in C does not leak).
template <typename Acc>
void gemm(int ta, int tb, int m, int n, int k, Acc alpha, const void *a, int aType, int lda,
          const void *b, int bType, int ldb, Acc beta, void *c, int cType, int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      Acc acc = 0;
      for (int l = 0; l < k; ++l) {
        Acc x =
            static_cast<Acc>(load(a, aType, ta == 0 ? i + int64_t(l) * lda : l + int64_t(i) * lda));
        Acc y =
            static_cast<Acc>(load(b, bType, tb == 0 ? l + int64_t(j) * ldb : j + int64_t(l) * ldb));
        acc += x * y;
      }
      Acc v = alpha * acc;
      if (beta != 0)
        v += beta * static_cast<Acc>(load(c, cType, i + int64_t(j) * ldc));
      store(c, cType, i + int64_t(j) * ldc, v);
    }
}

const char *at(const void *p, int type, long long offset) {
  int64_t item = type == 1 ? 8 : type == 0 ? 4 : 2;
  return static_cast<const char *>(p) + offset * item;
}

/// f16/bf16 with CUBLAS_COMPUTE_32F: f32 accumulation, alpha and beta as floats.
int exChecks(int aType, int bType, int cType, int compute) {
  bool half = aType == 2 || aType == 14;
  if (!half || bType != aType || cType != aType)
    return kNotSupported;
  return compute == 68 ? kSuccess : kNotSupported;
}

} // namespace

extern "C" {

int cublasCreate_v2(void **handle) {
  if (int s = enter("cublasCreate_v2"))
    return s;
  *handle = new Handle();
  return kSuccess;
}

int cublasDestroy_v2(void *handle) {
  enter("cublasDestroy_v2");
  if (!valid(handle))
    return kNotInitialized;
  delete static_cast<Handle *>(handle);
  return kSuccess;
}

int cublasSetStream_v2(void *handle, void *stream) {
  enter("cublasSetStream_v2");
  if (!valid(handle))
    return kNotInitialized;
  static_cast<Handle *>(handle)->stream = stream;
  return kSuccess;
}

const char *cublasGetStatusString(int status) {
  return status == kInvalidValue ? "an invalid value was used as an argument" : "fake status";
}

int cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *a,
                   int lda, const float *b, int ldb, const float *beta, float *c, int ldc) {
  if (int s = enter("cublasSgemm_v2"))
    return s;
  if (int s = check(h, ta, tb, m, n, k, lda, ldb, ldc))
    return s;
  gemm<double>(ta, tb, m, n, k, *alpha, a, 0, lda, b, 0, ldb, *beta, c, 0, ldc);
  return kSuccess;
}

int cublasDgemm_v2(void *h, int ta, int tb, int m, int n, int k, const double *alpha,
                   const double *a, int lda, const double *b, int ldb, const double *beta,
                   double *c, int ldc) {
  if (int s = enter("cublasDgemm_v2"))
    return s;
  if (int s = check(h, ta, tb, m, n, k, lda, ldb, ldc))
    return s;
  gemm<double>(ta, tb, m, n, k, *alpha, a, 1, lda, b, 1, ldb, *beta, c, 1, ldc);
  return kSuccess;
}

int cublasSgemmStridedBatched(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
                              const float *a, int lda, long long sa, const float *b, int ldb,
                              long long sb, const float *beta, float *c, int ldc, long long sc,
                              int batch) {
  if (int s = enter("cublasSgemmStridedBatched"))
    return s;
  if (int s = check(h, ta, tb, m, n, k, lda, ldb, ldc, batch))
    return s;
  for (int i = 0; i < batch; ++i)
    gemm<double>(ta, tb, m, n, k, *alpha, a + i * sa, 0, lda, b + i * sb, 0, ldb, *beta, c + i * sc,
                 0, ldc);
  return kSuccess;
}

int cublasDgemmStridedBatched(void *h, int ta, int tb, int m, int n, int k, const double *alpha,
                              const double *a, int lda, long long sa, const double *b, int ldb,
                              long long sb, const double *beta, double *c, int ldc, long long sc,
                              int batch) {
  if (int s = enter("cublasDgemmStridedBatched"))
    return s;
  if (int s = check(h, ta, tb, m, n, k, lda, ldb, ldc, batch))
    return s;
  for (int i = 0; i < batch; ++i)
    gemm<double>(ta, tb, m, n, k, *alpha, a + i * sa, 1, lda, b + i * sb, 1, ldb, *beta, c + i * sc,
                 1, ldc);
  return kSuccess;
}

int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *a,
                 int aType, int lda, const void *b, int bType, int ldb, const void *beta, void *c,
                 int cType, int ldc, int compute, int algo) {
  if (int s = enter("cublasGemmEx"))
    return s;
  if (int s = check(h, ta, tb, m, n, k, lda, ldb, ldc))
    return s;
  if (int s = exChecks(aType, bType, cType, compute); s || algo != -1)
    return s ? s : kInvalidValue;
  gemm<float>(ta, tb, m, n, k, *static_cast<const float *>(alpha), a, aType, lda, b, bType, ldb,
              *static_cast<const float *>(beta), c, cType, ldc);
  return kSuccess;
}

int cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha,
                               const void *a, int aType, int lda, long long sa, const void *b,
                               int bType, int ldb, long long sb, const void *beta, void *c,
                               int cType, int ldc, long long sc, int batch, int compute, int algo) {
  if (int s = enter("cublasGemmStridedBatchedEx"))
    return s;
  if (int s = check(h, ta, tb, m, n, k, lda, ldb, ldc, batch))
    return s;
  if (int s = exChecks(aType, bType, cType, compute); s || algo != -1)
    return s ? s : kInvalidValue;
  for (int i = 0; i < batch; ++i)
    gemm<float>(ta, tb, m, n, k, *static_cast<const float *>(alpha), at(a, aType, i * sa), aType,
                lda, at(b, bType, i * sb), bType, ldb, *static_cast<const float *>(beta),
                const_cast<char *>(at(c, cType, i * sc)), cType, ldc);
  return kSuccess;
}

/// Test hooks: calls of `fn` so far; the status the next call returns; whether `handle` has the
/// default stream.
long fake_cublas_count(const char *fn) {
  auto it = counts().find(fn);
  return it == counts().end() ? 0 : it->second;
}
void fake_cublas_fail_next(int status) { failNext = status; }
int fake_cublas_default_stream(void *handle) {
  return valid(handle) && static_cast<Handle *>(handle)->stream == nullptr;
}

} // extern "C"
