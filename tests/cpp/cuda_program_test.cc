// Whole loop programs through CudaProgram (codegen/cuda/cuda_program.h): graphs lowered by the
// driver pipeline run on the host-emulated device ([emulated]) and, when a GPU is present, on
// the driver device ([gpu]); both must equal the interpreter and the CPU CompiledProgram.
// Without a host compiler the emulated runs, without a CUDA driver the GPU runs, are skipped
// with a message.

#include "codegen/cpu/compile_program.h"
#include "codegen/cuda/cuda_program.h"
#include "codegen/cuda/driver.h"
#include "codegen/cuda/host_emulator.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/externs.h"
#include "driver/prepared_graph.h"
#include "ir/loop/interpreter.h"
#include "runtime/error.h"
#include "runtime/generator.h"
#include "runtime/ops/random.h"
#include "tests/cpp/cuda_test_util.h"

#include <fmt/format.h>
#include <kiln_catch.h>

#include <chrono>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <unistd.h>

using namespace kiln;
using namespace kiln::ir;
using namespace kiln::ir::loop;
using namespace kiln::codegen::cuda;
using namespace kiln::test;

namespace {

/// Small grids so grid-stride loops wrap around, and split reductions from 1024 points on.
LaunchLimits emulatedLimits() {
  LaunchLimits l;
  l.multiprocessors = 1;
  l.blocksPerMultiprocessor = 4;
  l.splitMinPoints = 1024;
  l.pointsPerChunk = 512;
  return l;
}

passes::schedule::Schedule prepared(const std::string &kir) {
  return driver::prepareGraph(kir).schedule;
}

/// A program on the emulated device; `device` receives it for inspection.
CudaProgram emulated(const passes::schedule::Schedule &p,
                     std::shared_ptr<HostEmulatorDevice> *device = nullptr) {
  CudaModule m = emitCuda(p);
  auto d = std::make_shared<HostEmulatorDevice>(m, emulatedLimits());
  if (device)
    *device = d;
  return CudaProgram(p, std::move(m), d);
}

bool emulatorOrSkip() {
  if (HostEmulator::findCompiler())
    return true;
  KILN_SKIP("host emulation skipped: no C++ compiler (set CXX)");
  return false;
}

Tensor randn(Shape sizes) {
  static Generator gen(20261130);
  return ops::randn(sizes, DType::Float32, &gen);
}

/// Checks `cuda`'s run against the interpreter and the CPU CompiledProgram of the same program.
void checkAgainstCpu(const CudaProgram &cuda, const std::vector<Tensor> &inputs,
                     double tolScale = 1) {
  const LoopProgram &p = cuda.program();
  std::vector<Tensor> got = cuda.run(inputs);
  // The interpreter takes inputs in their buffer's layout (CudaProgram and the CPU executor
  // make an input contiguous where its buffer is).
  std::vector<Tensor> laidOut;
  for (size_t n = 0; n < inputs.size(); ++n)
    laidOut.push_back(p.buffer(p.inputs()[n]).meta.isContiguous() ? inputs[n].contiguous()
                                                                  : inputs[n]);
  Interpreter interp(p);
  codegen::registerEagerExterns(interp);
  std::vector<Tensor> reference = interp.run(laidOut);
  std::vector<Tensor> cpu = codegen::cpu::compileProgram(passes::schedule::schedule(p)).run(inputs);
  REQUIRE(got.size() == reference.size());
  for (size_t n = 0; n < got.size(); ++n) {
    INFO("output " << n);
    REQUIRE(got[n].dtype() == reference[n].dtype());
    double tol = tolerance(got[n].dtype()) * tolScale;
    checkClose(got[n], reference[n], tol);
    checkClose(got[n], cpu[n], 2 * tol);
  }
}

constexpr const char *kMlpSoftmax = R"(graph @mlp(%x: f32[s0, 32], %w1: f32[64, 32], %b1: f32[64],
           %w2: f32[16, 64], %b2: f32[16]) {
  %0 = linear(%x, %w1, %b1) : f32[s0, 64]
  %1 = gelu(%0) : f32[s0, 64]
  %2 = linear(%1, %w2, %b2) : f32[s0, 16]
  %3 = softmax(%2) {dim = -1} : f32[s0, 16]
  return %3
}
)";

constexpr const char *kSums = R"(graph @sums(%x: f32[s0, 300]) {
  %0 = sum(%x) : f32[]
  %1 = mean(%x) : f32[]
  %2 = amax(%x) {dim = [0, 1]} : f32[]
  return %0, %1, %2
}
)";

