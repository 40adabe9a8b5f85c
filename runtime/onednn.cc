// oneDNN's matmul for bfloat16 GEMMs, and the library loader the convolution shares
// (onednn_api.h).
#include "runtime/onednn.h"
#include "runtime/onednn_api.h"

#include "runtime/thread_pool.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

namespace kiln::onednn {
namespace detail {

int dnnlType(DType t) {
  switch (t) {
  case DType::Float16:
    return 1;
  case DType::BFloat16:
    return 2;
  case DType::Float32:
    return 3;
  default:
    return 0;
  }
}

namespace {

/// Rounds oneDNN's OpenMP threads spin after a primitive before they sleep (loadApi).
constexpr const char *kOmpSpinRounds = "10000";

template <typename F> bool bind(void *lib, const char *name, F &fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

const Api *loadApi() {
  const char *off = std::getenv("KILN_ONEDNN");
  if (off && std::strcmp(off, "0") == 0)
    return nullptr;
  const char *path = std::getenv("KILN_DNNL_LIB");
  // After each primitive, oneDNN's OpenMP threads spin waiting for the next one (libgomp's
  // default: 300,000 rounds, about a millisecond), on the cores kiln's own pool needs for the
  // kernels in between (two pools spinning on two cores); asleep (a passive policy), each
  // primitive pays their wake-up instead, which on a small VM costs more than a small
  // convolution. libgomp reads its spin count once, when it loads: unless the user chose a
  // policy or a count, or something loaded libgomp already, make that load's count
  // kOmpSpinRounds, a brief spin (as kiln's pool's) that carries a backward's back-to-back
  // convolutions without a wake-up (the compiled conv net's training step at 2 threads: 3.3 ms
  // passive, 2.8 ms with this), and restore the environment after (a libgomp another library
  // bundles, torch's, reads its own at its load).
  const bool ours = !std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") &&
                    !dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (ours)
    setenv("GOMP_SPINCOUNT", kOmpSpinRounds, 0);
  void *lib = dlopen(path && *path ? path : "libdnnl.so.3", RTLD_NOW | RTLD_LOCAL);
  if (ours)
    unsetenv("GOMP_SPINCOUNT");
  if (!lib)
    return nullptr;
  static Api api;
  bool ok =
      bind(lib, "dnnl_engine_create", api.engineCreate) &&
      bind(lib, "dnnl_stream_create", api.streamCreate) &&
      bind(lib, "dnnl_stream_wait", api.streamWait) &&
      bind(lib, "dnnl_memory_desc_create_with_strides", api.mdCreate) &&
      bind(lib, "dnnl_memory_desc_create_with_tag", api.mdCreateWithTag) &&
      bind(lib, "dnnl_memory_desc_destroy", api.mdDestroy) &&
      bind(lib, "dnnl_memory_desc_equal", api.mdEqual) &&
      bind(lib, "dnnl_memory_desc_get_size", api.mdSize) &&
      bind(lib, "dnnl_matmul_primitive_desc_create", api.matmulPd) &&
      bind(lib, "dnnl_convolution_forward_primitive_desc_create", api.convPd) &&
      bind(lib, "dnnl_convolution_backward_data_primitive_desc_create", api.convBackwardDataPd) &&
      bind(lib, "dnnl_convolution_backward_weights_primitive_desc_create",
           api.convBackwardWeightsPd) &&
      bind(lib, "dnnl_reorder_primitive_desc_create", api.reorderPd) &&
      bind(lib, "dnnl_primitive_desc_query_md", api.pdQueryMd) &&
      bind(lib, "dnnl_primitive_desc_destroy", api.pdDestroy) &&
      bind(lib, "dnnl_primitive_create", api.primitiveCreate) &&
      bind(lib, "dnnl_primitive_destroy", api.primitiveDestroy) &&
      bind(lib, "dnnl_primitive_execute", api.execute) &&
      bind(lib, "dnnl_memory_create", api.memoryCreate) &&
      bind(lib, "dnnl_memory_set_data_handle", api.setHandle) &&
      bind(lib, "dnnl_memory_destroy", api.memoryDestroy);
  // The OpenMP runtime the library links (libgomp): dlsym searches its dependencies too.
  bind(lib, "omp_set_num_threads", api.ompSetThreads);
  if (!ok || api.engineCreate(&api.engine, kCpuEngine, 0) != 0 ||
      api.streamCreate(&api.stream, api.engine, kInOrderStream) != 0) {
    std::fprintf(stderr, "kiln: %s is not a usable oneDNN 3 library; GEMMs stay on BLAS\n",
                 path && *path ? path : "libdnnl.so.3");
    return nullptr;
  }
  return &api;
}

/// The CPU's flags from /proc/cpuinfo (empty when unreadable), space-terminated.
const std::string &cpuFlags() {
  static const std::string flags = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("flags", 0) == 0)
        return line + " ";
    return std::string();
  }();
  return flags;
}

thread_local int gThreads = 0; // what this thread last gave OpenMP (a per-thread setting)
} // namespace

const Api *api() {
  static const Api *a = loadApi();
  return a;
}

std::mutex &executionMutex() {
  static std::mutex m;
  return m;
}

bool cpuHas(const char *flag) {
  return cpuFlags().find(std::string(" ") + flag + " ") != std::string::npos;
}

void syncThreads(const Api &api, int threads) {
  if (threads <= 0)
    threads = numThreads();
  if (api.ompSetThreads && gThreads != threads) {
    gThreads = threads;
    api.ompSetThreads(gThreads);
  }
}

Handle stridedDesc(const Api &api, const std::vector<int64_t> &dims,
                   const std::vector<int64_t> &strides, int type) {
  Dims d{}, s{};
  const int rank = static_cast<int>(dims.size());
  if (rank > 12) // oneDNN's most dims: BLAS takes the product instead
    return nullptr;
  for (int i = 0; i < rank; ++i)
    d[i] = dims[i], s[i] = strides[i];
  Handle md = nullptr;
  if (api.mdCreate(&md, rank, d, type, s) != 0)
    return nullptr;
  return md;
}

} // namespace detail

