// CpuJit end to end: hand-written MLIR kernels following the kernel ABI (codegen/README.md),
// lowered, optimized for the host, JIT-linked and run; launch over the thread pool; errors.
#include "codegen/cpu/jit.h"
#include "codegen/cpu/launch.h"
#include "codegen/cpu/lowering.h"
#include "runtime/error.h"
#include "runtime/thread_pool.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <kiln_catch.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace kiln;
using namespace kiln::codegen::cpu;

namespace {

const char *kDescriptor = "!llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>";

/// The ABI prologue for an int64 size in args[slot]: defines %<name>_i64 and %<name> (index).
std::string sizeArg(const std::string &name, int slot) {
  return fmt::format(R"(
    %{0}_slot = llvm.getelementptr %args[{1}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
    %{0}_i64 = llvm.load %{0}_slot : !llvm.ptr -> i64
    %{0} = arith.index_cast %{0}_i64 : i64 to index)",
                     name, slot);
}

/// The ABI prologue for a buffer in args[slot]: a contiguous memref<?x<elem>> of %<size> elements.
std::string bufferArg(const std::string &name, int slot, const std::string &elem,
                      const std::string &sizeI64) {
  return fmt::format(R"(
    %{0}_slot = llvm.getelementptr %args[{1}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
    %{0}_ptr = llvm.load %{0}_slot : !llvm.ptr -> !llvm.ptr
    %{0}_d0 = llvm.mlir.undef : {4}
    %{0}_zero = llvm.mlir.constant(0 : i64) : i64
    %{0}_one = llvm.mlir.constant(1 : i64) : i64
    %{0}_d1 = llvm.insertvalue %{0}_ptr, %{0}_d0[0] : {4}
    %{0}_d2 = llvm.insertvalue %{0}_ptr, %{0}_d1[1] : {4}
    %{0}_d3 = llvm.insertvalue %{0}_zero, %{0}_d2[2] : {4}
    %{0}_d4 = llvm.insertvalue %{3}, %{0}_d3[3, 0] : {4}
    %{0}_d5 = llvm.insertvalue %{0}_one, %{0}_d4[4, 0] : {4}
    %{0} = builtin.unrealized_conversion_cast %{0}_d5 : {4} to memref<?x{2}>)",
                     name, slot, elem, sizeI64, kDescriptor);
}

const char *kRange = R"(
    %lo = arith.index_cast %begin : i64 to index
    %hi = arith.index_cast %end : i64 to index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index)";

/// out[i] = a[i] + b[i]: 8-wide vector body, scalar tail. args: a, b, out, n.
std::string addKernel(const std::string &name = "add") {
  return fmt::format(R"(
  func.func @{0}(%args: !llvm.ptr, %begin: i64, %end: i64) {{
    {1}{2}{3}{4}{5}
    %len = arith.subi %hi, %lo : index
    %rem = arith.remsi %len, %c8 : index
    %vend = arith.subi %hi, %rem : index
    scf.for %i = %lo to %vend step %c8 {{
      %x = vector.load %A[%i] : memref<?xf32>, vector<8xf32>
      %y = vector.load %B[%i] : memref<?xf32>, vector<8xf32>
      %s = arith.addf %x, %y : vector<8xf32>
      vector.store %s, %O[%i] : memref<?xf32>, vector<8xf32>
    }}
    scf.for %i = %vend to %hi step %c1 {{
      %x = memref.load %A[%i] : memref<?xf32>
      %y = memref.load %B[%i] : memref<?xf32>
      %s = arith.addf %x, %y : f32
      memref.store %s, %O[%i] : memref<?xf32>
    }}
    return
  }})",
                     name, sizeArg("n", 3), bufferArg("A", 0, "f32", "n_i64"),
                     bufferArg("B", 1, "f32", "n_i64"), bufferArg("O", 2, "f32", "n_i64"), kRange);
}