std::string errorOf(const CudaProgram &p, const std::vector<Tensor> &inputs,
                    ErrorKind kind = ErrorKind::Value) {
  try {
    p.run(inputs);
  } catch (const Error &e) {
    CHECK(e.kind() == kind);
    return e.what();
  }
  return "no error";
}

} // namespace

TEST_CASE("cuda program: MLP (linear externs, gelu, softmax) at two batch sizes",
          "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  passes::schedule::Schedule p = prepared(kMlpSoftmax);
  std::shared_ptr<HostEmulatorDevice> device;
  CudaProgram cuda = emulated(p, &device);
  Tensor w1 = randn({64, 32}), b1 = randn({64}), w2 = randn({16, 64}), b2 = randn({16});
  for (int64_t batch : {3, 17}) {
    INFO("batch " << batch);
    checkAgainstCpu(cuda, {randn({batch, 32}), w1, b1, w2, b2});
    // Every device buffer was given back (cached, not leaked).
    CHECK(device->allocator().allocated() == 0);
    CHECK(device->allocator().reserved() > 0);
  }
  // The second size reused the first call's blocks where they fit.
  size_t raw = device->allocator().rawAllocations();
  cuda.run({randn({17, 32}), w1, b1, w2, b2});
  CHECK(device->allocator().rawAllocations() == raw);
}

TEST_CASE("cuda program: layer_norm and rms_norm", "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  std::shared_ptr<HostEmulatorDevice> device;
  CudaProgram ln = emulated(prepared(kLayerNorm), &device);
  checkAgainstCpu(ln, {randn({5, 64}), randn({64}), randn({64})});
  // The statistics and the output: one kernel, as the schedule groups them.
  CHECK(device->rolesLaunched() == std::set<KernelRole>{KernelRole::Fused});
  CHECK(device->launches() == 1);
  CudaProgram rms = emulated(prepared(kRmsNorm));
  checkAgainstCpu(rms, {randn({7, 64}), randn({64})});
}

TEST_CASE("cuda program: split reductions with a workspace", "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  std::shared_ptr<HostEmulatorDevice> device;
  CudaProgram cuda = emulated(prepared(kSums), &device);
  // 12 * 300 = 3600 reduced points: past splitMinPoints, so both passes run.
  checkAgainstCpu(cuda, {randn({12, 300})}, 10);
  std::set<KernelRole> roles = device->rolesLaunched();
  CHECK(roles.count(KernelRole::ReducePartial));
  CHECK(roles.count(KernelRole::ReduceFinal));
  CHECK(device->allocator().allocated() == 0);
  // 2 * 300 = 600 points: one block per output, no split.
  std::shared_ptr<HostEmulatorDevice> small;
  CudaProgram unsplit = emulated(prepared(kSums), &small);
  checkAgainstCpu(unsplit, {randn({2, 300})});
  CHECK_FALSE(small->rolesLaunched().count(KernelRole::ReducePartial));
}

TEST_CASE("cuda program: intermediates live where the schedule's memory plan puts them",
          "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  // Three [s0, 64] intermediates in a chain, each an extern's result in a slot of its own: the
  // first and the third are never in use together, so they share bytes of the arena, which holds
  // two.
  passes::schedule::Schedule s = prepared(R"(graph @chain(%x: f32[s0, 64], %w: f32[64, 64]) {
  %0 = linear(%x, %w) : f32[s0, 64]
  %1 = linear(%0, %w) : f32[s0, 64]
  %2 = linear(%1, %w) : f32[s0, 64]
  %3 = linear(%2, %w) : f32[s0, 64]
  return %3
}
)");
  REQUIRE(s.slots.size() == 3);
  std::shared_ptr<HostEmulatorDevice> device;
  CudaProgram cuda = emulated(s, &device);
  CHECK(cuda.arenaBytes({{"s0", 4}}) == 2 * 4 * 64 * 4);
  CHECK(cuda.arenaBytes({{"s0", 5}}) == 2 * 1280); // 5 * 64 * 4 = 1280, a multiple of 256
  Tensor w = randn({64, 64});
  for (int64_t k = 0; k < 64 * 64; ++k) // keep the chain's values near 1
    w.data<float>()[k] *= 0.125f;
  checkAgainstCpu(cuda, {randn({4, 64}), w});
  CHECK(device->allocator().allocated() == 0);
  // The softmax's row statistics are registers: no arena at all.
  CHECK(emulated(prepared(kSoftmax)).arenaBytes({{"s0", 8}}) == 0);
}

