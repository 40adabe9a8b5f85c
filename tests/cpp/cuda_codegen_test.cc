// CUDA code generation without a GPU (codegen/cuda): every prim, cast and reduction kind of the
// loop IR and the fused patterns of the schedule tests are emitted as CUDA C and compiled by
// NVRTC to PTX for sm_80 and sm_90 (and to SASS, by NVRTC and by the toolkit's ptxas when one is
// installed); golden kernels; vector and launch plans; the kernel cache; NVRTC's and the
// driver's error paths. Without libnvrtc the compile checks are skipped with a message.

#include "codegen/cuda/compile.h"
#include "codegen/cuda/driver.h"
#include "codegen/cuda/emit.h"
#include "codegen/cuda/host_emulator.h"
#include "codegen/cuda/launch_plan.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/externs.h"
#include "ir/loop/interpreter.h"
#include "ir/loop/program.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "passes/lower/lowering.h"
#include "passes/schedule/schedule.h"
#include "runtime/error.h"
#include "runtime/generator.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/random.h"
#include "tests/cpp/cuda_test_util.h"

#include <kiln_catch.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <set>

using namespace kiln;
using namespace kiln::ir;
using namespace kiln::ir::loop;
using namespace kiln::codegen::cuda;
using namespace kiln::test;

namespace {

/// `bazel test` runs with a clean environment: point the NVRTC search at the workspace's
/// virtualenv (its nvidia-cuda-nvrtc wheel), found through this source file's runfiles link.
void addWorkspaceVenv() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path self = fs::canonical("tests/cpp/cuda_codegen_test.cc", ec);
  if (ec)
    return;
  fs::path lib = self.parent_path().parent_path().parent_path() / ".venv" / "lib";
  for (fs::directory_iterator it(lib, ec), end; !ec && it != end; it.increment(ec))
    Nvrtc::addSearchRoot((it->path() / "site-packages").string());
}

/// NVRTC, or null after a message saying why the compile checks are skipped.
const Nvrtc *nvrtc() {
  static const Nvrtc *n = [] {
    addWorkspaceVenv();
    std::string reason;
    const Nvrtc *found = Nvrtc::tryGet(&reason);
    if (found)
      std::printf("cuda_codegen_test: NVRTC %d.%d from %s\n", found->version().first,
                  found->version().second, found->path().c_str());
    return found;
  }();
  if (!n) {
    std::string reason;
    Nvrtc::tryGet(&reason);
    WARN("NVRTC compile checks skipped: " << reason);
  }
  return n;
}

/// One memory-only cache for the binary.
CudaCache &testCache() {
  static CudaCache cache("");
  return cache;
}

/// PTX ISA too new for this ptxas (an NVRTC newer than the toolkit): assembling is skipped.
bool ptxasTooOld(const std::string &message) {
  return message.find("Unsupported .version") != std::string::npos;
}

/// What compileEverywhere checks besides PTX.
enum class Sass { None, Nvrtc, NvrtcAndPtxas };

/// Compiles `m` for sm_80 and sm_90 (concurrently: NVRTC is thread-safe): PTX with an `.entry`
/// per kernel and no warnings; with `sass`, SASS from NVRTC (a real architecture) and from the
/// toolkit's ptxas when installed. Returns the sm_90 PTX.
std::string compileEverywhere(const CudaModule &m, Sass sass = Sass::Nvrtc) {
  auto compileFor = [&](int arch) {
    CudaCompileOptions options;
    options.arch = arch;
    options.cubin = sass != Sass::None;
    options.cache = &testCache();
    return compileCuda(m.source, options);
  };
  std::future<CompiledCuda> sm80 = std::async(std::launch::async, compileFor, 80);
  CompiledCuda sm90 = compileFor(90);
  for (const CompiledCuda &c : {sm80.get(), sm90}) {
    INFO("sm_" << c.arch);
    INFO(c.log);
    CHECK(c.log.empty()); // no warnings either
    CHECK(c.ptx.find(fmt::format(".target sm_{}", c.arch)) != std::string::npos);
    for (const CudaKernel *k : m.kernels()) {
      INFO(k->name);
      CHECK(c.ptx.find(fmt::format(".entry {}(", k->name)) != std::string::npos);
    }
    if (sass != Sass::None) {
      CHECK(c.cubinSource == CubinSource::Nvrtc);
      CHECK(c.cubin.rfind("\x7f"
                          "ELF",
                          0) == 0);
    }
    if (sass == Sass::NvrtcAndPtxas && findPtxas()) {
      try {
        std::string cubin = assembleWithPtxas(c.ptx, c.arch);
        CHECK(cubin.rfind("\x7f"
                          "ELF",
                          0) == 0);
      } catch (const Error &e) {
        if (!ptxasTooOld(e.what()))
          throw;
        WARN("ptxas skipped: " << e.what());
      }
    }
  }
  return sm90.ptx;
}