/// exp, tanh, erf and log(|x|) of x, 8 wide with a masked tail. args: x, 4 outputs, n.
std::string mathKernel() {
  return fmt::format(R"(
  func.func @math(%args: !llvm.ptr, %begin: i64, %end: i64) {{
    {0}{1}{2}{3}{4}{5}{6}
    %zero = arith.constant dense<0.0> : vector<8xf32>
    scf.for %i = %lo to %hi step %c8 {{
      %left = arith.subi %hi, %i : index
      %m = vector.create_mask %left : vector<8xi1>
      %x = vector.maskedload %X[%i], %m, %zero : memref<?xf32>, vector<8xi1>, vector<8xf32> into vector<8xf32>
      %e = math.exp %x : vector<8xf32>
      %t = math.tanh %x : vector<8xf32>
      %f = math.erf %x : vector<8xf32>
      %a = math.absf %x : vector<8xf32>
      %l = math.log %a : vector<8xf32>
      vector.maskedstore %E[%i], %m, %e : memref<?xf32>, vector<8xi1>, vector<8xf32>
      vector.maskedstore %T[%i], %m, %t : memref<?xf32>, vector<8xi1>, vector<8xf32>
      vector.maskedstore %F[%i], %m, %f : memref<?xf32>, vector<8xi1>, vector<8xf32>
      vector.maskedstore %L[%i], %m, %l : memref<?xf32>, vector<8xi1>, vector<8xf32>
    }}
    return
  }})",
                     sizeArg("n", 5), bufferArg("X", 0, "f32", "n_i64"),
                     bufferArg("E", 1, "f32", "n_i64"), bufferArg("T", 2, "f32", "n_i64"),
                     bufferArg("F", 3, "f32", "n_i64"), bufferArg("L", 4, "f32", "n_i64"), kRange);
}

/// out[0] = sum of x[begin, end): vector accumulator, masked tail, vector.reduction.
/// args: x, out, n.
std::string sumKernel() {
  return fmt::format(R"(
  func.func @sum(%args: !llvm.ptr, %begin: i64, %end: i64) {{
    {0}{1}{2}{3}
    %zero = arith.constant dense<0.0> : vector<8xf32>
    %acc = scf.for %i = %lo to %hi step %c8 iter_args(%acc = %zero) -> (vector<8xf32>) {{
      %left = arith.subi %hi, %i : index
      %m = vector.create_mask %left : vector<8xi1>
      %x = vector.maskedload %X[%i], %m, %zero : memref<?xf32>, vector<8xi1>, vector<8xf32> into vector<8xf32>
      %next = arith.addf %acc, %x : vector<8xf32>
      scf.yield %next : vector<8xf32>
    }}
    %s = vector.reduction <add>, %acc : vector<8xf32> into f32
    memref.store %s, %O[%c0] : memref<?xf32>
    return
  }})",
                     sizeArg("n", 2), bufferArg("X", 0, "f32", "n_i64"),
                     bufferArg("O", 1, "f32", "n_i64"), kRange);
}

std::vector<float> iota(int64_t n, float scale, float offset) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = offset + scale * static_cast<float>(i % 1000);
  return v;
}

bool close(float got, double want, double atol, double rtol) {
  if (std::isinf(want))
    return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

} // namespace

TEST_CASE("an add kernel with a vector body and a scalar tail", "[cpu_jit]") {
  CpuJit jit;
  jit.addModule(addKernel());
  KernelFn add = jit.lookupKernel("add");
  for (int64_t n : {1, 7, 8, 1000, 1031}) {
    std::vector<float> a = iota(n, 0.5f, 1.0f), b = iota(n, -0.25f, 3.0f), out(n, -1.0f);
    void *args[] = {a.data(), b.data(), out.data(), packSize(n)};
    add(args, 0, n);
    for (int64_t i = 0; i < n; ++i)
      REQUIRE(out[i] == a[i] + b[i]);
    // A sub-range touches exactly its own elements.
    if (n > 4) {
      std::fill(out.begin(), out.end(), -1.0f);
      add(args, 2, n - 1);
      for (int64_t i = 0; i < n; ++i)
        REQUIRE(out[i] == (i >= 2 && i < n - 1 ? a[i] + b[i] : -1.0f));
    }
  }
}