TEST_CASE("cuda program: non-contiguous inputs", "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  // A contiguous input buffer given a transposed tensor: made contiguous before the copy.
  CudaProgram softmax = emulated(prepared(kSoftmax));
  Tensor xt = randn({128, 6}).t();
  REQUIRE_FALSE(xt.isContiguous());
  checkAgainstCpu(softmax, {xt});
  // An input buffer declared with transposed strides: copied with its layout as is.
  passes::schedule::Schedule p =
      prepared(R"(graph @t(%x: f32[6, 10] strided [1, 6], %y: f32[6, 10]) {
  %0 = mul(%x, %y) : f32[6, 10]
  %1 = sum(%0) {dim = [1]} : f32[6]
  return %0, %1
}
)");
  REQUIRE_FALSE(p.program.buffer(p.program.inputs()[0]).meta.isContiguous());
  CudaProgram strided = emulated(p);
  Tensor x = randn({10, 6}).t();
  checkAgainstCpu(strided, {x, randn({6, 10})});
  // A contiguous tensor for that buffer is an error, as on the CPU.
  CHECK_THAT(errorOf(strided, {randn({6, 10}), randn({6, 10})}),
             Catch::Contains("input buf0 has strides [1, 6] here, but the tensor bound to it has "
                             "strides [10, 1]"));
}

TEST_CASE("cuda program: bad inputs are kiln::Errors and free what was allocated",
          "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  passes::schedule::Schedule p = prepared(kMlpSoftmax);
  std::shared_ptr<HostEmulatorDevice> device;
  CudaProgram cuda = emulated(p, &device);
  Tensor w1 = randn({64, 32}), b1 = randn({64}), w2 = randn({16, 64}), b2 = randn({16});
  CHECK_THAT(errorOf(cuda, {randn({4, 32}).to(DType::Float64), w1, b1, w2, b2}, ErrorKind::Type),
             Catch::Contains("input buf0 is f32[s0, 32] but the tensor bound to it has dtype "
                             "float64"));
  CHECK_THAT(errorOf(cuda, {randn({4, 32, 1}), w1, b1, w2, b2}),
             Catch::Contains("input buf0 is f32[s0, 32] but the tensor bound to it has shape "
                             "[4, 32, 1]"));
  CHECK_THAT(errorOf(cuda, {randn({4, 31}), w1, b1, w2, b2}),
             Catch::Contains("input buf0 is f32[s0, 32] = [4, 32] here, but the tensor bound to it "
                             "has shape [4, 31]"));
  CHECK_THAT(errorOf(cuda, {randn({4, 32}), w1, b1, w2}),
             Catch::Contains("the program takes 5 inputs, got 4"));
  // A failure mid-run (an extern throwing) releases every device buffer.
  cuda.registerExtern("linear",
                      [](std::span<const Tensor>, const Attributes &) -> std::vector<Tensor> {
                        fail(ErrorKind::Runtime, "linear failed on purpose");
                      });
  CHECK_THAT(errorOf(cuda, {randn({4, 32}), w1, b1, w2, b2}, ErrorKind::Runtime),
             Catch::Contains("linear failed on purpose"));
  CHECK(device->allocator().allocated() == 0);
  // An extern returning the wrong shape is named.
  cuda.registerExtern("linear", [](std::span<const Tensor>, const Attributes &) {
    return std::vector<Tensor>{Tensor::empty({1}, DType::Float32)};
  });
  CHECK_THAT(errorOf(cuda, {randn({4, 32}), w1, b1, w2, b2}),
             Catch::Contains("extern \"linear\" result 0 is float32 [1]"));
  CHECK(device->allocator().allocated() == 0);
}

TEST_CASE("cuda program: concurrent runs of one program", "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  CudaProgram cuda = emulated(prepared(kLayerNorm));
  Tensor w = randn({64}), b = randn({64});
  std::vector<Tensor> xs, expected;
  for (int t = 0; t < 4; ++t) {
    xs.push_back(randn({3 + t, 64}));
    expected.push_back(cuda.run({xs.back(), w, b})[0]);
  }
  std::vector<Tensor> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] { got[t] = cuda.run({xs[t], w, b})[0]; });
  for (std::thread &t : threads)
    t.join();
  for (int t = 0; t < 4; ++t)
    CHECK(values(got[t]) == values(expected[t]));
}

