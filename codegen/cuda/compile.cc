#include "codegen/cuda/compile.h"

#include "codegen/cuda/nvrtc.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace kiln::codegen::cuda {
namespace {

namespace fs = std::filesystem;

constexpr const char *kProgramName = "kiln_kernels.cu";

// The cached payload: u32 arch | u8 cubin source | (u64 length, bytes) for ptx, cubin, log.
std::string serialize(const CompiledCuda &c) {
  std::string out;
  auto putInt = [&](uint64_t v, size_t n) { out.append(reinterpret_cast<const char *>(&v), n); };
  putInt(static_cast<uint32_t>(c.arch), 4);
  putInt(static_cast<uint8_t>(c.cubinSource), 1);
  for (const std::string *s : {&c.ptx, &c.cubin, &c.log}) {
    putInt(s->size(), 8);
    out += *s;
  }
  return out;
}

CompiledCuda deserialize(const std::string &in) {
  CompiledCuda c;
  size_t at = 0;
  auto getInt = [&](size_t n) {
    uint64_t v = 0;
    KILN_CHECK(at + n <= in.size(), "kiln: corrupt CUDA cache payload");
    std::memcpy(&v, in.data() + at, n);
    at += n;
    return v;
  };
  c.arch = static_cast<int>(getInt(4));
  c.cubinSource = static_cast<CubinSource>(getInt(1));
  for (std::string *s : {&c.ptx, &c.cubin, &c.log}) {
    uint64_t n = getInt(8);
    KILN_CHECK(at + n <= in.size(), "kiln: corrupt CUDA cache payload");
    *s = in.substr(at, n);
    at += n;
  }
  return c;
}

/// NVRTC's log, with the source line of its first error appended.
std::string explainLog(const std::string &log, std::string_view source) {
  std::string out = log;
  std::string marker = std::string(kProgramName) + "(";
  size_t at = log.find(marker);
  if (at == std::string::npos)
    return out;
  size_t line = std::strtoul(log.c_str() + at + marker.size(), nullptr, 10);
  std::istringstream lines{std::string(source)};
  std::string text;
  for (size_t n = 1; std::getline(lines, text); ++n)
    if (n == line)
      return out + fmt::format("\n{} line {}: {}", kProgramName, line, text);
  return out;
}

/// `s` quoted for /bin/sh.
std::string shellQuote(const std::string &s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool isExecutable(const std::string &path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

CompiledCuda compileUncached(const Nvrtc &nv, std::string_view source,
                             const CudaCompileOptions &options, bool nvrtcCubin,
                             const std::optional<std::string> &ptxas) {
  std::vector<std::string> args = nvrtcOptions(options);
  std::string src(source);
  NvrtcProgram prog = nullptr;
  if (NvrtcResult r = nv.createProgram(&prog, src.c_str(), kProgramName, 0, nullptr, nullptr);
      r != kNvrtcSuccess)
    fail(ErrorKind::Runtime, "kiln: nvrtcCreateProgram failed: {}", nv.errorString(r));
  struct Destroy {
    const Nvrtc &nv;
    NvrtcProgram &prog;
    ~Destroy() { nv.destroyProgram(&prog); }
  } destroy{nv, prog};
  std::vector<const char *> argv;
  for (const std::string &a : args)
    argv.push_back(a.c_str());
  NvrtcResult compiled = nv.compileProgram(prog, static_cast<int>(argv.size()), argv.data());
  CompiledCuda out;
  out.arch = options.arch;
  out.options = args;
  size_t logSize = 0;
  if (nv.getProgramLogSize(prog, &logSize) == kNvrtcSuccess && logSize > 1) {
    out.log.resize(logSize);
    nv.getProgramLog(prog, out.log.data());
    out.log.resize(logSize - 1); // the terminating NUL
  }
  if (compiled != kNvrtcSuccess)
    fail(ErrorKind::Runtime, "kiln: NVRTC could not compile {} for sm_{} ({}; options: {}):\n{}",
         kProgramName, options.arch, nv.errorString(compiled), fmt::join(args, " "),
         explainLog(out.log, source));
  size_t size = 0;
  KILN_CHECK(nv.getPTXSize(prog, &size) == kNvrtcSuccess && size > 0, "kiln: nvrtcGetPTX failed");
  out.ptx.resize(size);
  nv.getPTX(prog, out.ptx.data());
  out.ptx.resize(std::strlen(out.ptx.c_str()));
  if (nvrtcCubin) {
    KILN_CHECK(nv.getCUBINSize(prog, &size) == kNvrtcSuccess && size > 0,
               "kiln: nvrtcGetCUBIN failed for sm_{}", options.arch);
    out.cubin.resize(size);
    nv.getCUBIN(prog, out.cubin.data());
    out.cubinSource = CubinSource::Nvrtc;
  } else if (ptxas) {
    out.cubin = assembleWithPtxas(out.ptx, options.arch, *ptxas);
    out.cubinSource = CubinSource::Ptxas;
  }
  return out;
}

} // namespace

std::vector<std::string> nvrtcOptions(const CudaCompileOptions &options) {
  std::vector<std::string> out = {
      fmt::format("--gpu-architecture={}_{}",
                  options.cubin && !options.preferPtxas ? "sm" : "compute", options.arch),
      "-default-device", "-std=c++17"};
  if (options.lineInfo)
    out.push_back("-lineinfo");
  out.insert(out.end(), options.extraOptions.begin(), options.extraOptions.end());
  return out;
}

CompiledCuda compileCuda(std::string_view source, const CudaCompileOptions &options) {
  const Nvrtc &nv = Nvrtc::get();
  auto [major, minor] = nv.version();
  std::vector<int> archs = nv.supportedArchs();
  if (!archs.empty() && std::find(archs.begin(), archs.end(), options.arch) == archs.end()) {
    std::vector<std::string> names;
    for (int a : archs)
      names.push_back(fmt::format("sm_{}", a));
    fail(ErrorKind::Value, "kiln: NVRTC {}.{} cannot compile for sm_{} (it supports {})", major,
         minor, options.arch, fmt::join(names, ", "));
  }
  bool nvrtcCubin = options.cubin && !options.preferPtxas && nv.hasCubin();
  std::optional<std::string> ptxas;
  if (options.cubin && !nvrtcCubin)
    ptxas = findPtxas();
  std::string cubinMode = nvrtcCubin ? "nvrtc" : ptxas ? "ptxas:" + *ptxas : "none";
  auto build = [&] { return serialize(compileUncached(nv, source, options, nvrtcCubin, ptxas)); };
  if (!options.cache)
    return compileUncached(nv, source, options, nvrtcCubin, ptxas);
  std::string key =
      cudaCacheKey({"kiln-cuda-module", options.version, fmt::format("nvrtc {}.{}", major, minor),
                    fmt::format("{}", fmt::join(nvrtcOptions(options), " ")), cubinMode, source});
  bool fromCache = false;
  CudaCache::Entry entry = options.cache->getOrBuild(key, build, &fromCache);
  CompiledCuda out = deserialize(*entry);
  out.options = nvrtcOptions(options);
  out.fromCache = fromCache;
  return out;
}

std::optional<std::string> findPtxas() {
  if (const char *env = std::getenv("KILN_PTXAS"); env && *env)
    return isExecutable(env) ? std::optional<std::string>(env) : std::nullopt;
  if (isExecutable("/usr/local/cuda/bin/ptxas"))
    return "/usr/local/cuda/bin/ptxas";
  if (const char *path = std::getenv("PATH"))
    for (std::string_view rest = path; !rest.empty();) {
      size_t colon = std::min(rest.find(':'), rest.size());
      std::string candidate = std::string(rest.substr(0, colon)) + "/ptxas";
      if (colon > 0 && isExecutable(candidate))
        return candidate;
      rest.remove_prefix(std::min(colon + 1, rest.size()));
    }
  return std::nullopt;
}

std::string assembleWithPtxas(std::string_view ptx, int arch, const std::string &ptxasPath) {
  std::string ptxas = ptxasPath;
  if (ptxas.empty()) {
    std::optional<std::string> found = findPtxas();
    KILN_CHECK(found, "kiln: ptxas not found (set KILN_PTXAS or install the CUDA toolkit)");
    ptxas = *found;
  }
  std::string pattern = (fs::temp_directory_path() / "kiln-ptxas-XXXXXX").string();
  KILN_CHECK(::mkdtemp(pattern.data()), "kiln: cannot create a folder for ptxas: {}",
             std::strerror(errno));
  fs::path dir = pattern;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};
  fs::path in = dir / "kernels.ptx", out = dir / "kernels.cubin";
  {
    std::ofstream f(in, std::ios::binary);
    f << ptx;
    KILN_CHECK(f.good(), "kiln: cannot write {}", in.string());
  }
  std::string cmd = fmt::format("{} -arch=sm_{} {} -o {} 2>&1", shellQuote(ptxas), arch,
                                shellQuote(in.string()), shellQuote(out.string()));
  FILE *pipe = ::popen(cmd.c_str(), "r");
  KILN_CHECK(pipe, "kiln: cannot run {}: {}", ptxas, std::strerror(errno));
  std::string output;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;)
    output.append(buf, n);
  int status = ::pclose(pipe);
  bool ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  KILN_CHECK(ok, "kiln: ptxas failed for sm_{} (PTX ISA {}; {}):\n{}", arch, ptxVersion(ptx), ptxas,
             output);
  std::ifstream f(out, std::ios::binary);
  std::stringstream bytes;
  bytes << f.rdbuf();
  std::string cubin = std::move(bytes).str();
  KILN_CHECK(!cubin.empty(), "kiln: ptxas wrote no cubin for sm_{}", arch);
  return cubin;
}

std::string ptxVersion(std::string_view ptx) {
  for (size_t at = 0; at < ptx.size();) {
    size_t end = std::min(ptx.find('\n', at), ptx.size());
    std::string_view line = ptx.substr(at, end - at);
    if (line.rfind(".version ", 0) == 0)
      return std::string(line.substr(9));
    at = end + 1;
  }
  return "";
}

} // namespace kiln::codegen::cuda