template <typename Fn> std::string errorOf(Fn &&fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  FAIL("no kiln::Error thrown");
  return "";
}

/// One pointwise node per (prim, admitted dtype) over [s0]; operands load inputs of that dtype
/// (two per dtype, read one element apart, and a b8 condition for `where`).
LoopProgram everyPrimProgram(size_t &nodes) {
  LoopProgram p;
  SymInt s0 = sym("s0");
  std::map<DType, BufferId> in;
  for (DType t : kAllDTypes)
    in[t] = p.addInput(t, {s0 + 1});
  nodes = 0;
  for (const PrimRow &row : primRows())
    for (DType t : kAllDTypes) {
      if (!admits(row.rule, t))
        continue;
      p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) {
        std::vector<Val> args;
        if (row.rule == TypeRule::Select)
          args.push_back(ops.load(in[DType::Bool], {i[0]}));
        for (int k = 0; k < row.arity - (row.rule == TypeRule::Select); ++k)
          args.push_back(ops.load(in[t], {i[0] + k}));
        return row.apply(ops, args);
      }));
      ++nodes;
    }
  return p;
}

std::vector<KernelRole> roles(const NodeKernels &n) {
  std::vector<KernelRole> out;
  for (const CudaKernel &k : n.kernels)
    out.push_back(k.role);
  return out;
}

} // namespace

TEST_CASE("every prim of loop.def, for every dtype its type rule admits, compiles",
          "[cuda][nvrtc]") {
  size_t nodes = 0;
  LoopProgram p = everyPrimProgram(nodes);
  CudaModule m =
      emitCuda(unfused(p), {.vectorize = false}); // vector kernels: every dtype in the casts
  CudaModule vec = emitCuda(unfused(p));
  REQUIRE(m.nodes.size() == nodes);
  std::set<ExprKind> seen;
  for (const LoopNode &node : p.nodes())
    seen.insert(node.body->result()->kind);
  CHECK(seen.size() == primRows().size()); // every row of the table is exercised
  for (const NodeKernels &n : m.nodes)
    CHECK(roles(n) == std::vector<KernelRole>{KernelRole::Pointwise});
  for (const NodeKernels &n : vec.nodes) // [s0] reading x[i] and x[i+1]: a vector kernel each
    CHECK(roles(n) == std::vector<KernelRole>{KernelRole::Pointwise, KernelRole::PointwiseVector});
  // Spot checks of the translation (floats map to libdevice, integers wrap, Python division).
  for (const char *text : {"expf(",
                           "= exp(",
                           "rsqrtf(",
                           "erff(",
                           "tanh(",
                           "kiln::floordiv_f(",
                           "kiln::floordiv(",
                           "kiln::mod(",
                           "kiln::pow(",
                           "powf(",
                           "kiln::add(",
                           "kiln::neg(",
                           "kiln::abs(",
                           "kiln::h2f(",
                           "kiln::bf2f(",
                           "kiln::f2h(",
                           "kiln::f2bf(",
                           "kiln::max(",
                           " ? ",
                           " && ",
                           "(unsigned char)("}) {
    INFO(text);
    CHECK(has(m.source, text));
  }
  if (!nvrtc())
    return;
  compileEverywhere(m, Sass::None); // ~400 kernels: PTX only (SASS is checked below)
}

TEST_CASE("every cast between dtypes, literals of every dtype, index values", "[cuda][nvrtc]") {
  LoopProgram p;
  SymInt s0 = sym("s0"), s1 = sym("s1");
  std::map<DType, BufferId> in;
  for (DType t : kAllDTypes)
    in[t] = p.addInput(t, {s0});
  for (DType from : kAllDTypes)
    for (DType to : kAllDTypes)
      if (from != to)
        p.markOutput(p.pointwise(
            {s0}, [&](Ops &ops, Idx i) { return ops.cast(ops.load(in[from], {i[0]}), to); }));
  // Literals: non-finite and signed-zero floats, the extremes of every integer type.
  const double inf = std::numeric_limits<double>::infinity();
  for (double v : {inf, -inf, std::nan(""), -0.0, 1e-30, 65504.0})
    for (DType t : {DType::Float16, DType::BFloat16, F32, DType::Float64})
      p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) {
        return ops.add(ops.load(in[t], {i[0]}), ops.constant(v, t));
      }));
  for (DType t : {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64}) {
    int64_t lo = t == DType::UInt8   ? 0
                 : t == DType::Int8  ? -128
                 : t == DType::Int16 ? -32768
                 : t == DType::Int32 ? std::numeric_limits<int32_t>::min()
                                     : std::numeric_limits<int64_t>::min();
    p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) {
      return ops.maximum(ops.load(in[t], {i[0]}), ops.constant(lo, t));
    }));
  }
  // Index values and a view's index math: floordiv/mod of a flattened [s0, s1] read as [s1, s0].
  LoopProgram q;
  BufferId x = q.addInput(F32, {s0 * s1});
  q.markOutput(q.pointwise({s1, s0}, [&](Ops &ops, Idx i) {
    IndexExpr k = i[0] * s0 + i[1];
    Val v = ops.load(x, {ops.indexMod(k, s1) * s0 + ops.indexFloorDiv(k, s1)});
    return v * ops.cast(ops.indexValue(i[0] - i[1]), F32);
  }));
  CudaModule m = emitCuda(unfused(p)), mq = emitCuda(unfused(q));
  for (const char *text :
       {"kiln::inff()", "-kiln::inff()", "kiln::nanf()", "kiln::inf()", "(-0.0f)", "1e-30f",
        "(-9223372036854775807LL - 1)", "((signed char)-128)", "kiln::f2i(", "(float)(double)",
        "kiln::round_f16(", "kiln::round_bf16(", "(double)"}) {
    INFO(text);
    CHECK(has(m.source, text));
  }
  CHECK(has(mq.nodes[0].kernels[0].code, "kiln::imod("));
  CHECK(has(mq.nodes[0].kernels[0].code, "kiln::idiv("));
  // The store is contiguous (a vector kernel), the load is not affine (read lane by lane).
  REQUIRE(mq.nodes[0].kernels.size() == 2);
  CHECK(mq.nodes[0].vector.aligned == std::vector<BufferId>{mq.nodes[0].kernels[1].args[1].buffer});
  CHECK(has(mq.nodes[0].kernels[1].code, "const long long i1_lane = i1 + lane;"));
  if (!nvrtc())
    return;
  compileEverywhere(m, Sass::None);
  compileEverywhere(mq);
}