namespace {

/// A stand-in for libcuda with the entry points Driver resolves: one "sm_90" device with 2 SMs,
/// host memory, modules that record their image, and launches handed to a callback (the test
/// runs them on the host emulator), so the driver device's calls are checked end to end.
constexpr const char *kFakeLibcuda = R"(#include <cstdlib>
#include <cstring>
#include <string>
using Launcher = void (*)(const char *name, unsigned grid, unsigned block, void **params);
static Launcher launcher;
static long allocs, frees, loads, unloads, launches;
static std::string image;
static int ctx, mod;
extern "C" {
int cuInit(unsigned) { return 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return i == 0 ? 0 : 101; }
int cuDeviceGetName(char *name, int len, int) { std::strncpy(name, "Fake GPU", len); return 0; }
int cuDeviceGetAttribute(int *v, int attr, int) {
  switch (attr) {
  case 1: *v = 1024; return 0;
  case 8: *v = 49152; return 0;
  case 16: *v = 2; return 0;
  case 75: *v = 9; return 0;
  case 76: *v = 0; return 0;
  }
  return 1;
}
int cuDeviceTotalMem_v2(size_t *b, int) { *b = size_t(1) << 30; return 0; }
int cuGetErrorName(int r, const char **s) {
  *s = r == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_FAKE";
  return 0;
}
int cuGetErrorString(int, const char **s) { *s = "fake"; return 0; }
int cuDevicePrimaryCtxRetain(void **c, int) { *c = &ctx; return 0; }
int cuCtxSetCurrent(void *c) { return c == &ctx ? 0 : 201; }
int cuCtxSynchronize() { return 0; }
int cuModuleLoadData(void **m, const void *data) {
  image = static_cast<const char *>(data);
  *m = &mod;
  ++loads;
  return 0;
}
int cuModuleUnload(void *m) { ++unloads; return m == &mod ? 0 : 400; }
int cuModuleGetFunction(void **f, void *m, const char *name) {
  if (m != &mod || (std::strncmp(name, "node", 4) != 0 && std::strncmp(name, "fused", 5) != 0))
    return 500;
  *f = strdup(name);
  return 0;
}
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
  ++launches;
  if (gy != 1 || gz != 1 || by != 1 || bz != 1 || shared || stream || extra || !launcher)
    return 1;
  launcher(static_cast<const char *>(f), gx, bx, params);
  return 0;
}
int cuMemAlloc_v2(unsigned long long *p, size_t n) {
  if (n > (size_t(1) << 30))
    return 2;
  void *m = std::aligned_alloc(256, (n + 255) / 256 * 256);
  std::memset(m, 0xff, n);
  *p = reinterpret_cast<unsigned long long>(m);
  ++allocs;
  return 0;
}
int cuMemFree_v2(unsigned long long p) { std::free(reinterpret_cast<void *>(p)); ++frees; return 0; }
int cuMemcpyHtoD_v2(unsigned long long d, const void *s, size_t n) {
  std::memcpy(reinterpret_cast<void *>(d), s, n);
  return 0;
}
int cuMemcpyDtoH_v2(void *d, unsigned long long s, size_t n) {
  std::memcpy(d, reinterpret_cast<const void *>(s), n);
  return 0;
}
void fake_set_launcher(Launcher l) { launcher = l; }
long fake_stat(const char *what) {
  std::string w = what;
  return w == "allocs" ? allocs : w == "frees" ? frees : w == "loads" ? loads
       : w == "unloads" ? unloads : w == "launches" ? launches : -1;
}
const char *fake_image() { return image.c_str(); }
}
)";

/// The fake libcuda compiled into a temporary folder (the test removes it once loaded).
const std::string &fakeLibcuda() {
  static const std::string path = [] {
    std::optional<std::string> cxx = HostEmulator::findCompiler();
    REQUIRE(cxx);
    std::filesystem::path dir =
        std::filesystem::temp_directory_path() / fmt::format("kiln-fake-cuda-{}", ::getpid());
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "fake.cc") << kFakeLibcuda;
    std::string so = (dir / "libcuda.so.1").string();
    std::string cmd = fmt::format("'{}' -std=c++20 -O1 -fPIC -shared -o '{}' '{}' 2>&1", *cxx, so,
                                  (dir / "fake.cc").string());
    REQUIRE(std::system(cmd.c_str()) == 0);
    return so;
  }();
  return path;
}