using namespace detail;

namespace {

/// A primitive for one shape, with memory objects whose data pointers each call sets.
struct Entry {
  Handle primitive = nullptr, a = nullptr, b = nullptr, bias = nullptr, dst = nullptr;
};

std::map<std::vector<int64_t>, Entry> gCache;
std::atomic<int64_t> gCalls{0};

/// Builds the primitive and its memory objects, or an empty entry when oneDNN refuses.
Entry build(const Api &api, int type, const Operand &a, const Operand &b, const Operand *bias,
            const Operand &dst) {
  Entry e;
  Handle mds[4] = {stridedDesc(api, a.dims, a.strides, type),
                   stridedDesc(api, b.dims, b.strides, type),
                   bias ? stridedDesc(api, bias->dims, bias->strides, type) : nullptr,
                   stridedDesc(api, dst.dims, dst.strides, type)};
  Handle pd = nullptr;
  if (mds[0] && mds[1] && mds[3] && (!bias || mds[2]) &&
      api.matmulPd(&pd, api.engine, mds[0], mds[1], mds[2], mds[3], nullptr) == 0 &&
      api.primitiveCreate(&e.primitive, pd) == 0) {
    Handle *objs[4] = {&e.a, &e.b, &e.bias, &e.dst};
    for (int i = 0; i < 4; ++i)
      if (mds[i])
        api.memoryCreate(objs[i], mds[i], api.engine, nullptr);
  }
  if (pd)
    api.pdDestroy(pd);
  for (Handle md : mds)
    if (md)
      api.mdDestroy(md);
  return e;
}

std::vector<int64_t> keyOf(DType dtype, const Operand &a, const Operand &b, const Operand *bias,
                           const Operand &dst) {
  std::vector<int64_t> key{static_cast<int64_t>(dtype), bias ? 1 : 0};
  for (const Operand *o : {&a, &b, bias, &dst}) {
    if (!o)
      continue;
    key.insert(key.end(), o->dims.begin(), o->dims.end());
    key.insert(key.end(), o->strides.begin(), o->strides.end());
  }
  return key;
}

} // namespace

bool available(DType dtype) {
  if (dtype != DType::BFloat16 || api() == nullptr)
    return false;
  static const bool native = cpuHas("avx512_bf16") || cpuHas("amx_bf16");
  return native;
}

bool matmul(DType dtype, const Operand &a, const Operand &b, const Operand *bias,
            const Operand &dst) {
  // Inside a parallel region of kiln's pool the GEMM stays on one thread: OpenMP would start a
  // team per pool thread.
  if (!available(dtype) || inParallelRegion())
    return false;
  const Api &lib = *api();
  syncThreads(lib);
  std::lock_guard<std::mutex> lock(executionMutex());
  // oneDNN splits a primitive's work for the thread count it was created under
  std::vector<int64_t> key = keyOf(dtype, a, b, bias, dst);
  key.push_back(numThreads());
  auto it = gCache.find(key);
  if (it == gCache.end()) {
    if (gCache.size() >= 512) { // a workload's shapes are few: a full cache is a varying one
      for (auto &[k, old] : gCache) {
        if (old.primitive)
          lib.primitiveDestroy(old.primitive);
        for (Handle m : {old.a, old.b, old.bias, old.dst})
          if (m)
            lib.memoryDestroy(m);
      }
      gCache.clear();
    }
    it = gCache.emplace(key, build(lib, dnnlType(dtype), a, b, bias, dst)).first;
  }
  const Entry &e = it->second;
  if (!e.primitive)
    return false;
  lib.setHandle(e.a, const_cast<void *>(a.data));
  lib.setHandle(e.b, const_cast<void *>(b.data));
  lib.setHandle(e.dst, const_cast<void *>(dst.data));
  ExecArg args[4] = {{kArgSrc, e.a}, {kArgWeights, e.b}, {kArgDst, e.dst}, {kArgBias, e.bias}};
  if (bias)
    lib.setHandle(e.bias, const_cast<void *>(bias->data));
  parkWorkers(); // oneDNN's OpenMP threads run on the cores kiln's idle workers spin on
  if (lib.execute(e.primitive, lib.stream, bias ? 4 : 3, args) != 0)
    return false;
  lib.streamWait(lib.stream);
  gCalls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t calls() { return gCalls.load(std::memory_order_relaxed); }

} // namespace kiln::onednn
