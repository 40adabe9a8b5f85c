// `kiln._C._compiler`: the optimizing CPU compiler seen from Python (kiln.compile's default
// backend, frontend/kiln/_capture/backend_cpu.py).
//
// compile_graph(kir_text, options) runs the one pipeline a graph becomes code through:
//   parse → shape-infer → verify → graph passes (functionalize, simplify, const-fold, dce, cse:
//   those registered) → lower (passes/lower) → schedule (passes/schedule) → emit + JIT through
//   the kernel cache (codegen/cpu, $KILN_CACHE_DIR)
// and returns a CompiledGraph, callable as `compiled(*inputs)` with the graph inputs in order
// (tensors; Python numbers for scalar inputs) and returning the tuple of graph outputs. A node
// that lowering declines raises LoweringError (a NotImplementedError) naming the node, its op and
// the user's source line, so the caller can run that part eagerly; can_lower(kir_text) answers
// the same question without compiling, with the line of the first declining node.
//
// [Note: specialization checks]
// A compiled graph assumes what its .kir text says about its inputs: dtypes, ranks, sizes as
// symbolic expressions, the strides of non-contiguous inputs, and the equalities shape-infer
// assumed (`s0 == s1` where two symbolic sizes broadcast). A call binds the symbols from the
// input shapes (a size that is exactly a symbol, or an expression in one unbound symbol that can
// be solved: `s0*2`), from scalar inputs named as symbols (options["input_symbols"]), then checks
// every size, stride and assumption. A call that breaks one raises SpecializationError (a
// ValueError) before anything runs, so the caller can run the graph eagerly instead.

#include "codegen/cpu/compile_program.h"
#include "codegen/cpu/kernel_cache.h"
#include "frontend/csrc/bindings.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/shape_rules.h"
#include "ir/verifier.h"
#include "passes/lower/lowering.h"
#include "passes/pass_manager.h"
#include "passes/schedule/schedule.h"
#include "passes/shape_infer.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <chrono>

namespace py = pybind11;