TEST_CASE("every reduction kind and dtype, as rows, columns and split full reductions",
          "[cuda][nvrtc]") {
  LoopProgram p;
  SymInt s0 = sym("s0"), s1 = sym("s1");
  std::map<DType, BufferId> in;
  for (DType t : kAllDTypes)
    in[t] = p.addInput(t, {s0, s1});
  size_t nodes = 0;
  for (ReductionKind kind :
       {ReductionKind::Sum, ReductionKind::Prod, ReductionKind::Max, ReductionKind::Min,
        ReductionKind::ArgMax, ReductionKind::ArgMin, ReductionKind::Welford})
    for (DType t : kAllDTypes) {
      bool numeric = kind == ReductionKind::Sum || kind == ReductionKind::Prod;
      if ((numeric && t == DType::Bool) || (kind == ReductionKind::Welford && !isFloating(t)))
        continue;
      auto rows = [&](Ops &ops, Idx i) { return ops.load(in[t], {i[0], i[1]}); };
      auto cols = [&](Ops &ops, Idx i) { return ops.load(in[t], {i[1], i[0]}); };
      if (kind == ReductionKind::Welford) {
        // The means are outputs: a node whose results nobody reads is not scheduled.
        p.markOutput(p.welford({s0}, {s1}, rows).mean);
        p.markOutput(p.welford({s1}, {s0}, cols).mean);
        p.markOutput(p.welford({}, {s0, s1}, rows).mean);
      } else {
        p.markOutput(p.reduction(kind, {s0}, {s1}, rows));
        p.markOutput(p.reduction(kind, {s1}, {s0}, cols));
        p.markOutput(p.reduction(kind, {}, {s0, s1}, rows));
      }
      nodes += 3;
    }
  CudaModule m = emitCuda(unfused(p));
  REQUIRE(m.nodes.size() == nodes);
  for (size_t n = 0; n < nodes; n += 3) {
    INFO(p.nodes()[n].body->str());
    CHECK(roles(m.nodes[n]) == std::vector<KernelRole>{KernelRole::ReduceBlock});
    CHECK(roles(m.nodes[n + 1]) == std::vector<KernelRole>{KernelRole::ReduceThread});
    CHECK(roles(m.nodes[n + 2]) == std::vector<KernelRole>{KernelRole::ReduceBlock,
                                                           KernelRole::ReducePartial,
                                                           KernelRole::ReduceFinal});
    CHECK(m.nodes[n + 2].partialStateBytes > 0);
  }
  for (const char *text :
       {"kiln::Sum<long long>", "kiln::Prod<float>", "kiln::Max<int>", "kiln::Min<double>",
        "kiln::ArgMax<float>", "kiln::ArgMin<int>", "kiln::Welford<double>", "{(-128)}",
        "{(-2147483647 - 1)}", "__shfl_down_sync"}) {
    INFO(text);
    CHECK(has(m.source + std::string(cudaPrelude()), text));
  }
  if (!nvrtc())
    return;
  compileEverywhere(m, Sass::None);
}

