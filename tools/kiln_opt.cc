// kiln-opt: reads a .kir file, verifies it, runs a pass pipeline and prints the result; with
// --emit, runs kiln.compile's whole pipeline (driver/prepared_graph.h) and prints a later stage.
//
//   kiln-opt model.kir -p cse,dce
//   kiln-opt - --print-ir-after-all -p dce < model.kir
//   kiln-opt cases.kir --split-input-file --verify-only
//   kiln-opt model.kir --emit=schedule        the scheduled loop program of each graph
//   kiln-opt model.kir --emit=mlir            the CPU kernels as MLIR (before the JIT)
//   kiln-opt model.kir --emit=llvm|asm        their LLVM IR after -O3, or this host's assembly
//   kiln-opt model.kir --emit=cuda            the CUDA C of each graph
//
// Parse and verifier errors print as `file:line:col: error: message` on stderr and make the exit
// status 1; with --split-input-file each `// -----` chunk is processed on its own, so one file can
// hold many error cases (lit tests do that).

#include "codegen/cpu/compile.h"
#include "codegen/cpu/compile_dumps.h"
#include "codegen/cpu/emit.h"
#include "codegen/cpu/target.h"
#include "codegen/cuda/emit.h"
#include "driver/prepared_graph.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"

#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <sstream>

namespace {

using namespace kiln;

constexpr std::string_view kUsage = R"(usage: kiln-opt <file.kir | -> [options]

Reads graphs in the .kir text format, verifies them, runs a pass pipeline and prints the result.

options:
  -p, --passes PIPELINE    passes to run, e.g. 'dce,cse' or 'fixpoint(cse,dce)'
  --print-ir-after NAME    print the IR after pass NAME (to stderr; may be repeated); with
                           --emit also the stages `lower` and `schedule`
  --print-ir-after-all     print the IR after every pass (to stderr)
  --time-passes            print each pass's wall time after the pipeline (to stderr)
  --verify-only            parse and verify only; print nothing
  --split-input-file       process each '// -----' separated chunk on its own
  --no-verify-each         do not run the verifier after each pass
  --list-passes            list the registered passes
  --emit STAGE             what to print: kir (default: the graph after the passes given), or,
                           through kiln.compile's pipeline (shape-infer, the graph passes: -p or
                           the default ones, lowering, scheduling), schedule (the scheduled loop
                           program), mlir (the CPU kernels' MLIR), llvm (their LLVM IR after
                           LLVM's -O3 for this host), asm (this host's assembly) or cuda (the
                           CUDA C)
  --no-fuse                with --emit: no inlining and no kernel grouping (one kernel per
                           lowered node)
  --vector-bits N          with --emit=mlir|llvm|asm: vector width (mlir's default 512:
                           AVX-512; llvm and asm default to what this host has)
  -h, --help               show this help
)";

enum class Emit { Kir, Schedule, Mlir, Llvm, Asm, Cuda };

struct Options {
  std::string input;
  std::string pipeline;
  bool pipelineGiven = false;
  Emit emit = Emit::Kir;
  bool fuse = true;
  int vectorBits = 512;
  bool vectorBitsGiven = false;
  bool verifyOnly = false;
  bool splitInput = false;
  passes::PassManagerOptions pm;
};

/// A piece of the input and the line it starts on.
struct Chunk {
  std::string text;
  int firstLine;
};

[[noreturn]] void usageError(const std::string &message) {
  std::cerr << "kiln-opt: " << message << "\n(run 'kiln-opt --help' for usage)\n";
  std::exit(2);
}

// Accepts `--flag value` and `--flag=value`.
bool takeValue(int argc, char **argv, int &i, std::string_view flag, std::string &out) {
  std::string_view arg = argv[i];
  if (arg == flag) {
    if (i + 1 >= argc)
      usageError(fmt::format("{} needs a value", flag));
    out = argv[++i];
    return true;
  }
  if (arg.starts_with(flag) && arg.size() > flag.size() && arg[flag.size()] == '=') {
    out = std::string(arg.substr(flag.size() + 1));
    return true;
  }
  return false;
}