namespace kiln::frontend {

namespace {

using codegen::cpu::CacheStats;
using codegen::cpu::CompiledProgram;
using codegen::cpu::KernelCache;

/// A lowering decline: becomes kiln._C._compiler.LoweringError (a NotImplementedError).
struct LoweringDeclined : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// Inputs that break what the compiled code assumed: becomes SpecializationError (ValueError).
struct SpecializationMismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The graph pipeline: every pass of this list that the pass manager knows, in order.
constexpr std::string_view kDefaultPasses[] = {"functionalize", "simplify", "const-fold",
                                               "dce",           "cse",      "dce"};

std::string defaultPipeline() {
  std::string out;
  for (std::string_view name : kDefaultPasses) {
    for (const passes::PassInfo &info : passes::registeredPasses()) {
      if (info.name == name) {
        out += (out.empty() ? "" : ",") + std::string(name);
        break;
      }
    }
  }
  return out;
}

/// `d` pointing at the line of `text` that defines its node, naming the user's source line.
ir::Diagnostic located(ir::Diagnostic d, const ir::ParsedModule &module,
                       const std::string &filename) {
  d.buffer = filename;
  if (d.node) {
    if (auto it = module.positions.find(d.node); it != module.positions.end())
      d.pos = it->second;
    if (d.node->loc().known())
      d.message += fmt::format(" (from {}:{})", d.node->loc().file, d.node->loc().line);
  }
  return d;
}

/// The single graph of `text`, typed by shape-infer and verified. Shape errors and verifier
/// errors are ValueErrors pointing at the node; `assumed` receives shape-infer's assumptions.
std::unique_ptr<ir::Graph> parseTyped(const std::string &text, const std::string &filename,
                                      ir::ParsedModule &module, ir::SymAssumptions *assumed) {
  module = ir::parseModule(text, filename);
  KILN_CHECK_KIND(Value, module.graphs.size() == 1, "{}: expected one graph, found {}", filename,
                  module.graphs.size());
  ir::Graph &graph = *module.graphs[0];
  try {
    passes::ShapeInference inference = passes::inferShapes(graph);
    if (assumed)
      *assumed = std::move(inference.assumed);
  } catch (const ir::DiagnosticError &e) {
    throw ir::DiagnosticError(located(e.diagnostic(), module, filename));
  }
  if (std::optional<ir::Diagnostic> d = ir::verify(graph))
    throw ir::DiagnosticError(located(std::move(*d), module, filename));
  return std::move(module.graphs[0]);
}

/// can_lower: (True, 0, "") or (False, line of the declining node in `text`, message).
py::tuple canLower(const std::string &text, const std::string &filename) {
  ir::ParsedModule module;
  std::unique_ptr<ir::Graph> graph;
  auto declined = [&](const ir::DiagnosticError &e) {
    ir::Diagnostic d = located(e.diagnostic(), module, filename);
    return py::make_tuple(false, d.pos.line, d.str());
  };
  try {
    graph = parseTyped(text, filename, module, nullptr);
  } catch (const ir::DiagnosticError &e) {
    if (!e.diagnostic().node) // a syntax error: the caller wrote bad text
      throw;
    return declined(e);
  }
  try {
    passes::lower::lowerGraph(*graph);
  } catch (const ir::DiagnosticError &e) {
    return declined(e);
  }
  return py::make_tuple(true, 0, "");
}

/// value_sizes: {value name: its sizes as SymInt text} for every tensor value of the graph after
/// shape-infer (so a caller can type values of a symbolic graph that it writes elsewhere).
py::dict valueSizes(const std::string &text, const std::string &filename) {
  ir::ParsedModule module;
  std::unique_ptr<ir::Graph> graph = parseTyped(text, filename, module, nullptr);
  ir::ValueNumbering names(*graph);
  py::dict out;
  for (const ir::Node *n : graph->nodes()) {
    for (const ir::Value *v : n->results()) {
      if (!v->isTensor())
        continue;
      std::vector<std::string> sizes;
      for (const ir::SymInt &s : v->meta().sizes)
        sizes.push_back(s.str());
      out[py::str(names.name(v))] = sizes;
    }
  }
  return out;
}

/// Python number → Scalar of the graph input's scalar type.
Scalar scalarArg(py::handle obj, ir::ScalarType type, size_t index) {
  bool isBool = py::isinstance<py::bool_>(obj);
  bool isInt = py::isinstance<py::int_>(obj) && !isBool;
  bool isFloat = py::isinstance<py::float_>(obj);
  switch (type) {
  case ir::ScalarType::Bool:
    if (isBool)
      return Scalar(obj.cast<bool>());
    break;
  case ir::ScalarType::Int:
    if (isInt || isBool)
      return Scalar(obj.cast<int64_t>());
    break;
  case ir::ScalarType::Float:
    if (isInt || isFloat || isBool)
      return Scalar(obj.cast<double>());
    break;
  }
  throw SpecializationMismatch(
      fmt::format("input {} must be a Python {}, got {}", index, ir::scalarTypeName(type),
                  py::str(py::type::of(obj).attr("__name__")).cast<std::string>()));
}

/// A size that is a function of one unbound symbol: the symbol's value making it `size`, when
/// the expression is linear in it (`s0*2 + 1`), else nullopt.
std::optional<int64_t> solveLinear(const ir::SymInt &expr, const std::string &symbol,
                                   ir::SymbolValues values, int64_t size) {
  values[symbol] = 0;
  int64_t at0 = expr.evaluate(values);
  values[symbol] = 1;
  int64_t slope = expr.evaluate(values) - at0;
  if (slope == 0 || (size - at0) % slope != 0)
    return std::nullopt;
  values[symbol] = (size - at0) / slope;
  if (expr.evaluate(values) != size)
    return std::nullopt;
  return values[symbol];
}

enum class OutKind : uint8_t { Tensor, Int, Float, Bool };

/// A graph compiled for the host CPU; see the file comment.
class CompiledGraph {
public:
  CompiledGraph(const std::string &text, const py::dict &options);
  py::tuple call(const py::args &args) const;

  py::dict info() const;
  const std::string &graphText() const { return graphText_; }
  const std::string &loopText() const { return loopText_; }
  std::string mlir() const { return program_->module().text; }
  py::dict dumps() const {
    codegen::cpu::CompileDumps d = program_->dumps();
    py::dict out;
    out["lowered_mlir"] = d.loweredMlir;
    out["llvm_ir"] = d.llvmIr;
    out["assembly"] = d.assembly;
    return out;
  }

private:
  ir::SymbolValues bindSymbols(const std::vector<Tensor> &tensors,
                               const std::vector<std::optional<int64_t>> &ints) const;