TEST_CASE("the fused patterns of the schedule tests run as scheduled and compile for sm_80 and "
          "sm_90",
          "[cuda][nvrtc][schedule]") {
  using Kind = CudaStep::Kind;
  struct Pattern {
    const char *name;
    const char *kir;
    std::vector<Kind> steps;
  };
  const std::vector<Pattern> patterns = {
      {"softmax", kSoftmax, {Kind::Fused}},
      {"layer_norm", kLayerNorm, {Kind::Fused}},
      {"rms_norm", kRmsNorm, {Kind::Fused}},
      // each linear, then its bias + gelu epilogue alone (with its 128-bit twin)
      {"gelu epilogue", kGeluMlp, {Kind::Extern, Kind::Node, Kind::Extern, Kind::Node}},
      {"attention softmax", kAttention, {Kind::Extern, Kind::Fused, Kind::Extern}},
      {"tiled transpose", kTranspose, {Kind::Node}},
  };
  for (const Pattern &pattern : patterns) {
    INFO(pattern.name);
    passes::schedule::Schedule s = scheduled(pattern.kir);
    INFO(s.str());
    CudaModule m = emitCuda(s);
    std::vector<Kind> steps;
    for (const CudaStep &step : m.steps)
      steps.push_back(step.kind);
    CHECK(steps == pattern.steps);
    // One fused kernel per loop kernel of several nodes, its nodes the kernel's nodes.
    size_t fused = 0;
    for (const passes::schedule::Kernel &k : s.kernels)
      if (k.kind == passes::schedule::KernelKind::Loop && k.nodes.size() > 1) {
        REQUIRE(fused < m.fused.size());
        REQUIRE(m.fused[fused].members.size() == 1);
        CHECK(m.fused[fused++].members[0].nodes == k.nodes);
      }
    bool tiled = pattern.kir == kTranspose; // the schedule tiles it: no vector twin
    for (const NodeKernels &n : m.nodes)
      CHECK(roles(n) ==
            std::vector<KernelRole>{KernelRole::Pointwise, tiled ? KernelRole::PointwiseTiled
                                                                 : KernelRole::PointwiseVector});
    if (nvrtc())
      compileEverywhere(m, Sass::NvrtcAndPtxas);
  }
}

TEST_CASE("golden: an add-relu pointwise kernel and its 128-bit twin", "[cuda][golden]") {
  CudaModule m = emitCuda(unfused(addReluProgram()));
  REQUIRE(m.nodes.size() == 1);
  REQUIRE(roles(m.nodes[0]) ==
          std::vector<KernelRole>{KernelRole::Pointwise, KernelRole::PointwiseVector});
  CHECK(
      m.nodes[0].kernels[0].code ==
      R"(extern "C" __global__ void __launch_bounds__(256) node0_buf2(const float *buf0, const float *buf1, float *buf2, long long sz_s0, long long sz_s1) {
  const long long points = sz_s0 * sz_s1;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < points; p += stride) {
    const long long i1 = p % sz_s1;
    const long long i0 = p / sz_s1;
    const float v0 = buf0[i0 * sz_s1 + i1];
    const float v1 = buf1[i1];
    const float v2 = v0 + v1;
    const float v3 = kiln::max(v2, 0.0f);
    buf2[i0 * sz_s1 + i1] = v3;
  }
}
)");
  CHECK(
      m.nodes[0].kernels[1].code ==
      R"(extern "C" __global__ void __launch_bounds__(256) node0_buf2_v4(const float *buf0, const float *buf1, float *buf2, long long sz_s0, long long sz_s1) {
  const long long points = sz_s0 * kiln::idiv(sz_s1, 4);
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < points; p += stride) {
    const long long q = p % (kiln::idiv(sz_s1, 4));
    const long long i0 = p / (kiln::idiv(sz_s1, 4));
    const long long i1 = q * 4;
    const kiln::Vec<float, 4> w0 = kiln::load_vec<4>(buf0 + i0 * sz_s1 + i1);
    const kiln::Vec<float, 4> w1 = kiln::load_vec<4>(buf1 + i1);
    kiln::Vec<float, 4> out;
    #pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const float v0 = w0.v[lane];
      const float v1 = w1.v[lane];
      const float v2 = v0 + v1;
      const float v3 = kiln::max(v2, 0.0f);
      out.v[lane] = v3;
    }
    kiln::store_vec<4>(buf2 + i0 * sz_s1 + i1, out);
  }
}
)");
  // Valid when s1 is a multiple of 4 and all three base pointers are 16-byte aligned.
  const VectorPlan &plan = m.nodes[0].vector;
  CHECK(plan.width == 4);
  CHECK(plan.divisible == std::vector<SymInt>{sym("s1")});
  CHECK(plan.aligned == std::vector<BufferId>{BufferId{0}, BufferId{1}, BufferId{2}});
}

