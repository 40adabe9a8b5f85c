// oneDNN's convolution: forward, and the backward passes for the input and the weights. Its fast
// kernels read blocked layouts (channels in blocks of 8 or 16 innermost, weights blocked on both
// channel dims), so each primitive is created with "any" layouts and kiln's contiguous NC(D)HW
// operands are reordered into what it chose and the results back: torch's eager convolution does
// the same. Primitives, their reorders and the blocked buffers are cached per pass, shape and
// thread count.
#include "runtime/onednn.h"
#include "runtime/onednn_api.h"

#include "runtime/tensor.h"
#include "runtime/thread_pool.h"

#include <atomic>
#include <map>

namespace kiln::onednn {

using namespace detail;

namespace {

constexpr int kArgFrom = 1, kArgTo = 17;

enum class Pass { Forward, BackwardData, BackwardWeights };

/// One execution argument: the plain memory whose data pointer each call sets and, when the
/// primitive chose another layout, a memory in it (of `blockedBytes`, given a buffer per call:
/// cached buffers would hold every layer's activations for the life of the process) and the
/// reorder between them.
struct Bound {
  int arg = 0;
  bool input = true; // reordered plain -> blocked before the primitive, else after it
  Handle plain = nullptr, blocked = nullptr, reorder = nullptr;
  size_t blockedBytes = 0;
};

struct Entry {
  Handle primitive = nullptr;
  std::vector<Bound> operands; // in the order the call passes their pointers
};

std::map<std::vector<int64_t>, Entry> gCache;
std::atomic<int64_t> gCalls{0};

void destroy(const Api &api, Entry &e) {
  if (e.primitive)
    api.primitiveDestroy(e.primitive);
  for (Bound &b : e.operands) {
    if (b.reorder)
      api.primitiveDestroy(b.reorder);
    for (Handle m : {b.plain, b.blocked})
      if (m)
        api.memoryDestroy(m);
  }
  e = Entry{};
}

/// Binds argument `arg` of a primitive whose layout for it is `chosen`: see Bound.
bool bindOperand(const Api &api, Entry &e, int arg, bool input, Handle plainMd, Handle chosen) {
  Bound &b = e.operands.emplace_back();
  b.arg = arg;
  b.input = input;
  if (!chosen || api.memoryCreate(&b.plain, plainMd, api.engine, nullptr) != 0)
    return false;
  if (api.mdEqual(plainMd, chosen))
    return true;
  b.blockedBytes = api.mdSize(chosen);
  if (api.memoryCreate(&b.blocked, chosen, api.engine, nullptr) != 0)
    return false;
  Handle pd = nullptr;
  int status = input ? api.reorderPd(&pd, plainMd, api.engine, chosen, api.engine, nullptr)
                     : api.reorderPd(&pd, chosen, api.engine, plainMd, api.engine, nullptr);
  bool ok = status == 0 && api.primitiveCreate(&b.reorder, pd) == 0;
  if (pd)
    api.pdDestroy(pd);
  return ok;
}

/// Memory descriptors of one convolution: plain (kiln's layouts) and "any" (oneDNN's choice)
/// for the input, the weights and the output, and the plain bias.
struct Descs {
  Handle plain[3] = {nullptr, nullptr, nullptr}, any[3] = {nullptr, nullptr, nullptr};
  Handle bias = nullptr;
  Dims strides{}, dilates{}, padL{}, padR{};