  struct InputSpec {
    bool tensor = true;
    ir::ScalarType scalar = ir::ScalarType::Int;
    DType dtype = DType::Float32; ///< the program buffer's dtype
    std::vector<ir::SymInt> sizes, strides;
    bool contiguous = true;
    /// An int input whose value the graph's text used: a symbol (bound from it) or an
    /// expression or constant (checked against it).
    std::optional<ir::SymInt> value;
  };
  struct OutputSpec {
    OutKind kind = OutKind::Tensor;
    int aliasOf = -1; ///< the graph input this output is, or -1
  };

  std::string name_;
  std::string graphText_, loopText_;
  std::vector<InputSpec> inputs_;
  std::vector<OutputSpec> outputs_;
  std::vector<ir::SymRelation> assumed_;
  std::shared_ptr<CompiledProgram> program_;
  size_t kernels_ = 0, externKernels_ = 0;
  double seconds_ = 0, frontSeconds_ = 0;
  std::string cacheEvent_;
};

/// "hit" / "miss (not-found 1)": what the kernel cache did between two stats snapshots.
std::string cacheEvent(const CacheStats &before, const CacheStats &after, bool fromCache,
                       bool anyKernel, bool dumped) {
  if (!anyKernel)
    return "none (no generated kernels)";
  if (dumped)
    return "bypassed (dumping stages)";
  if (fromCache) {
    int64_t disk = after.diskHits - before.diskHits;
    return disk > 0 ? "hit (disk)" : "hit (memory)";
  }
  std::string reasons;
  for (int r = 0; r < codegen::cpu::kNumMissReasons; ++r) {
    int64_t n = after.missesBy[r] - before.missesBy[r];
    if (n > 0)
      reasons +=
          fmt::format("{}{} {}", reasons.empty() ? "" : ", ",
                      codegen::cpu::missReasonName(static_cast<codegen::cpu::MissReason>(r)), n);
  }
  return "miss" + (reasons.empty() ? std::string() : " (" + reasons + ")");
}

CompiledGraph::CompiledGraph(const std::string &text, const py::dict &options) {
  auto start = std::chrono::steady_clock::now();
  std::string filename =
      options.contains("filename") ? options["filename"].cast<std::string>() : std::string("<kir>");
  std::string pipeline =
      options.contains("pipeline") ? options["pipeline"].cast<std::string>() : defaultPipeline();
  bool fuse = !options.contains("fuse") || options["fuse"].cast<bool>();
  bool dump = options.contains("dump_stages") && options["dump_stages"].cast<bool>();
  std::map<int, std::string> inputSymbols;
  if (options.contains("input_symbols"))
    inputSymbols = options["input_symbols"].cast<std::map<int, std::string>>();

  ir::ParsedModule module;
  ir::SymAssumptions assumed;
  std::unique_ptr<ir::Graph> graph = parseTyped(text, filename, module, &assumed);
  name_ = graph->name();
  for (const ir::SymRelation &r : assumed.relations())
    assumed_.push_back(r);
  {
    // Inputs and outputs as the caller sees them (passes keep their number and order).
    std::vector<ir::Value *> ins = graph->inputs();
    for (size_t k = 0; k < ins.size(); ++k) {
      InputSpec spec;
      spec.tensor = ins[k]->isTensor();
      if (spec.tensor) {
        const ir::TensorMeta &m = ins[k]->meta();
        spec.sizes = m.sizes;
        spec.strides = m.strides;
        spec.contiguous = m.isContiguous();
        spec.dtype = m.dtype;
      } else {
        spec.scalar = ins[k]->type().scalar();
        spec.dtype = spec.scalar == ir::ScalarType::Int     ? DType::Int64
                     : spec.scalar == ir::ScalarType::Float ? DType::Float64
                                                            : DType::Bool;
        if (auto it = inputSymbols.find(static_cast<int>(k)); it != inputSymbols.end())
          spec.value = ir::SymInt::parse(it->second);
      }
      inputs_.push_back(std::move(spec));
    }
    // An output that is an input in the text is that very object; one that a pass (`x * 1` →
    // x) turned into an input is still a fresh tensor, as eager code makes it.
    for (const ir::Value *v : graph->outputs()) {
      OutputSpec spec;
      auto it = std::find(ins.begin(), ins.end(), v);
      spec.aliasOf = it == ins.end() ? -1 : static_cast<int>(it - ins.begin());
      if (!v->isTensor()) {
        ir::ScalarType t = v->type().scalar();
        spec.kind = t == ir::ScalarType::Int     ? OutKind::Int
                    : t == ir::ScalarType::Float ? OutKind::Float
                                                 : OutKind::Bool;
      }
      outputs_.push_back(spec);
    }
  }
  if (!pipeline.empty()) {
    passes::PassManager pm;
    pm.addPipeline(pipeline);
    try {
      pm.run(*graph);
    } catch (const ir::DiagnosticError &e) {
      throw ir::DiagnosticError(located(e.diagnostic(), module, filename));
    }
  }
  graphText_ = ir::printGraph(*graph);

  ir::loop::LoopProgram lowered;
  try {
    lowered = passes::lower::lowerGraph(*graph);
  } catch (const ir::DiagnosticError &e) {
    // Point at the optimized graph's text when the node is not in the input (a pass made it).
    ir::Diagnostic d = located(e.diagnostic(), module, filename);
    throw LoweringDeclined(d.str());
  }
  passes::schedule::ScheduleOptions scheduleOptions;
  scheduleOptions.fuse = fuse;
  passes::schedule::Schedule sched = passes::schedule::schedule(lowered, scheduleOptions);
  loopText_ = sched.str();
  for (const passes::schedule::Kernel &k : sched.kernels)
    (k.kind == passes::schedule::KernelKind::Extern ? externKernels_ : kernels_) += 1;

  codegen::cpu::ProgramOptions programOptions;
  programOptions.jit.dumpStages = dump;
  if (options.contains("opt_level"))
    programOptions.jit.optLevel = options["opt_level"].cast<int>();
  auto front = std::chrono::steady_clock::now();
  frontSeconds_ = std::chrono::duration<double>(front - start).count();
  CacheStats before = KernelCache::global().stats();
  {
    py::gil_scoped_release release; // a cold compile takes a while: let other threads run
    program_ = std::make_shared<CompiledProgram>(
        codegen::cpu::compileProgram(sched.program, programOptions));
  }
  CacheStats after = KernelCache::global().stats();
  cacheEvent_ =
      cacheEvent(before, after, program_->fromCache(), !program_->module().kernels.empty(), dump);
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

ir::SymbolValues CompiledGraph::bindSymbols(const std::vector<Tensor> &tensors,
                                            const std::vector<std::optional<int64_t>> &ints) const {
  ir::SymbolValues values;
  auto bind = [&](const std::string &name, int64_t v, size_t k) {
    auto [it, fresh] = values.try_emplace(name, v);
    if (!fresh && it->second != v)
      throw SpecializationMismatch(
          fmt::format("symbol {} is {} but input {} makes it {}", name, it->second, k, v));
  };
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const InputSpec &in = inputs_[k];
    if (!in.tensor && in.value && ints[k] && !in.value->symbolName().empty())
      bind(std::string(in.value->symbolName()), *ints[k], k);
    if (!in.tensor)
      continue;
    for (size_t d = 0; d < in.sizes.size(); ++d)
      if (std::string_view s = in.sizes[d].symbolName(); !s.empty())
        bind(std::string(s), tensors[k].size(static_cast<int64_t>(d)), k);
  }
  // Sizes that are expressions in one symbol no input gives directly (`s0*2`).
  for (size_t k = 0; k < inputs_.size(); ++k) {
    for (size_t d = 0; inputs_[k].tensor && d < inputs_[k].sizes.size(); ++d) {
      std::set<std::string, std::less<>> syms;
      inputs_[k].sizes[d].collectSymbols(syms);
      std::vector<std::string> unbound;
      for (const std::string &s : syms)
        if (!values.count(s))
          unbound.push_back(s);
      if (unbound.size() != 1)
        continue;
      int64_t size = tensors[k].size(static_cast<int64_t>(d));
      if (std::optional<int64_t> v = solveLinear(inputs_[k].sizes[d], unbound[0], values, size))
        values[unbound[0]] = *v;
    }
  }
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const InputSpec &in = inputs_[k];
    if (!in.tensor)
      continue;
    const Tensor &t = tensors[k];
    for (size_t d = 0; d < in.sizes.size(); ++d) {
      std::set<std::string, std::less<>> syms;
      in.sizes[d].collectSymbols(syms);
      for (const std::string &s : syms)
        if (!values.count(s))
          throw SpecializationMismatch(
              fmt::format("symbol {} of input {} has no value (size {})", s, k, in.sizes[d].str()));
      int64_t want = in.sizes[d].evaluate(values);
      if (want != t.size(static_cast<int64_t>(d)))
        throw SpecializationMismatch(fmt::format("input {} has shape {}, the graph expects size "
                                                 "{} = {} in dim {}",
                                                 k, t.shapeStr(), in.sizes[d].str(), want, d));
      if (!in.contiguous && want > 1 &&
          in.strides[d].evaluate(values) != t.stride(static_cast<int64_t>(d)))
        throw SpecializationMismatch(
            fmt::format("input {} has strides {}, the graph expects stride {} in dim {}", k,
                        shapeToString(t.strides()), in.strides[d].str(), d));
    }
  }
  for (const std::string &s : program_->program().sizeSymbols())
    if (!values.count(s))
      throw SpecializationMismatch(fmt::format("no input gives size symbol {} a value", s));
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const InputSpec &in = inputs_[k];
    if (in.tensor || !in.value || !ints[k])
      continue;
    std::set<std::string, std::less<>> syms;
    in.value->collectSymbols(syms);
    bool known = std::all_of(syms.begin(), syms.end(), [&](auto &s) { return values.count(s); });
    if (known && in.value->evaluate(values) != *ints[k])
      throw SpecializationMismatch(fmt::format("int input {} is {}, the graph was compiled for {}",
                                               k, *ints[k], in.value->str()));
  }
  for (const ir::SymRelation &r : assumed_)
    if (!r.evaluate(values))
      throw SpecializationMismatch(fmt::format("the compiled graph assumed {}", r.str()));
  return values;
}