TEST_CASE("exp, tanh, erf and log use polynomial approximations", "[cpu_jit]") {
  JitOptions options;
  options.dumpStages = true;
  CpuJit jit(options);
  jit.addModule(mathKernel());
  KernelFn math = jit.lookupKernel("math");
  for (int64_t n : {1, 7, 8, 1031}) {
    std::vector<float> x(n), e(n), t(n), f(n), l(n);
    for (int64_t i = 0; i < n; ++i)
      x[i] = -12.0f + 24.0f * (static_cast<float>(i) + 0.5f) / static_cast<float>(n);
    void *args[] = {x.data(), e.data(), t.data(), f.data(), l.data(), packSize(n)};
    math(args, 0, n);
    for (int64_t i = 0; i < n; ++i) {
      INFO("x = " << x[i]);
      CHECK(close(e[i], std::exp(double(x[i])), 0, 2e-6));
      CHECK(close(t[i], std::tanh(double(x[i])), 2e-6, 2e-6));
      CHECK(close(f[i], std::erf(double(x[i])), 2e-6, 2e-6));
      CHECK(close(l[i], std::log(std::fabs(double(x[i]))), 2e-6, 2e-6));
    }
  }
  CompileDumps dumps = jit.dumps();
  CHECK_FALSE(dumps.fromCache);
  CHECK(dumps.loweredMlir.find("llvm.func @math") != std::string::npos);
  CHECK(dumps.loweredMlir.find("math.") == std::string::npos);
  // No libm calls or math intrinsics left: the math vectorized.
  CHECK(dumps.llvmIr.find("define void @math") != std::string::npos);
  for (const char *scalar : {"@llvm.exp.", "@llvm.log.", "@expf", "@tanhf", "@erff", "@logf"})
    CHECK(dumps.llvmIr.find(scalar) == std::string::npos);
  CHECK(dumps.assembly.find("math:") != std::string::npos);
  if (jit.target().features.find("+avx2") != std::string::npos)
    CHECK(dumps.assembly.find("ymm") != std::string::npos);
}

TEST_CASE("a sum reduction with vector.reduction", "[cpu_jit]") {
  CpuJit jit;
  jit.addModule(sumKernel());
  KernelFn sum = jit.lookupKernel("sum");
  for (int64_t n : {1, 7, 8, 1000, 1031}) {
    std::vector<float> x = iota(n, 0.125f, -3.0f);
    float out = 0;
    void *args[] = {x.data(), &out, packSize(n)};
    sum(args, 0, n);
    double want = 0;
    for (float v : x)
      want += v;
    CHECK(close(out, want, 1e-3, 1e-5));
  }
}

TEST_CASE("every opt level and the host target compile the same kernel", "[cpu_jit]") {
  for (int level : {0, 1, 2, 3}) {
    JitOptions options;
    options.optLevel = level;
    CpuJit jit(options);
    jit.addModule(addKernel());
    std::vector<float> a = iota(19, 1.0f, 0.0f), b = iota(19, 2.0f, 0.0f), out(19);
    void *args[] = {a.data(), b.data(), out.data(), packSize(19)};
    jit.lookupKernel("add")(args, 0, 19);
    CHECK(out[18] == 54.0f);
  }
  const TargetDesc &host = hostTarget();
  CHECK_FALSE(host.triple.empty());
  CHECK_FALSE(host.cpu.empty());
  CHECK(host.features.find("+") != std::string::npos);
}

TEST_CASE("launch runs a kernel over the thread pool", "[cpu_jit][launch]") {
  setNumThreads(4);
  CpuJit jit;
  jit.addModule(addKernel());
  KernelFn add = jit.lookupKernel("add");
  const int64_t n = (1 << 20) + 13;
  std::vector<float> a = iota(n, 1.0f, 0.0f), b = iota(n, 0.5f, 2.0f), out(n, -1.0f);
  void *args[] = {a.data(), b.data(), out.data(), packSize(n)};
  launch(add, args, n, 4096);
  for (int64_t i = 0; i < n; ++i)
    REQUIRE(out[i] == a[i] + b[i]);
  setNumThreads(0);
}

