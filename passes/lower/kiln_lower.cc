// kiln-lower: reads a .kir file, verifies each graph, lowers it to a loop program, schedules it
// and prints the scheduled program (passes/schedule/README.md describes the text).
//
//   kiln-lower model.kir              fused: kernels, loop orders, memory plan
//   kiln-lower model.kir --no-fuse    one kernel per lowered node (what lowering made)
//
// Parse, verifier and lowering errors print as `file:line:col: error: message` on stderr and
// make the exit status 1.

#include "ir/parser.h"
#include "ir/verifier.h"
#include "passes/lower/lowering.h"
#include "passes/schedule/schedule.h"

#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <sstream>

namespace {

using namespace kiln;

constexpr std::string_view kUsage = R"(usage: kiln-lower <file.kir | -> [--no-fuse]

Lowers each graph of a .kir file to the loop IR, schedules it and prints the scheduled program.

options:
  --no-fuse    no inlining and no kernel grouping: one kernel per lowered node
  -h, --help   show this help
)";

[[noreturn]] void usageError(const std::string &message) {
  std::cerr << "kiln-lower: " << message << "\n(run 'kiln-lower --help' for usage)\n";
  std::exit(2);
}

std::string readInput(const std::string &path) {
  std::ostringstream out;
  if (path == "-") {
    out << std::cin.rdbuf();
    return out.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << fmt::format("kiln-lower: cannot open '{}'\n", path);
    std::exit(1);
  }
  out << in.rdbuf();
  return out.str();
}

/// Points a diagnostic about a node at the line that defines it.
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

} // namespace

int main(int argc, char **argv) {
  std::string input;
  passes::schedule::ScheduleOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--no-fuse") {
      options.fuse = false;
    } else if (arg.size() > 1 && arg[0] == '-') {
      usageError(fmt::format("unknown option '{}'", arg));
    } else if (input.empty()) {
      input = std::string(arg);
    } else {
      usageError(fmt::format("more than one input file ('{}' and '{}')", input, arg));
    }
  }
  if (input.empty())
    usageError("no input file (use '-' for stdin)");
  std::string bufferName = input == "-" ? "<stdin>" : input;
  std::string text = readInput(input);
  try {
    ir::ParsedModule module = ir::parseModule(text, bufferName);
    for (size_t g = 0; g < module.graphs.size(); ++g) {
      const ir::Graph &graph = *module.graphs[g];
      if (std::optional<ir::Diagnostic> d = ir::verify(graph)) {
        std::cerr << locate(*d, module, bufferName).str() << "\n";
        return 1;
      }
      try {
        ir::loop::LoopProgram program = passes::lower::lowerGraph(graph);
        std::cout << (g ? "\n" : "") << "// graph @" << graph.name() << "\n"
                  << passes::schedule::schedule(program, options).str() << std::flush;
      } catch (const ir::DiagnosticError &e) {
        std::cerr << locate(e.diagnostic(), module, bufferName).str() << "\n";
        return 1;
      }
    }
  } catch (const ir::DiagnosticError &e) {
    std::cerr << e.diagnostic().str() << "\n";
    return 1;
  } catch (const std::exception &e) {
    std::cerr << fmt::format("{}: error: {}\n", bufferName, e.what());
    return 1;
  }
  return 0;
}