py::tuple CompiledGraph::call(const py::args &args) const {
  if (args.size() != inputs_.size())
    throw py::type_error(fmt::format("compiled graph @{} takes {} inputs, got {}", name_,
                                     inputs_.size(), args.size()));
  std::vector<Tensor> tensors(inputs_.size());
  std::vector<std::optional<int64_t>> ints(inputs_.size());
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const InputSpec &in = inputs_[k];
    py::handle a = args[k];
    if (in.tensor) {
      if (!py::isinstance<Tensor>(a))
        throw SpecializationMismatch(fmt::format("input {} must be a tensor", k));
      tensors[k] = a.cast<Tensor>();
      if (tensors[k].dtype() != in.dtype ||
          tensors[k].dim() != static_cast<int64_t>(in.sizes.size()))
        throw SpecializationMismatch(fmt::format("input {} is {} of shape {}, the graph expects "
                                                 "{} of rank {}",
                                                 k, dtypeName(tensors[k].dtype()),
                                                 tensors[k].shapeStr(), dtypeName(in.dtype),
                                                 in.sizes.size()));
    } else {
      Scalar s = scalarArg(a, in.scalar, k);
      if (in.scalar == ir::ScalarType::Int)
        ints[k] = s.toInt();
      tensors[k] = Tensor::scalarTensor(s, in.dtype);
    }
  }
  ir::SymbolValues values = bindSymbols(tensors, ints);
  std::vector<Tensor> results;
  {
    py::gil_scoped_release release;
    results = program_->run(tensors, values);
  }
  py::tuple out(outputs_.size());
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const OutputSpec &o = outputs_[k];
    if (o.aliasOf >= 0) {
      out[k] = args[o.aliasOf];
      continue;
    }
    const Tensor &t = results[k];
    switch (o.kind) {
    case OutKind::Tensor:
      out[k] = py::cast(t);
      break;
    case OutKind::Int:
      out[k] = py::int_(t.item().toInt());
      break;
    case OutKind::Float:
      out[k] = py::float_(t.item().toDouble());
      break;
    case OutKind::Bool:
      out[k] = py::bool_(t.item().toBool());
      break;
    }
  }
  return out;
}