TEST_CASE("golden: the scheduled row softmax, one fused kernel (a row per block, the row's max "
          "and sum in registers)",
          "[cuda][golden]") {
  passes::schedule::Schedule s = scheduled(kSoftmax);
  CudaModule m = emitCuda(s);
  REQUIRE(m.steps.size() == 1);
  REQUIRE(m.fused.size() == 1);
  CHECK(m.fused[0].members[0].rows);
  CHECK(
      m.fused[0].kernel.code ==
      R"(extern "C" __global__ void __launch_bounds__(256) fused0_buf1(const float *buf0, float *buf3, long long sz_s0) {
  __shared__ unsigned long long kiln_smem[16]; // 32 accumulators, 8-byte aligned
  const long long units0 = sz_s0;
  const long long units = units0;
  for (long long u = blockIdx.x; u < units; u += gridDim.x) {
    const long long i0 = u;
    float l_buf1{};
    float l_buf2{};
    {
      kiln::Max<float> *smem = reinterpret_cast<kiln::Max<float> *>(kiln_smem);
      const kiln::Max<float> identity = {-kiln::inff()};
      const long long reduced = 128;
      kiln::Max<float> acc = identity;
      for (long long red = threadIdx.x; red < reduced; red += blockDim.x) {
        const long long r0 = red;
        const float v0 = buf0[i0 * 128 + r0];
        acc.push(v0, red);
      }
      acc = kiln::block_allreduce(acc, smem, identity);
      l_buf1 = acc.acc;
    }
    {
      kiln::Sum<float> *smem = reinterpret_cast<kiln::Sum<float> *>(kiln_smem);
      const kiln::Sum<float> identity = {0.0f};
      const long long reduced = 128;
      const float v1 = l_buf1;
      kiln::Sum<float> acc = identity;
      for (long long red = threadIdx.x; red < reduced; red += blockDim.x) {
        const long long r0 = red;
        const float v2 = buf0[i0 * 128 + r0];
        const float v3 = v2 - v1;
        const float v4 = expf(v3);
        acc.push(v4, red);
      }
      acc = kiln::block_allreduce(acc, smem, identity);
      l_buf2 = acc.acc;
    }
    {
      const float v5 = l_buf1;
      const float v6 = l_buf2;
      const float v7 = 1.0f / v6;
      for (long long q = threadIdx.x; q < 128; q += blockDim.x) {
        const long long i1 = q;
        const float v8 = buf0[i0 * 128 + i1];
        const float v9 = v8 - v5;
        const float v10 = expf(v9);
        const float v11 = v10 * v7;
        buf3[i0 * 128 + i1] = v11;
      }
    }
  }
}
)");
}
TEST_CASE("golden: a float16 full sum split across blocks, then merged", "[cuda][golden]") {
  LoopProgram p;
  BufferId x = p.addInput(DType::Float16, {sym("s0")});
  p.markOutput(p.reduction(ReductionKind::Sum, {}, {sym("s0")},
                           [&](Ops &ops, Idx i) { return ops.cast(ops.load(x, {i[0]}), F32); }));
  CudaModule m = emitCuda(unfused(p));
  REQUIRE(m.nodes.size() == 1);
  REQUIRE(roles(m.nodes[0]) == std::vector<KernelRole>{KernelRole::ReduceBlock,
                                                       KernelRole::ReducePartial,
                                                       KernelRole::ReduceFinal});
  CHECK(m.nodes[0].partialStateBytes == 4);
  CHECK(
      m.nodes[0].kernels[1].code ==
      R"(extern "C" __global__ void __launch_bounds__(256) node0_buf1_partial(const unsigned short *buf0, long long sz_s0, kiln::Sum<float> *partials, long long chunks) {
  static_assert(sizeof(kiln::Sum<float>) == 4, "the launcher sizes partials by this");
  __shared__ kiln::Sum<float> smem[32];
  const kiln::Sum<float> identity = {0.0f};
  const long long outputs = 1;
  const long long reduced = sz_s0;
  const long long chunk = (reduced + chunks - 1) / chunks;
  for (long long job = blockIdx.x; job < outputs * chunks; job += gridDim.x) {
    const long long begin = job % chunks * chunk;
    const long long end = kiln::imin(reduced, begin + chunk);
    kiln::Sum<float> acc = identity;
    for (long long red = begin + threadIdx.x; red < end; red += blockDim.x) {
      const long long r0 = red;
      const float v0 = kiln::h2f(buf0[r0]);
      acc.push(v0, red);
    }
    acc = kiln::block_reduce(acc, smem, identity);
    if (threadIdx.x == 0) {
      partials[job] = acc;
    }
  }
}
)");
  CHECK(
      m.nodes[0].kernels[2].code ==
      R"(extern "C" __global__ void __launch_bounds__(256) node0_buf1_final(float *buf1, long long sz_s0, const kiln::Sum<float> *partials, long long chunks) {
  __shared__ kiln::Sum<float> smem[32];
  const kiln::Sum<float> identity = {0.0f};
  const long long outputs = 1;
  for (long long o = blockIdx.x; o < outputs; o += gridDim.x) {
    kiln::Sum<float> acc = identity;
    for (long long c = threadIdx.x; c < chunks; c += blockDim.x) {
      acc.merge(partials[o * chunks + c]);
    }
    acc = kiln::block_reduce(acc, smem, identity);
    if (threadIdx.x == 0) {
      buf1[0] = acc.acc;
    }
  }
}
)");
  std::vector<KernelArg::Kind> kinds;
  for (const KernelArg &a : m.nodes[0].kernels[2].args)
    kinds.push_back(a.kind);
  CHECK(kinds == std::vector<KernelArg::Kind>{KernelArg::Kind::Buffer, KernelArg::Kind::Size,
                                              KernelArg::Kind::Partials, KernelArg::Kind::Chunks});
}

