// compile: graph → prepared program → code for the device → Runner (see compile.h).

#include "driver/compile.h"

#include "codegen/cpu/kernel_cache.h"
#include "codegen/cuda/emit.h"
#include "codegen/executable.h"
#include "cuda/backend.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <chrono>

namespace kiln::driver {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// "hit" / "miss (not-found 1)": what the kernel cache did between two stats snapshots.
std::string cacheEvent(const codegen::cpu::CacheStats &before,
                       const codegen::cpu::CacheStats &after, bool fromCache, bool anyKernel,
                       bool dumped) {
  if (!anyKernel)
    return "none (no generated kernels)";
  if (dumped)
    return "bypassed (dumping stages)";
  if (fromCache)
    return after.diskHits > before.diskHits ? "hit (disk)" : "hit (memory)";
  std::string reasons;
  for (int r = 0; r < codegen::cpu::kNumMissReasons; ++r)
    if (int64_t n = after.missesBy[r] - before.missesBy[r]; n > 0)
      reasons +=
          fmt::format("{}{} {}", reasons.empty() ? "" : ", ",
                      codegen::cpu::missReasonName(static_cast<codegen::cpu::MissReason>(r)), n);
  return "miss" + (reasons.empty() ? std::string() : " (" + reasons + ")");
}

/// The weights in the order of graph.weights, each checked against its node.
std::vector<Tensor> weightsFor(const PreparedGraph &graph,
                               const std::map<std::string, Tensor> &given) {
  std::vector<Tensor> out;
  for (const WeightSpec &w : graph.weights) {
    auto it = given.find(w.name);
    KILN_CHECK_KIND(Value, it != given.end(),
                    "compiled graph @{}: no tensor for weight \"{}\" (options[\"weights\"])",
                    graph.name, w.name);
    const Tensor &t = it->second;
    KILN_CHECK_KIND(Value, t.dtype() == w.dtype && t.sizes() == w.sizes,
                    "compiled graph @{}: weight \"{}\" is {}{} in the graph but {}{} was given",
                    graph.name, w.name, dtypeName(w.dtype), shapeToString(w.sizes),
                    dtypeName(t.dtype()), t.shapeStr());
    out.push_back(t.contiguous());
  }
  return out;
}

std::unique_ptr<codegen::Executable> cpuCode(const PreparedGraph &graph,
                                             const codegen::cpu::ProgramOptions &options,
                                             std::string &cache) {
  codegen::cpu::KernelCache &kernelCache =
      options.jit.cache ? *options.jit.cache : codegen::cpu::KernelCache::global();
  codegen::cpu::CacheStats before = kernelCache.stats();
  codegen::cpu::CompiledProgram program = codegen::cpu::compileProgram(graph.schedule, options);
  cache = cacheEvent(before, kernelCache.stats(), program.fromCache(),
                     !program.module().kernels.empty(), options.jit.dumpStages);
  return codegen::cpuExecutable(std::move(program));
}

std::unique_ptr<codegen::Executable> cudaCode(const PreparedGraph &graph, Device device) {
  std::string reason;
  cuda::Backend *backend = cuda::Backend::get(&reason);
  KILN_CHECK(backend, "kiln: CUDA is not available: {}", reason);
  codegen::cuda::CudaModule module = codegen::cuda::emitCuda(graph.schedule);
  std::shared_ptr<codegen::cuda::CudaDevice> dev = backend->open(device.index, module);
  return codegen::cudaExecutable(
      codegen::cuda::CudaProgram(graph.schedule, std::move(module), std::move(dev)), device);
}

} // namespace

std::unique_ptr<Runner> compile(std::unique_ptr<ir::Graph> graph,
                                const ir::NodePositions &positions, const CompileOptions &options,
                                CompileReport *report) {
  CompileReport local;
  CompileReport &r = report ? *report : local;
  Clock::time_point start = Clock::now();
  PreparedGraph prepared = prepareGraph(std::move(graph), positions, options.pipeline);
  std::vector<Tensor> weights = weightsFor(prepared, options.weights);
  r.frontSeconds = secondsSince(start);

  start = Clock::now();
  std::unique_ptr<codegen::Executable> code;
  if (options.device.type == DeviceType::CUDA) {
    code = cudaCode(prepared, options.device);
    r.cache = "cuda";
  } else {
    code = cpuCode(prepared, options.cpu, r.cache);
  }
  r.codeSeconds = secondsSince(start);
  return std::make_unique<Runner>(std::move(prepared), std::move(weights), std::move(code));
}

} // namespace kiln::driver
