#include "codegen/cuda/host_emulator.h"

#include "codegen/cuda/shared_library.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

namespace kiln::codegen::cuda {
namespace {

namespace fs = std::filesystem;

/// What the kernels see instead of CUDA's built-ins (before the module's source).
constexpr std::string_view kShim = R"cpp(// kiln host emulation of the CUDA built-ins
#include <barrier>
#include <cmath>
#include <cstring>
#include <math.h>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static // blocks run one at a time: one copy per kernel is per block

struct kiln_dim3 {
  unsigned x = 1, y = 1, z = 1;
};
static thread_local kiln_dim3 threadIdx, blockIdx;
static kiln_dim3 blockDim, gridDim;

static std::barrier<> *kiln_host_block;
inline void __syncthreads() { kiln_host_block->arrive_and_wait(); }

struct kiln_host_warp {
  std::barrier<> done{32};
  unsigned long long slot[32];
};
static kiln_host_warp *kiln_host_warps;
/// Lane + d's value (the caller's own when lane + d >= 32); all 32 lanes must call it.
template <typename T> T __shfl_down_sync(unsigned, T v, int d) {
  const unsigned lane = threadIdx.x & 31;
  kiln_host_warp &w = kiln_host_warps[threadIdx.x >> 5];
  std::memcpy(&w.slot[lane], &v, sizeof(T));
  w.done.arrive_and_wait();
  T r = v;
  if (lane + d < 32)
    std::memcpy(&r, &w.slot[lane + d], sizeof(T));
  w.done.arrive_and_wait();
  return r;
}

template <typename To, typename From> inline To kiln_host_bits(From v) {
  To r;
  std::memcpy(&r, &v, sizeof(To));
  return r;
}
inline float __uint_as_float(unsigned v) { return kiln_host_bits<float>(v); }
inline float __int_as_float(int v) { return kiln_host_bits<float>(v); }
inline unsigned __float_as_uint(float v) { return kiln_host_bits<unsigned>(v); }
inline double __longlong_as_double(long long v) { return kiln_host_bits<double>(v); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}

/// float16 bits <-> float, round to nearest even (F. Giesen's float_to_half_fast3_rtne).
inline float kiln_host_h2f(unsigned short h) {
  unsigned sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f)
    return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  if (exp != 0)
    return __uint_as_float(sign | ((exp + 112) << 23) | (mant << 13));
  float f = mant * 5.9604644775390625e-8f; // 2^-24: exact
  return sign ? -f : f;
}
inline unsigned short kiln_host_f2h(float value) {
  unsigned u = __float_as_uint(value), sign = u & 0x80000000u, o;
  u ^= sign;
  if (u >= (143u << 23)) {
    o = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (u < (113u << 23)) {
    o = __float_as_uint(__uint_as_float(u) + 0.5f) - (126u << 23);
  } else {
    unsigned odd = (u >> 13) & 1u;
    o = (u + 0xc8000fffu + odd) >> 13;
  }
  return (unsigned short)(o | (sign >> 16));
}

)cpp";

/// Argument passing and the block-by-block launcher (after the module's source).
constexpr std::string_view kRunner = R"cpp(
template <typename T> T kiln_host_arg(unsigned long long v) {
  if constexpr (std::is_pointer_v<T>)
    return reinterpret_cast<T>(v);
  else
    return static_cast<T>(v);
}
template <typename... P, std::size_t... I>
void kiln_host_call(void (*f)(P...), const unsigned long long *a, std::index_sequence<I...>) {
  f(kiln_host_arg<P>(a[I])...);
}
template <typename... P> void kiln_host_call(void (*f)(P...), const unsigned long long *a) {
  kiln_host_call(f, a, std::index_sequence_for<P...>{});
}

extern "C" void kiln_host_launch(void (*entry)(const unsigned long long *),
                                 const unsigned long long *args, long long grid, int block) {
  gridDim.x = (unsigned)grid;
  blockDim.x = (unsigned)block;
  for (long long b = 0; b < grid; ++b) {
    std::barrier<> barrier(block);
    kiln_host_block = &barrier;
    std::unique_ptr<kiln_host_warp[]> warps(new kiln_host_warp[(block + 31) / 32]);
    kiln_host_warps = warps.get();
    std::vector<std::thread> threads;
    threads.reserve(block);
    for (int t = 0; t < block; ++t)
      threads.emplace_back([=] {
        threadIdx.x = (unsigned)t;
        blockIdx.x = (unsigned)b;
        entry(args);
      });
    for (std::thread &t : threads)
      t.join();
  }
}
)cpp";