  Descs(const Api &api, int type, const ConvShape &s, bool hasBias) {
    std::vector<int64_t> srcDims{s.batch, s.channels}, dstDims{s.batch, s.outChannels}, wDims;
    srcDims.insert(srcDims.end(), s.in.begin(), s.in.end());
    dstDims.insert(dstDims.end(), s.out.begin(), s.out.end());
    if (s.groups > 1)
      wDims = {s.groups, s.outChannels / s.groups, s.channels / s.groups};
    else
      wDims = {s.outChannels, s.channels};
    wDims.insert(wDims.end(), s.kernel.begin(), s.kernel.end());
    for (size_t i = 0; i < s.in.size(); ++i) {
      strides[i] = s.stride[i];
      dilates[i] = s.dilation[i] - 1; // oneDNN counts the gaps between taps
      padL[i] = s.padBefore[i];
      padR[i] = s.padAfter[i];
    }
    const std::vector<int64_t> *dims[3] = {&srcDims, &wDims, &dstDims};
    for (int i = 0; i < 3; ++i) {
      plain[i] = stridedDesc(api, *dims[i], contiguousStrides(*dims[i]), type);
      if (api.mdCreateWithTag(&any[i], static_cast<int>(dims[i]->size()), dims[i]->data(), type,
                              kFormatAny) != 0)
        any[i] = nullptr;
    }
    if (hasBias)
      bias = stridedDesc(api, {s.outChannels}, {1}, type);
  }
  bool ok(bool hasBias) const {
    for (int i = 0; i < 3; ++i)
      if (!plain[i] || !any[i])
        return false;
    return !hasBias || bias;
  }
  void release(const Api &api) {
    for (Handle md : {plain[0], plain[1], plain[2], any[0], any[1], any[2], bias})
      if (md)
        api.mdDestroy(md);
  }
};

Entry build(const Api &api, int type, Pass pass, const ConvShape &s, bool hasBias) {
  Descs d(api, type, s, hasBias);
  Entry e;
  Handle fwd = nullptr, pd = nullptr;
  const int prop = pass == Pass::Forward ? kForwardInference : kForwardTraining;
  bool ok = d.ok(hasBias) &&
            api.convPd(&fwd, api.engine, prop, kConvolutionDirect, d.any[0], d.any[1], d.bias,
                       d.any[2], d.strides, d.dilates, d.padL, d.padR, nullptr) == 0;
  if (ok && pass == Pass::Forward) {
    ok = api.primitiveCreate(&e.primitive, fwd) == 0 &&
         bindOperand(api, e, kArgSrc, true, d.plain[0], api.pdQueryMd(fwd, kQuerySrcMd, 0)) &&
         bindOperand(api, e, kArgWeights, true, d.plain[1],
                     api.pdQueryMd(fwd, kQueryWeightsMd, 0)) &&
         bindOperand(api, e, kArgDst, false, d.plain[2], api.pdQueryMd(fwd, kQueryDstMd, 0));
    if (ok && hasBias) // the bias is plain in every layout
      ok = bindOperand(api, e, kArgBias, true, d.bias, d.bias);
  } else if (ok && pass == Pass::BackwardData) {
    ok =
        api.convBackwardDataPd(&pd, api.engine, kConvolutionDirect, d.any[0], d.any[1], d.any[2],
                               d.strides, d.dilates, d.padL, d.padR, fwd, nullptr) == 0 &&
        api.primitiveCreate(&e.primitive, pd) == 0 &&
        bindOperand(api, e, kArgDiffDst, true, d.plain[2], api.pdQueryMd(pd, kQueryDiffDstMd, 0)) &&
        bindOperand(api, e, kArgWeights, true, d.plain[1], api.pdQueryMd(pd, kQueryWeightsMd, 0)) &&
        bindOperand(api, e, kArgDiffSrc, false, d.plain[0], api.pdQueryMd(pd, kQueryDiffSrcMd, 0));
  } else if (ok) {
    ok =
        api.convBackwardWeightsPd(&pd, api.engine, kConvolutionDirect, d.any[0], d.any[1], nullptr,
                                  d.any[2], d.strides, d.dilates, d.padL, d.padR, fwd,
                                  nullptr) == 0 &&
        api.primitiveCreate(&e.primitive, pd) == 0 &&
        bindOperand(api, e, kArgSrc, true, d.plain[0], api.pdQueryMd(pd, kQuerySrcMd, 0)) &&
        bindOperand(api, e, kArgDiffDst, true, d.plain[2], api.pdQueryMd(pd, kQueryDiffDstMd, 0)) &&
        bindOperand(api, e, kArgDiffWeights, false, d.plain[1],
                    api.pdQueryMd(pd, kQueryDiffWeightsMd, 0));
  }
  for (Handle p : {fwd, pd})
    if (p)
      api.pdDestroy(p);
  d.release(api);
  if (!ok)
    destroy(api, e);
  return e;
}

std::vector<int64_t> keyOf(DType dtype, Pass pass, const ConvShape &s, bool hasBias) {
  std::vector<int64_t> key{static_cast<int64_t>(dtype),
                           static_cast<int64_t>(pass),
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

/// Below this many multiply-adds a convolution runs on one thread (threadsFor).
constexpr int64_t kSmallConvMacs = int64_t{4} << 20;

bool execute(const Api &api, Handle primitive, const std::vector<ExecArg> &args) {
  return api.execute(primitive, api.stream, static_cast<int>(args.size()), args.data()) == 0;
}

/// How many threads a convolution of `shape` runs on: all of kiln's, except for small ones, whose
/// work is less than waking oneDNN's OpenMP threads costs (they sleep after a brief spin, loadApi):
/// a 576x14x14 depthwise 3x3 with stride 2 took 0.39 ms on 2 threads and 0.05 ms on 1.
int threadsFor(const ConvShape &s) {
  int64_t macs = s.batch * s.outChannels * (s.channels / std::max<int64_t>(1, s.groups));
  for (size_t d = 0; d < s.out.size(); ++d)
    macs *= s.out[d] * s.kernel[d];
  return macs < kSmallConvMacs ? 1 : numThreads();
}

/// Runs one pass with `data` the operands' pointers in the entry's order (inputs before
/// outputs); false when oneDNN cannot.
bool run(DType dtype, Pass pass, const ConvShape &shape, std::initializer_list<const void *> data,
         bool hasBias = false) {
  if (!convolutionAvailable(dtype) || inParallelRegion())
    return false;
  const Api &lib = *api();
  syncThreads(lib, threadsFor(shape));
  std::lock_guard<std::mutex> lock(executionMutex());
  std::vector<int64_t> key = keyOf(dtype, pass, shape, hasBias);
  auto it = gCache.find(key);
  if (it == gCache.end()) {
    if (gCache.size() >= 512) { // a workload's shapes are few: a full cache is a varying one
      for (auto &[k, old] : gCache)
        destroy(lib, old);
      gCache.clear();
    }
    it = gCache.emplace(key, build(lib, dnnlType(dtype), pass, shape, hasBias)).first;
  }
  const Entry &e = it->second;
  if (!e.primitive)
    return false;
  std::vector<ExecArg> args;
  std::vector<Tensor> buffers; // the blocked operands' memory for this call (64-byte aligned)
  buffers.reserve(e.operands.size());
  const void *const *pointer = data.begin();
  for (const Bound &b : e.operands) {
    lib.setHandle(b.plain, const_cast<void *>(*pointer++));
    if (b.blocked) {
      buffers.push_back(Tensor::empty({static_cast<int64_t>(b.blockedBytes)}, DType::UInt8));
      lib.setHandle(b.blocked, buffers.back().rawData());
    }
    args.push_back({b.arg, b.blocked ? b.blocked : b.plain});
  }
  parkWorkers(); // oneDNN's OpenMP threads run on the cores kiln's idle workers spin on
  bool ok = true;
  for (const Bound &b : e.operands)
    if (ok && b.reorder && b.input)
      ok = execute(lib, b.reorder, {{kArgFrom, b.plain}, {kArgTo, b.blocked}});
  ok = ok && execute(lib, e.primitive, args);
  for (const Bound &b : e.operands)
    if (ok && b.reorder && !b.input)
      ok = execute(lib, b.reorder, {{kArgFrom, b.blocked}, {kArgTo, b.plain}});
  lib.streamWait(lib.stream);
  if (ok)
    gCalls.fetch_add(1, std::memory_order_relaxed);
  return ok;
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
  if (bias)
    return run(dtype, Pass::Forward, shape, {x, w, out, bias}, true);
  return run(dtype, Pass::Forward, shape, {x, w, out});
}

bool convolutionBackwardData(DType dtype, const ConvShape &shape, const void *gradOut,
                             const void *w, void *gradInput) {
  return run(dtype, Pass::BackwardData, shape, {gradOut, w, gradInput});
}

bool convolutionBackwardWeights(DType dtype, const ConvShape &shape, const void *x,
                                const void *gradOut, void *gradWeight) {
  return run(dtype, Pass::BackwardWeights, shape, {x, gradOut, gradWeight});
}

int64_t convolutionCalls() { return gCalls.load(std::memory_order_relaxed); }

} // namespace kiln::onednn
