// oneDNN's forward convolution. Its fast kernels read blocked layouts (channels in blocks of 8
// or 16 innermost, weights blocked on both channel dims), so the primitive is created with
// "any" layouts and kiln's contiguous NC(D)HW operands are reordered into what it chose and the
// output back: torch's eager convolution does the same. Primitives, their reorders and the
// blocked buffers are cached per shape and thread count.
#include "runtime/onednn.h"
#include "runtime/onednn_api.h"

#include "runtime/thread_pool.h"

#include <atomic>
#include <map>
#include <mutex>

namespace kiln::onednn {

using namespace detail;

namespace {

constexpr int kArgFrom = 1, kArgTo = 17;

/// The convolution and, per operand whose chosen layout is not the plain one, a oneDNN-owned
/// buffer in that layout and the reorder to or from the plain memory.
struct ConvEntry {
  Handle conv = nullptr;
  Handle src = nullptr, weights = nullptr, bias = nullptr, dst = nullptr; // plain, set per call
  Handle blockedSrc = nullptr, blockedWeights = nullptr, blockedDst = nullptr;
  Handle toSrc = nullptr, toWeights = nullptr, fromDst = nullptr;
};

std::mutex gMutex;
std::map<std::vector<int64_t>, ConvEntry> gCache;
std::atomic<int64_t> gCalls{0};

std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;)
    strides[i - 1] = strides[i] * dims[i];
  return strides;
}

/// Makes `plain` (handle set per call) and, when `chosen` differs from its layout, a buffer in
/// `chosen` and the reorder between them (toBlocked: plain -> chosen, else chosen -> plain).
bool bindOperand(const Api &api, Handle plainMd, Handle chosen, bool toBlocked, Handle &plain,
                 Handle &blocked, Handle &reorder) {
  if (api.memoryCreate(&plain, plainMd, api.engine, nullptr) != 0)
    return false;
  if (api.mdEqual(plainMd, chosen))
    return true;
  if (api.memoryCreate(&blocked, chosen, api.engine, kAllocate) != 0)
    return false;
  Handle pd = nullptr;
  bool ok =
      (toBlocked ? api.reorderPd(&pd, plainMd, api.engine, chosen, api.engine, nullptr)
                 : api.reorderPd(&pd, chosen, api.engine, plainMd, api.engine, nullptr)) == 0 &&
      api.primitiveCreate(&reorder, pd) == 0;
  if (pd)
    api.pdDestroy(pd);
  return ok;
}

void destroy(const Api &api, ConvEntry &e) {
  for (Handle p : {e.conv, e.toSrc, e.toWeights, e.fromDst})
    if (p)
      api.primitiveDestroy(p);
  for (Handle m : {e.src, e.weights, e.bias, e.dst, e.blockedSrc, e.blockedWeights, e.blockedDst})
    if (m)
      api.memoryDestroy(m);
  e = ConvEntry{};
}

ConvEntry build(const Api &api, int type, const ConvShape &s, bool hasBias) {
  const size_t nd = s.in.size();
  std::vector<int64_t> srcDims{s.batch, s.channels}, dstDims{s.batch, s.outChannels}, wDims;
  srcDims.insert(srcDims.end(), s.in.begin(), s.in.end());
  dstDims.insert(dstDims.end(), s.out.begin(), s.out.end());
  if (s.groups > 1)
    wDims = {s.groups, s.outChannels / s.groups, s.channels / s.groups};
  else
    wDims = {s.outChannels, s.channels};
  wDims.insert(wDims.end(), s.kernel.begin(), s.kernel.end());
  Dims strides{}, dilates{}, padL{}, padR{};
  for (size_t i = 0; i < nd; ++i) {
    strides[i] = s.stride[i];
    dilates[i] = s.dilation[i] - 1; // oneDNN counts the gaps between taps
    padL[i] = s.padBefore[i];
    padR[i] = s.padAfter[i];
  }
  Handle plain[3] = {stridedDesc(api, srcDims, contiguousStrides(srcDims), type),
                     stridedDesc(api, wDims, contiguousStrides(wDims), type),
                     stridedDesc(api, dstDims, contiguousStrides(dstDims), type)};
  Handle biasMd = hasBias ? stridedDesc(api, {s.outChannels}, {1}, type) : nullptr;
  Handle any[3] = {nullptr, nullptr, nullptr};
  const std::vector<int64_t> *dims[3] = {&srcDims, &wDims, &dstDims};
  bool ok = plain[0] && plain[1] && plain[2] && (!hasBias || biasMd);
  for (int i = 0; i < 3 && ok; ++i)
    ok = api.mdCreateWithTag(&any[i], static_cast<int>(dims[i]->size()), dims[i]->data(), type,
                             kFormatAny) == 0;
  ConvEntry e;
  Handle pd = nullptr;
  ok = ok &&
       api.convPd(&pd, api.engine, kForwardInference, kConvolutionDirect, any[0], any[1], biasMd,
                  any[2], strides, dilates, padL, padR, nullptr) == 0 &&
       api.primitiveCreate(&e.conv, pd) == 0 &&
       bindOperand(api, plain[0], api.pdQueryMd(pd, kQuerySrcMd, 0), true, e.src, e.blockedSrc,
                   e.toSrc) &&
       bindOperand(api, plain[1], api.pdQueryMd(pd, kQueryWeightsMd, 0), true, e.weights,
                   e.blockedWeights, e.toWeights) &&
       bindOperand(api, plain[2], api.pdQueryMd(pd, kQueryDstMd, 0), false, e.dst, e.blockedDst,
                   e.fromDst) &&
       (!hasBias || api.memoryCreate(&e.bias, biasMd, api.engine, nullptr) == 0);
  if (pd)
    api.pdDestroy(pd);
  for (Handle md : {plain[0], plain[1], plain[2], biasMd, any[0], any[1], any[2]})
    if (md)
      api.mdDestroy(md);
  if (!ok)
    destroy(api, e);
  return e;
}