/// What the fake's launch callback runs on: the module and emulator of the current test.
struct FakeTarget {
  const CudaModule *module = nullptr;
  const HostEmulator *emulator = nullptr;
  std::set<KernelRole> roles;
} fakeTarget;

void fakeLaunch(const char *name, unsigned grid, unsigned block, void **params) {
  const CudaKernel *kernel = fakeTarget.module->find(name);
  REQUIRE(kernel);
  std::vector<uint64_t> args;
  for (size_t k = 0; k < kernel->args.size(); ++k)
    args.push_back(*static_cast<const uint64_t *>(params[k]));
  fakeTarget.roles.insert(kernel->role);
  fakeTarget.emulator->launch(*kernel, args, grid, std::min<int>(static_cast<int>(block), 64));
}

} // namespace

TEST_CASE("cuda program: the driver device over a fake libcuda", "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  const std::string &so = fakeLibcuda();
  std::string reason;
  // Leaked like Driver::get()'s: the device allocators keep a reference for the process.
  const Driver *driver = Driver::load(so, &reason).release();
  INFO(reason);
  REQUIRE(driver);
  void *handle = ::dlopen(so.c_str(), RTLD_NOW); // the same object Driver loaded
  REQUIRE(handle);
  auto setLauncher =
      reinterpret_cast<void (*)(void (*)(const char *, unsigned, unsigned, void **))>(
          ::dlsym(handle, "fake_set_launcher"));
  auto stat = reinterpret_cast<long (*)(const char *)>(::dlsym(handle, "fake_stat"));
  auto image = reinterpret_cast<const char *(*)()>(::dlsym(handle, "fake_image"));
  REQUIRE((setLauncher && stat && image));
  std::filesystem::remove_all(std::filesystem::path(so).parent_path()); // loaded: not needed
  setLauncher(&fakeLaunch);

  CompiledCuda code;
  code.arch = 90;
  code.ptx = "// the module's PTX";
  {
    passes::schedule::Schedule p = prepared(kSums);
    CudaModule m = emitCuda(p);
    HostEmulator emulator(m);
    fakeTarget = {&m, &emulator, {}};
    std::shared_ptr<CudaDevice> device = openDriverDevice(*driver, 0, code);
    CHECK(std::string(image()) == code.ptx);
    CHECK(device->name() == "Fake GPU");
    CHECK(device->limits().multiprocessors == 2);
    CudaProgram cuda(p, m, device);
    // 120 * 300 = 36000 points: split with the device's own limits.
    checkAgainstCpu(cuda, {randn({120, 300})}, 10);
    CHECK(fakeTarget.roles.count(KernelRole::ReducePartial));
    CHECK(fakeTarget.roles.count(KernelRole::ReduceFinal));
    device->synchronize();
  }
  CHECK(stat("unloads") == stat("loads"));
  {
    passes::schedule::Schedule p = prepared(kMlpSoftmax);
    CudaModule m = emitCuda(p);
    HostEmulator emulator(m);
    fakeTarget = {&m, &emulator, {}};
    CudaProgram cuda(p, m, openDriverDevice(*driver, 0, code));
    long allocs = stat("allocs");
    Tensor w1 = randn({64, 32}), b1 = randn({64}), w2 = randn({16, 64}), b2 = randn({16});
    checkAgainstCpu(cuda, {randn({9, 32}), w1, b1, w2, b2});
    // The allocator is per device: the second program's blocks came partly from the first's.
    long fresh = stat("allocs") - allocs;
    cuda.run({randn({9, 32}), w1, b1, w2, b2});
    CHECK(stat("allocs") - allocs == fresh);
    CHECK(stat("frees") == 0);
    // Out of memory: the cache is given back, then the driver's error is reported.
    CHECK_THROWS_WITH(cuda.device().allocate(size_t{2} << 30),
                      Catch::Contains("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"));
    CHECK(stat("frees") == stat("allocs"));
  }
  // A cubin for another architecture is refused before loading.
  CompiledCuda sm80 = code;
  sm80.arch = 80;
  sm80.cubin = "ELF";
  CHECK_THROWS_WITH(openDriverDevice(*driver, 0, sm80),
                    Catch::Contains("is sm_90, but the cubin is for sm_80"));
  CHECK_THROWS_WITH(openDriverDevice(*driver, 1, code), Catch::Contains("does not exist"));
  setLauncher(nullptr);
}

