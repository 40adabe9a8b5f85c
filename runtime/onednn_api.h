#pragma once
/// The part of oneDNN 3's C API kiln calls (include/oneapi/dnnl/dnnl.h), opened with dlopen, and
/// the helpers its matmul (onednn.cc) and convolution (onednn_conv.cc) share. Internal to
/// runtime/.

#include "runtime/onednn.h"

#include <cstdint>
#include <mutex>
#include <string>

namespace kiln::onednn::detail {

using Handle = void *;
using Dims = int64_t[12];
struct ExecArg {
  int arg;
  Handle memory;
};
constexpr int kCpuEngine = 1, kInOrderStream = 1;
constexpr int kArgSrc = 1, kArgDst = 17, kArgWeights = 33, kArgBias = 41;
constexpr int kArgDiffSrc = 129, kArgDiffDst = 145, kArgDiffWeights = 161;
constexpr int kFormatAny = 1, kForwardTraining = 64, kForwardInference = 96;
constexpr int kConvolutionDirect = 1;
constexpr int kQuerySrcMd = 129, kQueryDiffSrcMd = 130, kQueryWeightsMd = 131,
              kQueryDiffWeightsMd = 132, kQueryDstMd = 133, kQueryDiffDstMd = 134;

/// oneDNN's data type for a kiln dtype (0: none).
int dnnlType(DType t);

struct Api {
  int (*engineCreate)(Handle *, int, size_t);
  int (*streamCreate)(Handle *, Handle, unsigned);
  int (*streamWait)(Handle);
  int (*mdCreate)(Handle *, int, const int64_t *, int, const int64_t *);
  int (*mdCreateWithTag)(Handle *, int, const int64_t *, int, int);
  int (*mdDestroy)(Handle);
  int (*mdEqual)(Handle, Handle);
  size_t (*mdSize)(Handle);
  int (*matmulPd)(Handle *, Handle, Handle, Handle, Handle, Handle, Handle);
  int (*convPd)(Handle *, Handle, int, int, Handle, Handle, Handle, Handle, const int64_t *,
                const int64_t *, const int64_t *, const int64_t *, Handle);
  int (*convBackwardDataPd)(Handle *, Handle, int, Handle, Handle, Handle, const int64_t *,
                            const int64_t *, const int64_t *, const int64_t *, Handle, Handle);
  int (*convBackwardWeightsPd)(Handle *, Handle, int, Handle, Handle, Handle, Handle,
                               const int64_t *, const int64_t *, const int64_t *, const int64_t *,
                               Handle, Handle);
  int (*reorderPd)(Handle *, Handle, Handle, Handle, Handle, Handle);
  Handle (*pdQueryMd)(Handle, int, int);
  int (*pdDestroy)(Handle);
  int (*primitiveCreate)(Handle *, Handle);
  int (*primitiveDestroy)(Handle);
  int (*execute)(Handle, Handle, int, const ExecArg *);
  int (*memoryCreate)(Handle *, Handle, Handle, void *);
  int (*setHandle)(Handle, void *);
  int (*memoryDestroy)(Handle);
  void (*ompSetThreads)(int);
  Handle engine = nullptr, stream = nullptr;
};

/// The loaded library, or null (KILN_ONEDNN=0, no library, not a oneDNN 3).
const Api *api();

/// Held while a primitive runs and while the caches change: every primitive runs on the one
/// stream, and an OpenMP team at a time.
std::mutex &executionMutex();

/// Whether the CPU's /proc/cpuinfo flags name `flag`.
bool cpuHas(const char *flag);

/// Gives oneDNN's OpenMP runtime `threads` threads (kiln's thread count when 0) for the primitives
/// this thread runs next.
void syncThreads(const Api &api, int threads = 0);

/// A plain (strided) memory descriptor of `dims`, or null past oneDNN's 12 dims.
Handle stridedDesc(const Api &api, const std::vector<int64_t> &dims,
                   const std::vector<int64_t> &strides, int type);

} // namespace kiln::onednn::detail
