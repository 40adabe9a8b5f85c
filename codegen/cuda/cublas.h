#pragma once
/// cuBLAS, loaded with dlopen: kiln runs its GEMM externs on the GPU through the vendor library
/// without linking against it, so machines without CUDA still build and run kiln.
///
/// [Note: finding libcublas]
/// Cublas::get() tries, in order, and keeps the first library that loads and exports every
/// function kiln calls:
///   1. `$KILN_CUBLAS`: a library file, or a folder holding one (tests point it at a fake);
///   2. `/usr/local/cuda/lib64` and `/usr/local/cuda/targets/<arch>-linux/lib` (the toolkit);
///   3. the `nvidia-cublas` wheel: `nvidia/cu13/lib` (CUDA 13) or `nvidia/cublas/lib` (CUDA 12)
///      under every folder given to addSearchRoot and `$VIRTUAL_ENV/lib/python3.*/site-packages`;
///   4. the loader's search: `libcublas.so.13`, `libcublas.so.12`, `libcublas.so`.
/// libcublas needs libcublasLt; from a folder, the `libcublasLt.so.*` next to it is loaded first
/// (RTLD_GLOBAL), since the wheel's folder is not on the loader's path. When nothing loads, the
/// reason lists every attempt and why it failed.
///
/// Signatures are declared here from cublas_api.h (the C API of cuBLAS v2 is stable), so kiln
/// builds without the cuBLAS headers.

#include <memory>
#include <string>
#include <vector>

namespace kiln::codegen::cuda {

class SharedLibrary;

struct CublasContextImpl;
using CublasHandle = CublasContextImpl *; ///< cublasHandle_t
using CublasStatus = int;                 ///< cublasStatus_t: 0 is CUBLAS_STATUS_SUCCESS
using CublasStream = struct CuStreamSt *; ///< cudaStream_t, the same object as CUstream

/// cublasOperation_t.
inline constexpr int kCublasOpN = 0;
inline constexpr int kCublasOpT = 1;
/// cudaDataType_t of the element types GemmEx is called with.
inline constexpr int kCudaR32F = 0;
inline constexpr int kCudaR64F = 1;
inline constexpr int kCudaR16F = 2;
inline constexpr int kCudaR16BF = 14;
/// cublasComputeType_t: CUBLAS_COMPUTE_32F (f32 accumulation, no TF32).
inline constexpr int kCublasCompute32F = 68;
/// cublasGemmAlgo_t: CUBLAS_GEMM_DEFAULT.
inline constexpr int kCublasGemmDefault = -1;

/// A loaded libcublas and the functions kiln calls.
class Cublas {
public:
  /// The process-wide library (searched once, see [Note: finding libcublas]); null and `reason`
  /// set (every attempt listed) when none loads.
  static const Cublas *get(std::string *reason = nullptr);
  /// Loads the first of `candidates` (file paths or bare names) that works; null and `reason`
  /// (each candidate and its failure) when none does. Not cached: for tests and explicit paths.
  static std::unique_ptr<Cublas> load(const std::vector<std::string> &candidates,
                                      std::string *reason);
  /// The candidates get() tries, in order.
  static std::vector<std::string> searchCandidates();
  /// Adds a folder that may hold the wheel's `nvidia/...` tree (a site-packages folder). Only
  /// affects a search that has not run yet.
  static void addSearchRoot(const std::string &dir);

  ~Cublas();
  Cublas(const Cublas &) = delete;
  Cublas &operator=(const Cublas &) = delete;

  /// The library file that was loaded.
  const std::string &path() const;
  /// The status's name (cublasGetStatusString when the library has it, else from the table of
  /// cublas_api.h).
  std::string statusName(CublasStatus status) const;
  /// Throws kiln::Error ("kiln: cuBLAS: <what> failed: <status name> (<number>)") unless
  /// `status` is 0.
  void check(CublasStatus status, const char *what) const;

  // The resolved C functions (signatures of cublas_api.h; _v2 entry points where cublas_v2.h
  // maps to them). Matrices are column-major; 64-bit batch strides, 32-bit everything else.
  CublasStatus (*create)(CublasHandle *handle) = nullptr;
  CublasStatus (*destroy)(CublasHandle handle) = nullptr;
  CublasStatus (*setStream)(CublasHandle handle, CublasStream stream) = nullptr;
  CublasStatus (*sgemm)(CublasHandle handle, int transa, int transb, int m, int n, int k,
                        const float *alpha, const float *a, int lda, const float *b, int ldb,
                        const float *beta, float *c, int ldc) = nullptr;
  CublasStatus (*dgemm)(CublasHandle handle, int transa, int transb, int m, int n, int k,
                        const double *alpha, const double *a, int lda, const double *b, int ldb,
                        const double *beta, double *c, int ldc) = nullptr;
  CublasStatus (*sgemmStridedBatched)(CublasHandle handle, int transa, int transb, int m, int n,
                                      int k, const float *alpha, const float *a, int lda,
                                      long long strideA, const float *b, int ldb, long long strideB,
                                      const float *beta, float *c, int ldc, long long strideC,
                                      int batchCount) = nullptr;
  CublasStatus (*dgemmStridedBatched)(CublasHandle handle, int transa, int transb, int m, int n,
                                      int k, const double *alpha, const double *a, int lda,
                                      long long strideA, const double *b, int ldb,
                                      long long strideB, const double *beta, double *c, int ldc,
                                      long long strideC, int batchCount) = nullptr;
  CublasStatus (*gemmEx)(CublasHandle handle, int transa, int transb, int m, int n, int k,
                         const void *alpha, const void *a, int aType, int lda, const void *b,
                         int bType, int ldb, const void *beta, void *c, int cType, int ldc,
                         int computeType, int algo) = nullptr;
  CublasStatus (*gemmStridedBatchedEx)(CublasHandle handle, int transa, int transb, int m, int n,
                                       int k, const void *alpha, const void *a, int aType, int lda,
                                       long long strideA, const void *b, int bType, int ldb,
                                       long long strideB, const void *beta, void *c, int cType,
                                       int ldc, long long strideC, int batchCount, int computeType,
                                       int algo) = nullptr;
  // Optional: null when this cuBLAS does not have it.
  const char *(*getStatusString)(CublasStatus status) = nullptr;

private:
  Cublas() = default;
  /// Loads one candidate; null and `error` set when it does not work.
  static std::unique_ptr<Cublas> tryLoad(const std::string &candidate, std::string *error);

  std::vector<std::unique_ptr<SharedLibrary>> preloaded_; ///< libcublasLt
  std::unique_ptr<SharedLibrary> lib_;
};

} // namespace kiln::codegen::cuda