namespace {
std::mutex chunksMu;
std::vector<std::pair<int64_t, int64_t>> chunks;
std::set<std::thread::id> chunkThreads;
void recordChunk(void **, int64_t begin, int64_t end) {
  std::lock_guard<std::mutex> lock(chunksMu);
  chunks.emplace_back(begin, end);
  chunkThreads.insert(std::this_thread::get_id());
}
} // namespace

TEST_CASE("launch covers [0, n) once and runs small ranges inline", "[launch]") {
  setNumThreads(4);
  chunks.clear();
  chunkThreads.clear();
  launch(recordChunk, nullptr, 100, 64); // under two grains: one inline call
  REQUIRE(chunks.size() == 1);
  CHECK(chunks[0] == std::make_pair<int64_t, int64_t>(0, 100));
  CHECK(*chunkThreads.begin() == std::this_thread::get_id());

  chunks.clear();
  launch(recordChunk, nullptr, 100000, 1000);
  std::sort(chunks.begin(), chunks.end());
  CHECK(chunks.size() > 1);
  int64_t next = 0;
  for (auto [b, e] : chunks) {
    CHECK(b == next);
    CHECK(e - b >= 1000);
    next = e;
  }
  CHECK(next == 100000);
  chunks.clear();
  launch(recordChunk, nullptr, 0, 10);
  CHECK(chunks.empty());
  CHECK(grainFor(1) == kElementwiseGrain);
  CHECK(grainFor(1 << 20) == 1);
  setNumThreads(0);
}

TEST_CASE("a module built in memory compiles like its text", "[cpu_jit]") {
  std::unique_ptr<mlir::MLIRContext> ctx = createMlirContext();
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(addKernel("add_mem"), ctx.get());
  REQUIRE(module);
  CpuJit jit;
  jit.addModule(module->getOperation());
  std::vector<float> a = iota(9, 1.0f, 0.0f), b = iota(9, 1.0f, 1.0f), out(9);
  void *args[] = {a.data(), b.data(), out.data(), packSize(9)};
  jit.lookupKernel("add_mem")(args, 0, 9);
  CHECK(out[8] == 17.0f);
}

TEST_CASE("invalid MLIR and link failures are kiln::Errors with diagnostics", "[cpu_jit]") {
  CpuJit jit;
  auto messageOf = [&](const std::string &text) -> std::string {
    try {
      jit.addModule(text);
    } catch (const Error &e) {
      return e.what();
    }
    return "";
  };
  std::string syntax = messageOf("func.func @f( {");
  CHECK(syntax.find("invalid MLIR") != std::string::npos);
  CHECK(syntax.find("kernel.mlir:1:") != std::string::npos);
  CHECK(syntax.find("error:") != std::string::npos);

  std::string types = messageOf(R"(
    func.func @bad(%a: f32, %b: i32) -> f32 {
      %c = arith.addf %a, %b : f32
      return %c : f32
    })");
  CHECK(types.find("use of value '%b' expects different type") != std::string::npos);

  std::string lowering = messageOf(R"(
    func.func @cast(%a: i32) -> f32 {
      %c = builtin.unrealized_conversion_cast %a : i32 to f32
      return %c : f32
    })");
  CHECK(lowering.find("lowering to the LLVM dialect failed") != std::string::npos);
  CHECK(lowering.find("kernel.mlir:3:12: error: 'builtin.unrealized_conversion_cast' was not "
                      "lowered") != std::string::npos);

  CHECK_THROWS_AS(jit.lookup("missing"), Error);
  jit.addModule(R"(
    func.func private @kiln_nowhere_to_be_found()
    func.func @calls_missing() {
      func.call @kiln_nowhere_to_be_found() : () -> ()
      return
    })");
  std::string link;
  try {
    jit.lookup("calls_missing");
  } catch (const Error &e) {
    link = e.what();
  }
  CHECK(link.find("kiln_nowhere_to_be_found") != std::string::npos);
}