Options parseArgs(int argc, char **argv) {
  Options o;
  o.pm.dumpStream = &std::cerr;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string value;
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--list-passes") {
      for (const passes::PassInfo &p : passes::registeredPasses())
        std::cout << fmt::format("  {:<14} {}\n", p.name, p.summary);
      std::exit(0);
    } else if (takeValue(argc, argv, i, "-p", value) ||
               takeValue(argc, argv, i, "--passes", value)) {
      o.pipeline += (o.pipeline.empty() ? "" : ",") + value;
      o.pipelineGiven = true;
    } else if (takeValue(argc, argv, i, "--emit", value)) {
      if (value == "kir")
        o.emit = Emit::Kir;
      else if (value == "schedule")
        o.emit = Emit::Schedule;
      else if (value == "mlir")
        o.emit = Emit::Mlir;
      else if (value == "llvm")
        o.emit = Emit::Llvm;
      else if (value == "asm")
        o.emit = Emit::Asm;
      else if (value == "cuda")
        o.emit = Emit::Cuda;
      else
        usageError(
            fmt::format("unknown --emit stage '{}' (kir, schedule, mlir, llvm, asm, cuda)", value));
    } else if (arg == "--no-fuse") {
      o.fuse = false;
    } else if (takeValue(argc, argv, i, "--vector-bits", value)) {
      o.vectorBits = std::atoi(value.c_str());
      o.vectorBitsGiven = true;
    } else if (takeValue(argc, argv, i, "--print-ir-after", value)) {
      o.pm.printAfter.insert(value);
    } else if (arg == "--print-ir-after-all") {
      o.pm.printAfterAll = true;
    } else if (arg == "--time-passes") {
      o.pm.timePasses = true;
    } else if (arg == "--verify-only") {
      o.verifyOnly = true;
    } else if (arg == "--split-input-file") {
      o.splitInput = true;
    } else if (arg == "--no-verify-each") {
      o.pm.verifyEach = false;
    } else if (arg.size() > 1 && arg[0] == '-') {
      usageError(fmt::format("unknown option '{}'", arg));
    } else if (o.input.empty()) {
      o.input = std::string(arg);
    } else {
      usageError(fmt::format("more than one input file ('{}' and '{}')", o.input, arg));
    }
  }
  if (o.input.empty())
    usageError("no input file (use '-' for stdin)");
  return o;
}

std::string readInput(const std::string &path) {
  std::ostringstream out;
  if (path == "-") {
    out << std::cin.rdbuf();
    return out.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << fmt::format("kiln-opt: cannot open '{}'\n", path);
    std::exit(1);
  }
  out << in.rdbuf();
  return out.str();
}

std::vector<Chunk> splitChunks(const std::string &text, bool split) {
  if (!split)
    return {Chunk{text, 1}};
  std::vector<Chunk> chunks{Chunk{"", 1}};
  std::istringstream in(text);
  std::string line;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    size_t begin = line.find_first_not_of(" \t"), end = line.find_last_not_of(" \t\r");
    if (begin != std::string::npos && line.substr(begin, end + 1 - begin) == "// -----") {
      chunks.push_back(Chunk{"", lineNo + 1});
      continue;
    }
    chunks.back().text += line + "\n";
  }
  return chunks;
}

/// Adds where the text defines the offending node, and the user's source line if known.
ir::Diagnostic locate(ir::Diagnostic d, const ir::ParsedModule &module, const std::string &buf) {
  d.buffer = buf;
  if (d.node) {
    if (auto it = module.positions.find(d.node); it != module.positions.end())
      d.pos = it->second;
    if (d.node->loc().known())
      d.message += fmt::format(" (from {}:{})", d.node->loc().file, d.node->loc().line);
  }
  return d;
}