py::dict CompiledGraph::info() const {
  py::dict d;
  d["name"] = name_;
  d["compile_seconds"] = seconds_;
  d["frontend_seconds"] = frontSeconds_;
  d["jit_seconds"] = program_->compileSeconds();
  d["from_cache"] = program_->fromCache();
  d["cache"] = cacheEvent_;
  d["kernels"] = kernels_;
  d["extern_kernels"] = externKernels_;
  d["generated_kernels"] = program_->module().kernels.size();
  std::vector<std::string> assumed;
  for (const ir::SymRelation &r : assumed_)
    assumed.push_back(r.str());
  d["assumptions"] = assumed;
  return d;
}

} // namespace

void bindCompiler(py::module_ &parent) {
  py::module_ m = parent.def_submodule(
      "_compiler", "The optimizing CPU compiler: .kir graph → passes → loop IR → JIT");
  static py::exception<LoweringDeclined> loweringError(m, "LoweringError",
                                                       PyExc_NotImplementedError);
  static py::exception<SpecializationMismatch> specializationError(m, "SpecializationError",
                                                                   PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const LoweringDeclined &e) {
      PyErr_SetString(loweringError.ptr(), e.what());
    } catch (const SpecializationMismatch &e) {
      PyErr_SetString(specializationError.ptr(), e.what());
    }
  });

  py::class_<CompiledGraph, std::shared_ptr<CompiledGraph>>(
      m, "CompiledGraph", "A graph compiled for the host CPU: call it with the graph inputs.")
      .def("__call__", &CompiledGraph::call)
      .def_property_readonly("info", &CompiledGraph::info,
                             "compile_seconds, jit_seconds, from_cache, cache (hit/miss and "
                             "why), kernels, extern_kernels, assumptions")
      .def_property_readonly("graph_text", &CompiledGraph::graphText,
                             "The .kir text after the graph passes")
      .def_property_readonly("loop_text", &CompiledGraph::loopText,
                             "The scheduled loop program (kernels, loop orders, memory plan)")
      .def_property_readonly("mlir", &CompiledGraph::mlir, "The emitted MLIR module")
      .def_property_readonly("dumps", &CompiledGraph::dumps,
                             "lowered_mlir, llvm_ir, assembly (compiled with dump_stages only)");

  m.def(
      "compile_graph",
      [](const std::string &text, py::object options) {
        py::dict opts = options.is_none() ? py::dict() : options.cast<py::dict>();
        return std::make_shared<CompiledGraph>(text, opts);
      },
      py::arg("kir_text"), py::arg("options") = py::none(),
      "Compiles one .kir graph for the host CPU. options: filename, pipeline (default: the "
      "registered subset of functionalize,simplify,const-fold,dce,cse,dce), fuse, opt_level, "
      "dump_stages (keep MLIR/LLVM IR/assembly; bypasses the kernel cache), input_symbols "
      "({input index: SymInt text} for int inputs: a symbol is bound from the int, an expression "
      "or constant is checked against it). Raises LoweringError "
      "(NotImplementedError) when a node has no lowering, ValueError for invalid graphs.");
  m.def("can_lower", &canLower, py::arg("kir_text"), py::arg("filename") = "<kir>",
        "(ok, line, reason): whether every node of the .kir graph lowers (after shape-infer and "
        "the verifier, without other passes); line is the 1-based line of the first node that "
        "declines in kir_text, reason the diagnostic.");
  m.def("value_sizes", &valueSizes, py::arg("kir_text"), py::arg("filename") = "<kir>",
        "{value name: [size text]} for every tensor value after shape-infer (ValueError for an "
        "invalid graph).");
  m.def("default_pipeline", &defaultPipeline, "The graph passes compile_graph runs by default.");
  m.def(
      "cache_stats", [] { return KernelCache::global().stats().str(); },
      "The process kernel cache's hits and misses (KILN_LOGS=perf).");
  m.def(
      "cache_dir", [] { return KernelCache::global().dir(); },
      "The kernel cache's directory ($KILN_CACHE_DIR or ~/.cache/kiln).");
}

} // namespace kiln::frontend