std::vector<int64_t> keyOf(DType dtype, const ConvShape &s, bool hasBias) {
  std::vector<int64_t> key{static_cast<int64_t>(dtype),
                           hasBias,
                           s.batch,
                           s.channels,
                           s.outChannels,
                           s.groups,
                           numThreads()};
  for (const std::vector<int64_t> *v :
       {&s.in, &s.out, &s.kernel, &s.stride, &s.dilation, &s.padBefore, &s.padAfter}) {
    key.push_back(static_cast<int64_t>(v->size()));
    key.insert(key.end(), v->begin(), v->end());
  }
  return key;
}

bool run(const Api &api, Handle primitive, std::initializer_list<ExecArg> args) {
  return api.execute(primitive, api.stream, static_cast<int>(args.size()), args.begin()) == 0;
}

} // namespace

bool convolutionAvailable(DType dtype) {
  if (api() == nullptr)
    return false;
  if (dtype == DType::Float32)
    return true;
  return available(dtype); // bfloat16 where the CPU computes it natively
}

bool convolution(DType dtype, const ConvShape &shape, const void *x, const void *w,
                 const void *bias, void *out) {
  if (!convolutionAvailable(dtype) || inParallelRegion())
    return false;
  const Api &lib = *api();
  syncThreads(lib);
  std::lock_guard<std::mutex> lock(gMutex);
  std::vector<int64_t> key = keyOf(dtype, shape, bias != nullptr);
  auto it = gCache.find(key);
  if (it == gCache.end()) {
    if (gCache.size() >= 512) { // a workload's shapes are few: a full cache is a varying one
      for (auto &[k, old] : gCache)
        destroy(lib, old);
      gCache.clear();
    }
    it = gCache.emplace(key, build(lib, dnnlType(dtype), shape, bias != nullptr)).first;
  }
  const ConvEntry &e = it->second;
  if (!e.conv)
    return false;
  lib.setHandle(e.src, const_cast<void *>(x));
  lib.setHandle(e.weights, const_cast<void *>(w));
  lib.setHandle(e.dst, out);
  if (bias)
    lib.setHandle(e.bias, const_cast<void *>(bias));
  Handle src = e.blockedSrc ? e.blockedSrc : e.src;
  Handle weights = e.blockedWeights ? e.blockedWeights : e.weights;
  Handle dst = e.blockedDst ? e.blockedDst : e.dst;
  parkWorkers(); // oneDNN's OpenMP threads run on the cores kiln's idle workers spin on
  bool ok = (!e.toSrc || run(lib, e.toSrc, {{kArgFrom, e.src}, {kArgTo, src}})) &&
            (!e.toWeights || run(lib, e.toWeights, {{kArgFrom, e.weights}, {kArgTo, weights}}));
  if (ok && bias)
    ok = run(lib, e.conv,
             {{kArgSrc, src}, {kArgWeights, weights}, {kArgBias, e.bias}, {kArgDst, dst}});
  else if (ok)
    ok = run(lib, e.conv, {{kArgSrc, src}, {kArgWeights, weights}, {kArgDst, dst}});
  ok = ok && (!e.fromDst || run(lib, e.fromDst, {{kArgFrom, dst}, {kArgTo, e.dst}}));
  lib.streamWait(lib.stream);
  if (ok)
    gCalls.fetch_add(1, std::memory_order_relaxed);
  return ok;
}

int64_t convolutionCalls() { return gCalls.load(std::memory_order_relaxed); }

} // namespace kiln::onednn