TEST_CASE("launch plans: vector or scalar pointwise, block, thread and split reductions",
          "[cuda][launch]") {
  LoopProgram p = addReluProgram();
  CudaModule m = emitCuda(unfused(p));
  const NodeKernels &n = m.nodes[0];
  std::vector<uint64_t> aligned = {0x1000, 0x2000, 0x3000};
  LaunchLimits limits;
  limits.multiprocessors = 4;
  // s1 = 128, aligned: the vector kernel, 1000 * 32 iterations over 256 threads per block.
  std::vector<KernelLaunch> l = planLaunches(p, n, {{"s0", 1000}, {"s1", 128}}, aligned, limits);
  REQUIRE(l.size() == 1);
  CHECK(l[0].kernel->role == KernelRole::PointwiseVector);
  CHECK(l[0].block == 256);
  CHECK(l[0].grid == 125); // under the cap of 4 SMs * 32 blocks
  // A row length that is not a multiple of 4, or a misaligned bias: the scalar kernel.
  CHECK_FALSE(vectorApplies(p, n, {{"s0", 3}, {"s1", 130}}, aligned));
  std::vector<uint64_t> misaligned = {0x1000, 0x2004, 0x3000};
  CHECK_FALSE(vectorApplies(p, n, {{"s0", 3}, {"s1", 128}}, misaligned));
  l = planLaunches(p, n, {{"s0", 3}, {"s1", 128}}, misaligned, limits);
  REQUIRE(l.size() == 1);
  CHECK(l[0].kernel->role == KernelRole::Pointwise);
  CHECK(l[0].grid == 2);
  l = planLaunches(p, n, {{"s0", 1 << 20}, {"s1", 130}}, aligned, limits);
  CHECK(l[0].grid == 128); // grid-stride: capped at 4 * 32
  CHECK(planLaunches(p, n, {{"s0", 0}, {"s1", 128}}, aligned, limits).empty());

  LoopProgram r;
  SymInt s0 = sym("s0"), s1 = sym("s1");
  BufferId x = r.addInput(F32, {s0, s1});
  r.markOutput(r.reduction(ReductionKind::Sum, {s0}, {s1},
                           [&](Ops &ops, Idx i) { return ops.load(x, {i[0], i[1]}); }));
  r.markOutput(r.reduction(ReductionKind::Sum, {s1}, {s0},
                           [&](Ops &ops, Idx i) { return ops.load(x, {i[1], i[0]}); }));
  r.markOutput(r.reduction(ReductionKind::ArgMax, {}, {s0, s1},
                           [&](Ops &ops, Idx i) { return ops.load(x, {i[0], i[1]}); }));
  CudaModule mr = emitCuda(unfused(r));
  std::vector<uint64_t> none(4, 0);
  ir::SymbolValues rows = {{"s0", 1000}, {"s1", 100}};
  l = planLaunches(r, mr.nodes[0], rows, none, limits); // one block (128 threads) per row
  REQUIRE(l.size() == 1);
  CHECK(l[0].kernel->role == KernelRole::ReduceBlock);
  CHECK(l[0].block == 128);
  CHECK(l[0].grid == 128);
  l = planLaunches(r, mr.nodes[1], rows, none, limits); // one thread per column
  CHECK(l[0].kernel->role == KernelRole::ReduceThread);
  CHECK(l[0].grid == 1);
  l = planLaunches(r, mr.nodes[2], rows, none, limits); // 1e5 points: split in 25 chunks
  REQUIRE(l.size() == 2);
  CHECK(l[0].kernel->role == KernelRole::ReducePartial);
  CHECK(l[0].chunks == 25);
  CHECK(l[0].grid == 25);
  CHECK(l[0].workspaceBytes == 25 * 16); // ArgMax<float>: value + int64 index
  CHECK(l[1].kernel->role == KernelRole::ReduceFinal);
  CHECK(l[1].grid == 1);
  CHECK(l[1].block == 32);
  CHECK(l[1].workspaceBytes == l[0].workspaceBytes);
  l = planLaunches(r, mr.nodes[2], {{"s0", 10}, {"s1", 10}}, none, limits); // short: one block
  REQUIRE(l.size() == 1);
  CHECK(l[0].kernel->role == KernelRole::ReduceBlock);
  CHECK(l[0].block == 128);
}