namespace {

/// `bazel test` runs with a clean environment: point the NVRTC search at the workspace's
/// virtualenv (its nvidia-cuda-nvrtc wheel), found through this source file's runfiles link.
void addWorkspaceVenv() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path self = fs::canonical("tests/cpp/cuda_program_test.cc", ec);
  if (ec)
    return;
  fs::path lib = self.parent_path().parent_path().parent_path() / ".venv" / "lib";
  for (fs::directory_iterator it(lib, ec), end; !ec && it != end; it.increment(ec))
    Nvrtc::addSearchRoot((it->path() / "site-packages").string());
}

/// The GPU, or false after a message saying why the GPU checks do not run.
bool gpuOrSkip() {
  static const bool once = (addWorkspaceVenv(), true);
  (void)once;
  if (Driver::isAvailable())
    return true;
  KILN_SKIP("no CUDA device: GPU runs skipped (" << Driver::unavailableReason() << ")");
  return false;
}

/// `kir` lowered and compiled for GPU 0 (no disk cache: the test leaves nothing behind).
CudaProgram gpuProgram(const std::string &kir) {
  CudaCompileOptions options;
  options.cache = nullptr;
  return compileCudaProgram(prepared(kir), 0, options);
}

} // namespace

TEST_CASE("cuda program on the GPU: MLP, norms, split reductions, strided inputs, threads",
          "[.][cuda][gpu]") {
  if (!gpuOrSkip())
    return;
  CudaProgram mlp = gpuProgram(kMlpSoftmax);
  std::cout << "GPU: " << mlp.device().name() << "\n";
  Tensor w1 = randn({64, 32}), b1 = randn({64}), w2 = randn({16, 64}), b2 = randn({16});
  for (int64_t batch : {3, 1000})
    checkAgainstCpu(mlp, {randn({batch, 32}), w1, b1, w2, b2});
  checkAgainstCpu(gpuProgram(kLayerNorm), {randn({300, 64}), randn({64}), randn({64})});
  checkAgainstCpu(gpuProgram(kRmsNorm), {randn({77, 64}), randn({64})});
  // 4000 * 300 points: split across blocks with the device's real limits.
  checkAgainstCpu(gpuProgram(kSums), {randn({4000, 300})}, 100);
  checkAgainstCpu(gpuProgram(kSoftmax), {randn({128, 33}).t()});
  CudaProgram ln = gpuProgram(kLayerNorm);
  Tensor w = randn({64}), b = randn({64});
  std::vector<Tensor> xs, expected, got(8);
  for (int t = 0; t < 8; ++t) {
    xs.push_back(randn({100 + t, 64}));
    expected.push_back(ln.run({xs.back(), w, b})[0]);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] { got[t] = ln.run({xs[t], w, b})[0]; });
  for (std::thread &t : threads)
    t.join();
  for (int t = 0; t < 8; ++t)
    CHECK(values(got[t]) == values(expected[t]));
  CHECK_THROWS_WITH(ln.run({randn({4, 63}), w, b}), Catch::Contains("= [4, 64] here"));
}

TEST_CASE("cuda program on the GPU: time one program against the CPU executor",
          "[.][cuda][gpu][timing]") {
  if (!gpuOrSkip())
    return;
  const char *kir = R"(graph @ln(%x: f32[s0, 1024], %w: f32[1024], %b: f32[1024]) {
  %0 = layer_norm(%x, %w, %b) {normalized_shape = [1024]} : f32[s0, 1024]
  %1 = gelu(%0) : f32[s0, 1024]
  return %1
}
)";
  CudaProgram gpu = gpuProgram(kir);
  codegen::cpu::CompiledProgram cpu = codegen::cpu::compileProgram(prepared(kir));
  std::vector<Tensor> inputs = {randn({4096, 1024}), randn({1024}), randn({1024})};
  auto time = [&](auto &&run) {
    run(); // warm up: module load, allocator, thread pool
    auto start = std::chrono::steady_clock::now();
    for (int k = 0; k < 10; ++k)
      run();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
               .count() /
           10;
  };
  double gpuMs = time([&] { gpu.run(inputs); });
  double cpuMs = time([&] { cpu.run(inputs); });
  std::cout << "layer_norm + gelu, 4096 x 1024 f32, per call (host copies included): "
            << gpu.device().name() << " " << gpuMs << " ms, CPU executor " << cpuMs << " ms\n";
  checkClose(gpu.run(inputs)[0], cpu.run(inputs)[0], 1e-4);
}
