// kilnc: compiles an exported program (.kir + .safetensors) into libNAME.so + NAME.h.
//
//   kilnc model.kir [-o DIR] [--name NAME] [--target cpu|cuda] [--weights embed|file]
//         [--emit kir|loop|mlir|llvm|asm|cuda|ptx] [-O0..3] [--no-fuse] [-v]
//
// The program goes through the driver pipeline kiln.compile uses (driver/prepared_graph.h);
// `--emit` prints one stage to stdout instead of building (like toyc -emit=). Errors print as
// `kilnc: error: ...` (a malformed .kir as file:line:col) and exit with status 1; usage errors
// exit with 2.

#include "aot/library_builder.h"
#include "aot/model.h"
#include "aot/safetensors.h"
#include "codegen/cpu/compile.h"
#include "codegen/cpu/emit.h"
#include "codegen/cuda/compile.h"
#include "codegen/cuda/emit.h"
#include "codegen/cuda/nvrtc.h"
#include "ir/diagnostic.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <optional>

namespace fs = std::filesystem;
using namespace kiln;

namespace {

constexpr const char *kUsage =
    R"(usage: kilnc model.kir [-o DIR] [--name NAME] [--target cpu|cuda] [--weights embed|file]
             [--emit kir|loop|mlir|llvm|asm|cuda|ptx] [-O0|-O1|-O2|-O3] [--cpu LEVEL]
             [--arch XY] [--no-fuse] [-v]

Compiles an exported kiln program (model.kir and model.safetensors beside it, as
ExportedProgram.save writes them) into DIR/libNAME.so and DIR/NAME.h (plus libkiln_aot.so,
kiln_aot.h and, unless --weights embed, NAME.safetensors). --emit prints one stage instead.
  -o DIR        output folder (default: .)
  --name NAME   C identifier of the model (default: the .kir file's stem)
  --target      cpu (default) or cuda: NVRTC's PTX and cubin for --arch embedded in the
                library (built without a GPU; running needs one)
  --arch XY     the CUDA architecture sm_XY (default 80)
  --cpu LEVEL   native (default: this machine's CPU) or x86-64, x86-64-v2, x86-64-v3,
                x86-64-v4: the oldest x86 level the library must run on
  --weights     file (default: NAME.safetensors next to the library) or embed (in the library)
  --weights-path FILE   the weights file (default: model.safetensors beside model.kir)
  --emit STAGE  kir (after the graph passes), loop (scheduled loop program), mlir, llvm, asm,
                cuda (CUDA C), ptx (NVRTC, --arch 80|90)
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string input, outDir = ".", name, target = "cpu", weights = "file", weightsPath, emit,
                     cpu = "native";
  int optLevel = 3, arch = 80;
  bool fuse = true, verbose = false;
};

Options parseArgs(int argc, char **argv) {
  Options o;
  auto value = [&](int &i, const std::string &flag) -> std::string {
    if (i + 1 >= argc)
      throw UsageError(fmt::format("{} needs a value", flag));
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      fmt::print("{}", kUsage);
      std::exit(0);
    } else if (a == "-o") {
      o.outDir = value(i, a);
    } else if (a == "--name") {
      o.name = value(i, a);
    } else if (a == "--target") {
      o.target = value(i, a);
    } else if (a == "--weights") {
      o.weights = value(i, a);
    } else if (a == "--weights-path") {
      o.weightsPath = value(i, a);
    } else if (a == "--emit") {
      o.emit = value(i, a);
    } else if (a == "--cpu") {
      o.cpu = value(i, a);
    } else if (a == "--arch") {
      o.arch = std::stoi(value(i, a));
    } else if (a.size() == 3 && a.starts_with("-O") && a[2] >= '0' && a[2] <= '3') {
      o.optLevel = a[2] - '0';
    } else if (a == "--no-fuse") {
      o.fuse = false;
    } else if (a == "-v") {
      o.verbose = true;
    } else if (a.starts_with("-")) {
      throw UsageError(fmt::format("unknown option {}", a));
    } else if (o.input.empty()) {
      o.input = a;
    } else {
      throw UsageError(fmt::format("one input file expected, got {} and {}", o.input, a));
    }
  }
  if (o.input.empty())
    throw UsageError("no input .kir file");
  if (o.target != "cpu" && o.target != "cuda")
    throw UsageError(fmt::format("--target must be cpu or cuda, got {}", o.target));
  if (o.weights != "file" && o.weights != "embed")
    throw UsageError(fmt::format("--weights must be embed or file, got {}", o.weights));
  static const char *const kStages[] = {"", "kir", "loop", "mlir", "llvm", "asm", "cuda", "ptx"};
  if (std::find(std::begin(kStages), std::end(kStages), o.emit) == std::end(kStages))
    throw UsageError(fmt::format("--emit must be one of kir, loop, mlir, llvm, asm, cuda, ptx; "
                                 "got {}",
                                 o.emit));
  if (o.name.empty())
    o.name = fs::path(o.input).stem().string();
  if (o.weightsPath.empty())
    o.weightsPath = fs::path(o.input).replace_extension(".safetensors").string();
  return o;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), "cannot read {}", path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Where libkiln_aot.so and kiln_aot.h are: $KILN_AOT_RUNTIME_DIR, else installed beside kilnc
/// (`../lib/kiln-aot`), else Bazel's runfiles or output tree.
std::string runtimeDir(const char *argv0) {
  if (const char *env = std::getenv("KILN_AOT_RUNTIME_DIR"); env && *env)
    return env;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    exe = fs::absolute(argv0);
  for (const fs::path &dir :
       {exe.parent_path() / ".." / "lib" / "kiln-aot",
        fs::path(exe.string() + ".runfiles") / "kiln" / "aot", exe.parent_path()})
    if (fs::exists(dir / "libkiln_aot.so"))
      return fs::canonical(dir).string();
  return exe.parent_path().string();
}

/// Installed in a venv (`<venv>/bin/kilnc`): the nvidia-cuda-nvrtc wheel is in its
/// site-packages, where NVRTC is searched too.
void addVenvNvrtcRoots() {
  std::error_code ec;
  fs::path venv = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path();
  if (ec || !fs::exists(venv / "pyvenv.cfg") || !fs::exists(venv / "lib"))
    return;
  for (const fs::directory_entry &e : fs::directory_iterator(venv / "lib", ec))
    if (e.path().filename().string().starts_with("python3"))
      codegen::cuda::Nvrtc::addSearchRoot((e.path() / "site-packages").string());
}

/// Checks every weight node against the weights file before anything is built.
void checkWeights(const driver::PreparedGraph &graph, const std::string &path,
                  const std::string &name) {
  if (graph.weights.empty())
    return;
  KILN_CHECK(fs::exists(path), "the program has {} weights but {} does not exist (--weights-path)",
             graph.weights.size(), path);
  std::shared_ptr<aot::SafeTensorsFile> file = aot::SafeTensorsFile::open(path);
  for (const driver::WeightSpec &w : graph.weights)
    aot::findWeight(file->view(), w, name);
}

void emitStage(const Options &o, const driver::PreparedGraph &graph) {
  if (o.emit == "kir") {
    fmt::print("{}", graph.graphText);
  } else if (o.emit == "loop") {
    fmt::print("{}", graph.loopText);
  } else if (o.emit == "cuda" || o.emit == "ptx") {
    codegen::cuda::CudaModule module = codegen::cuda::emitCuda(graph.schedule);
    if (o.emit == "cuda") {
      fmt::print("{}", module.source);
      return;
    }
    codegen::cuda::CudaCompileOptions options;
    options.arch = o.arch;
    options.cubin = false;
    fmt::print("{}", codegen::cuda::compileCuda(module.source, options).ptx);
  } else {
    codegen::cpu::TargetDesc target = aot::cpuTarget(o.cpu);
    codegen::cpu::EmittedModule module = codegen::cpu::emitModule(
        graph.schedule, codegen::cpu::emitOptionsForFeatures(target.features));
    if (o.emit == "mlir") {
      fmt::print("{}", module.text);
      return;
    }
    codegen::cpu::CompileOptions compile;
    compile.optLevel = o.optLevel;
    compile.dumpStages = true;
    codegen::cpu::CompileDumps dumps;
    codegen::cpu::compileToObject(module.text, target, compile, &dumps);
    fmt::print("{}", o.emit == "llvm" ? dumps.llvmIr : dumps.assembly);
  }
}

int compile(const Options &o, const char *argv0) {
  addVenvNvrtcRoots();
  std::string text = readFile(o.input);
  driver::PipelineOptions pipeline;
  pipeline.filename = o.input;
  pipeline.fuse = o.fuse;
  driver::PreparedGraph graph = driver::prepareGraph(text, pipeline);
  KILN_CHECK_KIND(Value, graph.writeBacks.empty(),
                  "{}: the program writes into its input '{}' (an in-place op on an argument); "
                  "a compiled library's inputs are read-only: return the new value instead",
                  o.input, graph.inputs[graph.writeBacks.front().input].name);
  if (!o.emit.empty()) {
    emitStage(o, graph);
    return 0;
  }
  checkWeights(graph, o.weightsPath, o.name);
  aot::LibraryOptions lib;
  lib.name = o.name;
  lib.outDir = o.outDir;
  lib.kirText = text;
  lib.weightsPath = graph.weights.empty() ? "" : o.weightsPath;
  lib.embedWeights = o.weights == "embed";
  lib.optLevel = o.optLevel;
  lib.pipelineOptions = o.fuse ? "fuse=1" : "fuse=0";
  lib.runtimeDir = runtimeDir(argv0);
  lib.target = o.target;
  lib.cudaArch = o.arch;
  lib.cpu = o.cpu;
  lib.verbose = o.verbose;
  for (const std::string &path : aot::buildLibrary(graph, lib))
    if (o.verbose)
      fmt::print("kilnc: wrote {}\n", path);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  try {
    o = parseArgs(argc, argv);
  } catch (const std::exception &e) {
    fmt::print(stderr, "kilnc: error: {}\n{}", e.what(), kUsage);
    return 2;
  }
  try {
    return compile(o, argv[0]);
  } catch (const ir::DiagnosticError &e) {
    fmt::print(stderr, "kilnc: {}\n", e.what());
  } catch (const std::exception &e) {
    std::string_view message = e.what();
    if (message.starts_with("kilnc: ")) // the back end names itself too
      message.remove_prefix(7);
    fmt::print(stderr, "kilnc: error: {}\n", message);
  }
  return 1;
}