TEST_CASE("NVRTC errors carry the log and the offending line", "[cuda][nvrtc][errors]") {
  if (!nvrtc())
    return;
  CudaCompileOptions options;
  options.cache = nullptr;
  std::string e = errorOf([&] {
    compileCuda("extern \"C\" __global__ void k(float *x) {\n  x[0] = undefined_thing;\n}\n",
                options);
  });
  CHECK(has(e, "kiln: NVRTC could not compile kiln_kernels.cu for sm_80"));
  CHECK(has(e, "NVRTC_ERROR_COMPILATION"));
  CHECK(has(e, "identifier \"undefined_thing\" is undefined"));
  CHECK(has(e, "kiln_kernels.cu line 2:   x[0] = undefined_thing;"));
  options.arch = 10;
  e = errorOf([&] { compileCuda("", options); });
  CHECK(has(e, "cannot compile for sm_10"));
  CHECK(has(e, "sm_80"));
  // A failed compile is not cached: the next request compiles (and fails) again.
  CudaCache cache("");
  options.arch = 80;
  options.cache = &cache;
  for (int k = 0; k < 2; ++k)
    CHECK(has(errorOf([&] { compileCuda("this is not CUDA", options); }), "error"));
  CHECK(cache.stats().misses == 0);
}

TEST_CASE("a missing or wrong libnvrtc is a clear error", "[cuda][nvrtc][errors]") {
  std::string e = errorOf([] { Nvrtc::load({"/nonexistent/libnvrtc.so.13", "libnvrtc.so.7"}); });
  CHECK(has(e, "kiln: NVRTC is not available"));
  CHECK(has(e, "/nonexistent/libnvrtc.so.13: "));
  CHECK(has(e, "libnvrtc.so.7: "));
  CHECK(has(e, "KILN_NVRTC"));
  CHECK(has(e, "pip install nvidia-cuda-nvrtc"));
  e = errorOf([] { Nvrtc::load({"libm.so.6"}); });
  CHECK(has(e, "does not export nvrtcVersion"));
  CHECK(has(e, "not an NVRTC library"));
  std::vector<std::string> candidates = Nvrtc::searchCandidates();
  CHECK(candidates.back() == "libnvrtc.so");
  if (const Nvrtc *n = nvrtc()) {
    CHECK(n->version().first >= 11);
    std::vector<int> archs = n->supportedArchs();
    CHECK(std::find(archs.begin(), archs.end(), 90) != archs.end());
    CHECK(std::find(candidates.begin(), candidates.end(), n->path()) != candidates.end());
    CHECK(Nvrtc::load({n->path()})->path() == n->path());
  }
}

TEST_CASE("the CUDA driver is optional: a clear reason when it cannot be used", "[cuda][driver]") {
  std::string reason;
  CHECK(Driver::load("/nonexistent/libcuda.so.1", &reason) == nullptr);
  CHECK(has(reason, "the NVIDIA driver library could not be loaded"));
  CHECK(Driver::load("libm.so.6", &reason) == nullptr);
  CHECK(has(reason, "does not export cuInit"));
  // The toolkit's link stub exports the API but refuses to initialize.
  for (const char *stub : {"/usr/local/cuda/lib64/stubs/libcuda.so",
                           "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so"})
    if (std::filesystem::exists(stub)) {
      CHECK(Driver::load(stub, &reason) == nullptr);
      CHECK(has(reason, "cuInit failed: "));
      break;
    }
  // Here: no GPU (the reason says why) or a working driver with its devices.
  if (const Driver *d = Driver::get()) {
    CHECK(Driver::unavailableReason().empty());
    REQUIRE(d->deviceCount() > 0);
    DeviceInfo info = d->device(0);
    CHECK(!info.name.empty());
    CHECK(info.smVersion() >= 50);
    CHECK(has(errorOf([&] { d->device(d->deviceCount()); }), "does not exist"));
    d->synchronize(0);
  } else {
    CHECK(!Driver::unavailableReason().empty());
    CHECK_FALSE(Driver::isAvailable());
  }
}

