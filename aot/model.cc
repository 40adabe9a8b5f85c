// AotModel: the driver pipeline over the embedded .kir, the library's kernels, mapped weights.

#include "aot/model.h"

#include "aot/safetensors.h"
#include "codegen/cpu/emit.h"
#include "codegen/cuda/cuda_program.h"
#include "codegen/cuda/driver.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <dlfcn.h>

#include <cstring>
#include <filesystem>

namespace kiln::aot {

namespace {

/// The folder of the shared object that holds `address` (libNAME.so for its embedded .kir).
std::string libraryDir(const void *address) {
  Dl_info info{};
  if (!dladdr(address, &info) || !info.dli_fname)
    return ".";
  return std::filesystem::path(info.dli_fname).parent_path().string();
}

} // namespace

uint64_t moduleHash(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

const char *kilnVersion() { return "kiln-0.1.0"; }

std::vector<std::string> missingHostFeatures(std::string_view features) {
  // The features generated kernels can use, as LLVM names them, and the host check of each.
  struct Check {
    const char *name;
    bool present;
  };
  __builtin_cpu_init();
  const Check checks[] = {
      {"avx", __builtin_cpu_supports("avx") != 0},
      {"avx2", __builtin_cpu_supports("avx2") != 0},
      {"fma", __builtin_cpu_supports("fma") != 0},
      {"f16c", __builtin_cpu_supports("f16c") != 0},
      {"avx512f", __builtin_cpu_supports("avx512f") != 0},
      {"avx512bw", __builtin_cpu_supports("avx512bw") != 0},
      {"avx512dq", __builtin_cpu_supports("avx512dq") != 0},
      {"avx512vl", __builtin_cpu_supports("avx512vl") != 0},
      {"avx512bf16", __builtin_cpu_supports("avx512bf16") != 0},
      {"avx512fp16", __builtin_cpu_supports("avx512fp16") != 0},
  };
  std::vector<std::string> missing;
  size_t pos = 0;
  while (pos <= features.size()) {
    size_t end = features.find(',', pos);
    std::string_view f = features.substr(pos, end == std::string_view::npos ? end : end - pos);
    if (f.size() > 1 && f[0] == '+')
      for (const Check &c : checks)
        if (f.substr(1) == c.name && !c.present)
          missing.emplace_back(c.name);
    if (end == std::string_view::npos)
      break;
    pos = end + 1;
  }
  return missing;
}

driver::PipelineOptions parsePipelineOptions(std::string_view options, std::string filename) {
  driver::PipelineOptions out;
  out.filename = std::move(filename);
  if (options.find("fuse=0") != std::string_view::npos)
    out.fuse = false;
  return out;
}

const SafeTensorInfo &findWeight(const SafeTensorsView &view, const driver::WeightSpec &w,
                                 const std::string &model) {
  const SafeTensorInfo *info = view.find(w.name);
  if (!info)
    throw AotError(KILN_ERROR_WEIGHTS,
                   fmt::format("{}: no tensor \"{}\" in {}", model, w.name, view.what()));
  if (info->dtype != w.dtype || info->shape != w.sizes)
    throw AotError(KILN_ERROR_WEIGHTS,
                   fmt::format("{}: tensor \"{}\" of {} is {}{}, the program expects {}{}", model,
                               w.name, view.what(), dtypeName(info->dtype),
                               shapeToString(info->shape), dtypeName(w.dtype),
                               shapeToString(w.sizes)));
  return *info;
}

DType fromKilnDType(int32_t dtype) {
  if (dtype < 0 || dtype >= kNumDTypes)
    throw AotError(KILN_ERROR_DTYPE, fmt::format("unknown kiln_dtype {}", dtype));
  return static_cast<DType>(dtype);
}

int32_t toKilnDType(DType dtype) { return static_cast<int32_t>(dtype); }

AotModel::AotModel(const kiln_program_desc &desc, const char *weightsPath) : name_(desc.name) {
  if (desc.abi_version != KILN_AOT_ABI_VERSION)
    throw AotError(KILN_ERROR_INCOMPATIBLE,
                   fmt::format("{}: built for AOT ABI {}, this runtime has {}", name_,
                               desc.abi_version, KILN_AOT_ABI_VERSION));
  if (std::strcmp(desc.kiln_version, kilnVersion()) != 0)
    throw AotError(KILN_ERROR_INCOMPATIBLE,
                   fmt::format("{}: compiled by {}, but this runtime is {}: use the "
                               "libkiln_aot.so kilnc wrote next to it",
                               name_, desc.kiln_version, kilnVersion()));
  bool cuda = desc.target && std::strcmp(desc.target, "cuda") == 0;
  if (!cuda)
    if (std::vector<std::string> missing = missingHostFeatures(desc.features); !missing.empty())
      throw AotError(KILN_ERROR_INCOMPATIBLE,
                     fmt::format("{}: compiled for CPU features this CPU lacks ({}): compile it "
                                 "again on (or for) this machine",
                                 name_, fmt::join(missing, ", ")));
  std::string kir(desc.kir, desc.kir_size);
  driver::PreparedGraph graph;
  try {
    graph = driver::prepareGraph(kir, parsePipelineOptions(desc.options, name_ + ".kir"));
  } catch (const std::exception &e) {
    throw AotError(KILN_ERROR_INCOMPATIBLE,
                   fmt::format("{}: the runtime cannot rebuild the program: {}", name_, e.what()));
  }
  std::unique_ptr<codegen::Executable> code =
      cuda ? loadCudaCode(graph, desc) : loadCpuKernels(graph, desc);
  std::vector<Tensor> weights = bindWeights(graph, desc, weightsPath);
  runner_ = std::make_unique<driver::Runner>(std::move(graph), std::move(weights), std::move(code));
  describe();
}

AotModel::~AotModel() = default;

std::unique_ptr<codegen::Executable> AotModel::loadCpuKernels(const driver::PreparedGraph &graph,
                                                              const kiln_program_desc &desc) {
  codegen::cpu::EmittedModule module =
      codegen::cpu::emitModule(graph.schedule, codegen::cpu::emitOptionsForFeatures(desc.features));
  if (moduleHash(module.text) != desc.module_hash)
    throw AotError(KILN_ERROR_INCOMPATIBLE,
                   fmt::format("{}: this runtime schedules the program differently from the "
                               "kilnc that compiled it (module hash mismatch)",
                               name_));
  std::vector<codegen::cpu::KernelFn> kernels;
  for (const codegen::cpu::KernelInfo &info : module.kernels) {
    codegen::cpu::KernelFn fn = nullptr;
    for (size_t k = 0; k < desc.num_kernels; ++k)
      if (info.name == desc.kernel_names[k])
        fn = desc.kernels[k];
    if (!fn)
      throw AotError(KILN_ERROR_INCOMPATIBLE,
                     fmt::format("{}: the library has no kernel {}", name_, info.name));
    kernels.push_back(fn);
  }
  return codegen::cpuExecutable(codegen::cpu::CompiledProgram::fromKernels(
      graph.schedule, std::move(module), std::move(kernels), nullptr));
}

std::unique_ptr<codegen::Executable> AotModel::loadCudaCode(const driver::PreparedGraph &graph,
                                                            const kiln_program_desc &desc) {
  codegen::cuda::CudaModule module = codegen::cuda::emitCuda(graph.schedule);
  if (moduleHash(module.source) != desc.module_hash)
    throw AotError(KILN_ERROR_INCOMPATIBLE,
                   fmt::format("{}: this runtime emits different CUDA code from the kilnc that "
                               "compiled it (module hash mismatch)",
                               name_));
  std::string reason;
  if (!codegen::cuda::Driver::get(&reason))
    throw AotError(KILN_ERROR_INCOMPATIBLE,
                   fmt::format("{}: compiled for CUDA, but no CUDA device can be used here: {}",
                               name_, reason));
  codegen::cuda::CompiledCuda code;
  code.arch = desc.cuda_arch;
  code.ptx.assign(reinterpret_cast<const char *>(desc.cuda_ptx), desc.cuda_ptx_size);
  if (desc.cuda_cubin && desc.cuda_cubin_size) {
    code.cubin.assign(reinterpret_cast<const char *>(desc.cuda_cubin), desc.cuda_cubin_size);
    code.cubinSource = codegen::cuda::CubinSource::Nvrtc;
  }
  try {
    // Host tensors in and out: the program copies them to and from its device.
    return codegen::cudaExecutable(
        codegen::cuda::CudaProgram(graph.schedule, std::move(module),
                                   codegen::cuda::openDriverDevice(0, code)),
        Device{});
  } catch (const std::exception &e) {
    throw AotError(KILN_ERROR_INCOMPATIBLE,
                   fmt::format("{}: cannot load the CUDA code: {}", name_, e.what()));
  }
}

std::vector<Tensor> AotModel::bindWeights(const driver::PreparedGraph &graph,
                                          const kiln_program_desc &desc, const char *weightsPath) {
  std::vector<Tensor> weights;
  if (graph.weights.empty())
    return weights;
  const SafeTensorsView *view = nullptr;
  SafeTensorsView embedded;
  std::shared_ptr<SafeTensorsFile> file;
  try {
    if (!weightsPath && desc.weights) {
      embedded = SafeTensorsView::parse(
          std::span(reinterpret_cast<const std::byte *>(desc.weights), desc.weights_size),
          name_ + ": embedded weights");
      view = &embedded;
    } else {
      std::string path = weightsPath         ? std::string(weightsPath)
                         : desc.weights_file ? libraryDir(desc.kir) + "/" + desc.weights_file
                                             : std::string();
      if (path.empty())
        throw AotError(KILN_ERROR_WEIGHTS,
                       fmt::format("{}: the weights are not embedded: pass the path of the "
                                   "weights file",
                                   name_));
      file = SafeTensorsFile::open(path);
      weightsOwner_ = file;
      view = &file->view();
    }
  } catch (const AotError &) {
    throw;
  } catch (const std::exception &e) {
    throw AotError(KILN_ERROR_WEIGHTS, e.what());
  }
  for (const driver::WeightSpec &w : graph.weights) {
    // Embedded bytes live as long as the library; a file as long as its mapping.
    weights.push_back(view->tensor(findWeight(*view, w, name_), weightsOwner_));
  }
  return weights;
}

void AotModel::describe() {
  auto keep = [&](std::string s) {
    strings_.push_back(std::make_unique<std::string>(std::move(s)));
    return strings_.back()->c_str();
  };
  auto fill = [&](kiln_io_info &info, const std::string &name, DType dtype,
                  const std::vector<ir::SymInt> &sizes) {
    info = kiln_io_info{};
    info.name = keep(name);
    info.dtype = toKilnDType(dtype);
    info.rank = static_cast<int32_t>(sizes.size());
    for (size_t d = 0; d < sizes.size() && d < KILN_MAX_RANK; ++d) {
      info.min[d] = 0;
      info.max[d] = -1;
      if (sizes[d].isConstant()) {
        info.sizes[d] = *sizes[d].constant();
        continue;
      }
      info.sizes[d] = -1;
      info.dims[d] = keep(sizes[d].str());
      for (const driver::SymRange &r : graph().ranges)
        if (sizes[d].symbolName() == r.symbol) {
          info.min[d] = r.min;
          info.max[d] = r.max;
        }
    }
  };
  for (const driver::InputSpec &in : graph().inputs) {
    if (in.sizes.size() > KILN_MAX_RANK)
      throw AotError(KILN_ERROR_INCOMPATIBLE,
                     fmt::format("{}: input {} has rank {} (the C API allows {})", name_, in.name,
                                 in.sizes.size(), KILN_MAX_RANK));
    fill(inputInfo_.emplace_back(), in.name, in.dtype, in.sizes);
  }
  for (size_t k = 0; k < graph().outputs.size(); ++k) {
    const driver::OutputSpec &out = graph().outputs[k];
    if (out.sizes.size() > KILN_MAX_RANK)
      throw AotError(KILN_ERROR_INCOMPATIBLE,
                     fmt::format("{}: output {} has rank {} (the C API allows {})", name_, k,
                                 out.sizes.size(), KILN_MAX_RANK));
    fill(outputInfo_.emplace_back(), fmt::format("output{}", k), out.dtype, out.sizes);
  }
}

std::vector<Tensor> AotModel::wrapInputs(std::span<const kiln_tensor> inputs,
                                         std::vector<std::optional<int64_t>> &ints) const {
  const std::vector<driver::InputSpec> &specs = graph().inputs;
  if (inputs.size() != specs.size())
    throw AotError(KILN_ERROR_INVALID_ARGUMENT, fmt::format("{}: run takes {} inputs, got {}",
                                                            name_, specs.size(), inputs.size()));
  std::vector<Tensor> tensors;
  ints.assign(specs.size(), std::nullopt);
  for (size_t k = 0; k < specs.size(); ++k) {
    const driver::InputSpec &spec = specs[k];
    const kiln_tensor &t = inputs[k];
    if (t.dtype != toKilnDType(spec.dtype))
      throw AotError(KILN_ERROR_DTYPE,
                     fmt::format("{}: input {} must be {}, got {}", name_, spec.name,
                                 dtypeName(spec.dtype), kiln_dtype_name(t.dtype)));
    if (t.rank != static_cast<int32_t>(spec.sizes.size()))
      throw AotError(KILN_ERROR_SHAPE,
                     fmt::format("{}: input {} must have rank {} ({}), got rank {}", name_,
                                 spec.name, spec.sizes.size(), ir::printSizes(spec.sizes), t.rank));
    Shape sizes(t.sizes, t.sizes + t.rank);
    for (int64_t s : sizes)
      if (s < 0)
        throw AotError(KILN_ERROR_SHAPE, fmt::format("{}: input {} has a negative size in {}",
                                                     name_, spec.name, shapeToString(sizes)));
    int64_t nbytes = numelOf(sizes) * itemsize(spec.dtype);
    if (!t.data && nbytes > 0)
      throw AotError(KILN_ERROR_INVALID_ARGUMENT,
                     fmt::format("{}: input {} has no data", name_, spec.name));
    auto storage = Storage::borrow(t.data, static_cast<size_t>(nbytes), Device{}, [] {});
    tensors.push_back(Tensor::fromStorage(storage, spec.dtype, sizes, contiguousStrides(sizes), 0));
    if (spec.kind == driver::ValueKind::Int)
      ints[k] = *static_cast<const int64_t *>(t.data);
  }
  return tensors;
}

void AotModel::run(std::span<const kiln_tensor> inputs, std::span<kiln_tensor> outputs) const {
  if (outputs.size() != graph().outputs.size())
    throw AotError(KILN_ERROR_INVALID_ARGUMENT,
                   fmt::format("{}: run fills {} outputs, got room for {}", name_,
                               graph().outputs.size(), outputs.size()));
  std::vector<std::optional<int64_t>> ints;
  std::vector<Tensor> tensors = wrapInputs(inputs, ints);
  ir::SymbolValues values;
  try {
    values = runner_->bind(tensors, ints);
  } catch (const driver::SpecializationError &e) {
    throw AotError(KILN_ERROR_SHAPE, fmt::format("{}: {}", name_, e.what()));
  }
  // Caller buffers must match what this call produces: check them all before running.
  std::vector<Shape> outSizes;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const driver::OutputSpec &spec = graph().outputs[k];
    Shape sizes;
    for (const ir::SymInt &s : spec.sizes)
      sizes.push_back(s.evaluate(values));
    kiln_tensor &o = outputs[k];
    if (o.data) {
      Shape given(o.sizes, o.sizes + std::clamp(o.rank, 0, KILN_MAX_RANK));
      if (o.dtype != toKilnDType(spec.dtype) || given != sizes)
        throw AotError(KILN_ERROR_SHAPE,
                       fmt::format("{}: output {} is {}{} for these inputs, but its buffer is "
                                   "described as {}{}",
                                   name_, k, dtypeName(spec.dtype), shapeToString(sizes),
                                   kiln_dtype_name(o.dtype), shapeToString(given)));
    }
    outSizes.push_back(std::move(sizes));
  }
  // Mutated arguments are not written back: the caller's input buffers stay as given.
  std::vector<Tensor> results = runner_->run(tensors, values, /*writeBack=*/false);
  for (size_t k = 0; k < outputs.size(); ++k) {
    const driver::OutputSpec &spec = graph().outputs[k];
    Tensor result = spec.aliasOf >= 0 ? tensors[spec.aliasOf] : results[k];
    kiln_tensor &o = outputs[k];
    size_t nbytes = static_cast<size_t>(numelOf(outSizes[k]) * itemsize(spec.dtype));
    if (!o.data) {
      o.data = std::malloc(std::max<size_t>(nbytes, 1));
      if (!o.data)
        throw AotError(KILN_ERROR_RUNTIME, fmt::format("{}: out of memory", name_));
      o.dtype = toKilnDType(spec.dtype);
      o.rank = static_cast<int32_t>(outSizes[k].size());
      std::copy(outSizes[k].begin(), outSizes[k].end(), o.sizes);
    }
    auto storage = Storage::borrow(o.data, nbytes, Device{}, [] {});
    Tensor dest =
        Tensor::fromStorage(storage, spec.dtype, outSizes[k], contiguousStrides(outSizes[k]), 0);
    dest.copy_(result);
  }
}

} // namespace kiln::aot