bool isExecutable(const std::string &path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

std::string shellQuote(const std::string &s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

} // namespace

std::optional<std::string> HostEmulator::findCompiler() {
  if (const char *env = std::getenv("CXX"); env && *env && isExecutable(env))
    return std::string(env);
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/bin:/usr/local/bin";
  for (const char *name : {"c++", "g++", "clang++"})
    for (size_t at = 0; at <= path.size();) {
      size_t end = std::min(path.find(':', at), path.size());
      std::string candidate = path.substr(at, end - at) + "/" + name;
      if (end > at && isExecutable(candidate))
        return candidate;
      at = end + 1;
    }
  return std::nullopt;
}

HostEmulator::HostEmulator(const CudaModule &module, const std::string &compilerPath) {
  std::string compiler = compilerPath;
  if (compiler.empty()) {
    std::optional<std::string> found = findCompiler();
    KILN_CHECK(found, "kiln: no host C++ compiler to emulate CUDA kernels (set CXX)");
    compiler = *found;
  }
  std::string pattern = (fs::temp_directory_path() / "kiln-cuda-host-XXXXXX").string();
  KILN_CHECK(::mkdtemp(pattern.data()), "kiln: cannot create a folder: {}", std::strerror(errno));
  fs::path dir = pattern;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};
  std::string source = std::string(kShim) + module.source + std::string(kRunner);
  for (const CudaKernel *k : module.kernels())
    source += fmt::format("extern \"C\" void kiln_host_entry_{0}(const unsigned long long *a) "
                          "{{ kiln_host_call({0}, a); }}\n",
                          k->name);
  fs::path src = dir / "module.cc", so = dir / "module.so";
  {
    std::ofstream f(src);
    f << source;
    KILN_CHECK(f.good(), "kiln: cannot write {}", src.string());
  }
  std::string cmd =
      fmt::format("{} -std=c++20 -O1 -fPIC -shared -pthread -w {} -o {} 2>&1", shellQuote(compiler),
                  shellQuote(src.string()), shellQuote(so.string()));
  FILE *pipe = ::popen(cmd.c_str(), "r");
  KILN_CHECK(pipe, "kiln: cannot run {}: {}", compiler, std::strerror(errno));
  std::string output;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;)
    output.append(buf, n);
  int status = ::pclose(pipe);
  KILN_CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
             "kiln: the host compiler ({}) rejected the emulated CUDA module:\n{}", compiler,
             output.substr(0, 8000));
  std::string error;
  lib_ = SharedLibrary::open(so.string(), &error);
  KILN_CHECK(lib_, "kiln: cannot load the emulated CUDA module: {}", error);
  launcher_ = reinterpret_cast<Launcher>(lib_->symbol("kiln_host_launch"));
  KILN_CHECK(launcher_, "kiln: the emulated CUDA module has no launcher");
}

HostEmulator::~HostEmulator() = default;

void HostEmulator::launch(const CudaKernel &kernel, std::span<const uint64_t> args, int64_t grid,
                          int block) const {
  KILN_CHECK(args.size() == kernel.args.size(), "kiln: {} takes {} arguments, got {}", kernel.name,
             kernel.args.size(), args.size());
  KILN_CHECK(block > 0 && block % 32 == 0 && block <= kMaxBlockThreads,
             "kiln: a block of {} threads (a multiple of 32 up to {})", block, kMaxBlockThreads);
  auto entry = reinterpret_cast<Entry>(lib_->symbol(("kiln_host_entry_" + kernel.name).c_str()));
  KILN_CHECK(entry, "kiln: the emulated module has no kernel {}", kernel.name);
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  launcher_(entry, reinterpret_cast<const unsigned long long *>(args.data()), grid, block);
}

HostEmulatorDevice::HostEmulatorDevice(const CudaModule &module, LaunchLimits limits, int maxBlock)
    : emulator_(module), limits_(limits), maxBlock_(maxBlock),
      allocator_(
          [](size_t bytes) {
            void *p = std::aligned_alloc(256, bytes); // bytes: a multiple of 512
            KILN_CHECK(p, "kiln: host emulator: out of memory allocating {} bytes", bytes);
            std::memset(p, 0xff, bytes);
            return reinterpret_cast<uint64_t>(p);
          },
          [](uint64_t address) { std::free(reinterpret_cast<void *>(address)); }) {
  KILN_CHECK(maxBlock > 0 && maxBlock % 32 == 0 && maxBlock <= kMaxBlockThreads,
             "kiln: host emulator: blocks of {} threads (a multiple of 32 up to {})", maxBlock,
             kMaxBlockThreads);
}

HostEmulatorDevice::~HostEmulatorDevice() = default;

std::set<KernelRole> HostEmulatorDevice::rolesLaunched() const {
  std::lock_guard<std::mutex> lock(mu_);
  return roles_;
}

uint64_t HostEmulatorDevice::allocate(size_t bytes) { return allocator_.allocate(bytes); }

void HostEmulatorDevice::release(uint64_t address) { allocator_.release(address); }

void HostEmulatorDevice::copyToDevice(uint64_t dst, const void *src, size_t bytes) {
  if (bytes)
    std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
}

void HostEmulatorDevice::copyToHost(void *dst, uint64_t src, size_t bytes) {
  if (bytes)
    std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
}

void HostEmulatorDevice::launch(const CudaKernel &kernel, std::span<const uint64_t> args,
                                int64_t grid, int block) {
  // The emulated module keeps one launch's geometry, shared memory and barriers in globals (like
  // one stream: launches run one at a time), so concurrent callers take turns.
  std::lock_guard<std::mutex> lock(mu_);
  ++launches_;
  roles_.insert(kernel.role);
  emulator_.launch(kernel, args, grid, std::min(block, maxBlock_));
}

} // namespace kiln::codegen::cuda