TEST_CASE("compiled modules are cached in memory and on disk, keyed by source and arch",
          "[cuda][nvrtc][cache]") {
  CHECK(sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256Hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256Hex(std::string(1000, 'a')) ==
        "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
  CHECK(cudaCacheKey({"ab", "c"}) != cudaCacheKey({"a", "bc"}));
  if (!nvrtc())
    return;
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / fmt::format("kiln-cuda-cache-{}", ::getpid());
  fs::remove_all(dir);
  std::string source = emitCuda(unfused(softmaxProgram())).source;
  CudaCompileOptions options;
  CudaCache disk(dir.string());
  options.cache = &disk;
  CompiledCuda first = compileCuda(source, options);
  CHECK_FALSE(first.fromCache);
  CompiledCuda again = compileCuda(source, options);
  CHECK(again.fromCache);
  CHECK(again.ptx == first.ptx);
  CHECK(again.cubin == first.cubin);
  CHECK(disk.stats().memoryHits == 1);
  // Another process (a fresh cache over the same folder) reads the disk entry.
  CudaCache other(dir.string());
  options.cache = &other;
  CompiledCuda fromDisk = compileCuda(source, options);
  CHECK(fromDisk.fromCache);
  CHECK(fromDisk.cubin == first.cubin);
  CHECK(other.stats().diskHits == 1);
  // Another architecture or kiln version is another entry.
  options.arch = 90;
  CHECK_FALSE(compileCuda(source, options).fromCache);
  options.arch = 80;
  options.version = "kiln-test/other-version";
  CHECK_FALSE(compileCuda(source, options).fromCache);
  // A corrupt entry is discarded and rebuilt.
  options.version = std::string(kCudaCodegenVersion);
  size_t entries = 0;
  for (const fs::directory_entry &f : fs::directory_iterator(dir / "cuda")) {
    std::fstream(f.path(), std::ios::in | std::ios::out | std::ios::binary).seekp(100).put('!');
    ++entries;
  }
  CHECK(entries == 3);
  CudaCache third(dir.string());
  options.cache = &third;
  CompiledCuda rebuilt = compileCuda(source, options);
  CHECK_FALSE(rebuilt.fromCache);
  CHECK(rebuilt.cubin == first.cubin);
  CHECK(third.stats().corrupt == 1);
  fs::remove_all(dir);
}

TEST_CASE("SASS from the toolkit's ptxas matches NVRTC's targets", "[cuda][nvrtc][ptxas]") {
  std::optional<std::string> ptxas = findPtxas();
  if (!nvrtc() || !ptxas) {
    WARN("ptxas checks skipped: " << (ptxas ? "no NVRTC" : "no ptxas (set KILN_PTXAS)"));
    return;
  }
  CudaCompileOptions options;
  options.arch = 90;
  options.cache = nullptr;
  options.preferPtxas = true;
  CompiledCuda c;
  try {
    c = compileCuda(emitCuda(unfused(softmaxProgram())).source, options);
  } catch (const Error &e) {
    if (!ptxasTooOld(e.what()))
      throw;
    WARN("ptxas skipped: " << e.what());
    return;
  }
  CHECK(c.options[0] == "--gpu-architecture=compute_90");
  CHECK(c.cubinSource == CubinSource::Ptxas);
  CHECK(c.cubin.rfind("\x7f"
                      "ELF",
                      0) == 0);
  CHECK(!ptxVersion(c.ptx).empty());
  std::string e = errorOf([&] { assembleWithPtxas(".version 1.0\nnonsense\n", 90, *ptxas); });
  CHECK(has(e, "kiln: ptxas failed for sm_90 (PTX ISA 1.0"));
}

TEST_CASE("golden: index expressions as C, from the SymInt's structure", "[cuda][golden]") {
  // Each index value of an i64 pointwise node over [s0, s1] is one `const long long` line.
  using Index = IndexExpr (*)(Idx);
  const std::vector<std::pair<Index, std::string>> cases = {
      {[](Idx i) { return i[1] * 2 - i[0] * 3; }, "i1 * 2 - i0 * 3"}, // starts positive
      {[](Idx i) { return 5 - i[0]; }, "5 - i0"},
      {[](Idx i) { return -i[0] - i[1]; }, "0 - i0 - i1"},
      {[](Idx i) { return i[0] * i[0] * i[1]; }, "i0 * i0 * i1"},
      {[](Idx i) { return floorDiv(i[0] + i[1], 3); }, "kiln::idiv(i0 + i1, 3)"},
      {[](Idx i) { return mod(i[0] - i[1] * 2, sym("s1")); }, "kiln::imod(i0 - i1 * 2, sz_s1)"},
      {[](Idx i) { return min(i[1], sym("s0") - 1); }, "kiln::imin(i1, sz_s0 - 1)"},
      {[](Idx i) { return max(i[0], -1) - 1; }, "kiln::imax(i0, -1) - 1"},
      {[](Idx i) { return floorDiv(i[0], 2) * sym("s1") * 4 - 7; },
       "sz_s1 * kiln::idiv(i0, 2) * 4 - 7"},
  };
  LoopProgram p;
  p.addInput(F32, {sym("s0"), sym("s1")});
  for (const auto &c : cases) {
    Index f = c.first;
    p.markOutput(
        p.pointwise({sym("s0"), sym("s1")}, [f](Ops &ops, Idx i) { return ops.indexValue(f(i)); }));
  }
  CudaModule m = emitCuda(unfused(p));
  REQUIRE(m.nodes.size() == cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    INFO(m.nodes[k].kernels[0].code);
    CHECK(has(m.nodes[k].kernels[0].code, "const long long v0 = " + cases[k].second + ";\n"));
  }
  if (nvrtc())
    compileEverywhere(m);
}