/// The CPU kernels of `schedule` as LLVM IR (after -O3) or assembly for this host, as the JIT
/// compiles them.
std::string hostCode(const passes::schedule::Schedule &schedule, const Options &o) {
  const codegen::cpu::TargetDesc &target = codegen::cpu::hostTarget();
  codegen::cpu::EmitOptions emit = o.vectorBitsGiven
                                       ? codegen::cpu::EmitOptions{o.vectorBits}
                                       : codegen::cpu::emitOptionsForFeatures(target.features);
  codegen::cpu::CompileOptions compile;
  compile.dumpStages = true;
  codegen::cpu::CompileDumps dumps;
  codegen::cpu::compileToObject(codegen::cpu::emitModule(schedule, emit).text, target, compile,
                                &dumps);
  return o.emit == Emit::Llvm ? dumps.llvmIr : dumps.assembly;
}

/// Runs each graph through kiln.compile's pipeline and prints the stage --emit names, each
/// after a `// graph @name` line; returns false after reporting an error.
bool emitStage(ir::ParsedModule &module, const Options &o, const std::string &bufferName,
               std::string &output) {
  driver::PipelineOptions options;
  options.filename = bufferName;
  options.fuse = o.fuse;
  options.dumps = o.pm; // --print-ir-after (graph passes, lower, schedule), --time-passes
  if (o.pipelineGiven)
    options.pipeline = o.pipeline;
  for (size_t i = 0; i < module.graphs.size(); ++i) {
    std::string name = module.graphs[i]->name();
    driver::PreparedGraph graph;
    try {
      graph = driver::prepareGraph(std::move(module.graphs[i]), module.positions, options);
    } catch (const driver::LoweringDeclined &e) {
      std::cerr << e.diagnostic.str() << "\n";
      return false;
    }
    std::string text;
    switch (o.emit) {
    case Emit::Schedule:
      text = graph.schedule.str();
      break;
    case Emit::Mlir:
      text = codegen::cpu::emitModule(graph.schedule, {o.vectorBits}).text;
      break;
    case Emit::Llvm:
    case Emit::Asm:
      text = hostCode(graph.schedule, o);
      break;
    default:
      text = codegen::cuda::emitCuda(graph.schedule).source;
      break;
    }
    output += fmt::format("{}// graph @{}\n{}", i ? "\n" : "", name, text);
  }
  return true;
}

/// Processes one chunk; returns false after reporting an error.
bool processChunk(const Chunk &chunk, const Options &o, const std::string &bufferName,
                  std::string &output) {
  try {
    ir::ParsedModule module = ir::parseModule(chunk.text, bufferName, chunk.firstLine);
    for (const auto &graph : module.graphs) {
      if (std::optional<ir::Diagnostic> d = ir::verify(*graph)) {
        std::cerr << locate(*d, module, bufferName).str() << "\n";
        return false;
      }
    }
    if (o.verifyOnly)
      return true;
    if (o.emit != Emit::Kir)
      return emitStage(module, o, bufferName, output);
    for (size_t i = 0; i < module.graphs.size(); ++i) {
      passes::PassManager pm(o.pm);
      pm.addPipeline(o.pipeline);
      try {
        pm.run(*module.graphs[i]);
      } catch (const ir::DiagnosticError &e) {
        std::cerr << locate(e.diagnostic(), module, bufferName).str() << "\n";
        return false;
      }
      output += (i ? "\n" : "") + ir::printGraph(*module.graphs[i]);
    }
    return true;
  } catch (const ir::DiagnosticError &e) {
    std::cerr << e.diagnostic().str() << "\n";
  } catch (const std::exception &e) {
    std::cerr << fmt::format("{}: error: {}\n", bufferName, e.what());
  }
  return false;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parseArgs(argc, argv);
  try { // reject a bad pipeline before reading any input
    passes::parsePipeline(o.pipeline);
  } catch (const std::exception &e) {
    usageError(e.what());
  }
  std::string bufferName = o.input == "-" ? "<stdin>" : o.input;
  std::string text = readInput(o.input);
  bool ok = true;
  bool first = true;
  for (const Chunk &chunk : splitChunks(text, o.splitInput)) {
    if (!o.verifyOnly && !first)
      std::cout << "// -----\n" << std::flush;
    std::string output;
    ok &= processChunk(chunk, o, bufferName, output);
    std::cout << output << std::flush;
    first = false;
  }
  return ok ? 0 : 1;
}
