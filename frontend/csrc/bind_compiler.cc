// `kiln._C._compiler`: kiln's compiler seen from Python (kiln.compile's default backend,
// frontend/kiln/_capture/backend_compiled.py): graphs compiled for the CPU or a CUDA device.
//
// compile_graph(graph, options) runs the one pipeline a graph (kiln._C._ir.Graph: built in
// memory by the capture, or parsed from an exported program's .kir) becomes code through:
//   shape-infer → verify → graph passes (functionalize, simplify, const-fold, dce, cse:
//   those registered) → lower (passes/lower) → schedule (passes/schedule) → emit + JIT through
//   the kernel cache (codegen/cpu, $KILN_CACHE_DIR)
// (driver::compile, driver/compile.h) and returns a CompiledGraph, callable as `compiled(*inputs)`
// with the graph inputs in order (tensors; Python numbers for scalar inputs) and returning the
// tuple of graph outputs. A node that lowering declines raises LoweringError (a
// NotImplementedError) naming the node, its op and the user's source line, so the caller can run
// that part eagerly; can_lower(graph) answers the same question without compiling, with the
// position of the first declining node (its builder number + 1, or its line in parsed text).
//
// A graph with `weight` nodes (an exported program) takes its weights from options["weights"]
// ({key: Tensor}, checked against each node's dtype and sizes); the call then takes only the
// graph's parameters. Inputs that break what the graph assumed raise SpecializationError (see
// [Note: specialization checks] in driver/prepared_graph.h).

#include "codegen/cpu/compile_program.h"
#include "codegen/cpu/kernel_cache.h"
#include "codegen/cuda/cuda_program.h"
#include "codegen/cuda/emit.h"
#include "codegen/executable.h"
#include "cuda/backend.h"
#include "driver/compile.h"
#include "driver/prepared_graph.h"
#include "driver/runner.h"
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/built_graph.h"
#include "frontend/csrc/tensor_object.h"
#include "ir/printer.h"
#include "passes/autodiff/graph_rule_builder.h"
#include "passes/autodiff/training_graphs.h"
#include "passes/lower/lowering.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <chrono>
#include <set>
#include <span>
#include <unordered_set>

namespace py = pybind11;

namespace kiln::frontend {

namespace {

using codegen::cpu::CompiledProgram;
using codegen::cpu::KernelCache;

using driver::located;
using driver::LoweringDeclined;
using driver::PreparedGraph;
using driver::SpecializationError;
using driver::ValueKind;

/// can_lower: (True, 0, "") or (False, position of the declining node, message). Runs the
/// driver's pipeline on a copy with functionalize as its only graph pass (in-place ops lower once
/// it made them pure; the other passes would make nodes that have no position), so exported
/// programs (weights, ranges) qualify.
py::tuple canLower(const BuiltGraph &built, const std::string &filename) {
  driver::PipelineOptions options;
  options.filename = filename;
  options.pipeline = "functionalize";
  options.until = driver::PipelineEnd::Lowered;
  try {
    auto [graph, positions] = built.copy();
    driver::prepareGraph(std::move(graph), positions, options);
  } catch (const LoweringDeclined &e) {
    return py::make_tuple(false, e.diagnostic.pos.line, e.diagnostic.str());
  } catch (const ir::DiagnosticError &e) {
    if (!e.diagnostic().node) // not a node's rule: the graph is broken as a whole
      throw;
    return py::make_tuple(false, e.diagnostic().pos.line, e.diagnostic().str());
  }
  return py::make_tuple(true, 0, "");
}

/// declines: [(position, message)] of every node lowering declines (one walk; see
/// passes::lower::findDeclines), after shape-infer, the verifier and functionalize; a position
/// of 0 is a node a pass made.
py::list declines(const BuiltGraph &built, const std::string &filename) {
  driver::PipelineOptions options;
  options.filename = filename;
  options.pipeline = "functionalize";
  options.until = driver::PipelineEnd::Lowered;
  options.collectDeclines = true;
  auto [graph, positions] = built.copy();
  py::list out;
  for (const ir::Diagnostic &d :
       driver::prepareGraph(std::move(graph), positions, options).declines)
    out.append(py::make_tuple(d.pos.line, d.str()));
  return out;
}

py::tuple sizesTuple(std::span<const ir::SymInt> sizes) {
  py::list out;
  for (const ir::SymInt &s : sizes)
    if (s.isConstant())
      out.append(*s.constant());
    else
      out.append(s.str());
  return py::tuple(out);
}

const char *kindName(ValueKind kind) {
  switch (kind) {
  case ValueKind::Int:
    return "int";
  case ValueKind::Float:
    return "float";
  case ValueKind::Bool:
    return "bool";
  case ValueKind::Tensor:
    break;
  }
  return "tensor";
}

/// program_interface: what an exported program declares at its boundary, read by the driver
/// (parse, shape-infer, verify; no passes, no lowering). Tensor types are (kind, dtype name,
/// sizes with ints or symbol text); scalars ("int", None, ()).
py::dict programInterface(const std::string &text, const std::string &filename) {
  driver::PipelineOptions options;
  options.filename = filename;
  options.until = driver::PipelineEnd::Interface;
  PreparedGraph g = driver::prepareGraph(text, options);
  auto type = [](ValueKind kind, DType dtype, std::span<const ir::SymInt> sizes) {
    if (kind != ValueKind::Tensor)
      return py::make_tuple(kindName(kind), py::none(), py::tuple());
    return py::make_tuple("tensor", std::string(dtypeName(dtype)), sizesTuple(sizes));
  };
  py::list params, weights, outputs;
  for (const driver::InputSpec &in : g.inputs)
    params.append(py::make_tuple(in.name, type(in.kind, in.dtype, in.sizes)));
  for (const driver::WeightSpec &w : g.weights) {
    std::vector<ir::SymInt> sizes(w.sizes.begin(), w.sizes.end());
    weights.append(py::make_tuple(w.name, type(ValueKind::Tensor, w.dtype, sizes)));
  }
  for (const driver::OutputSpec &o : g.outputs)
    outputs.append(py::make_tuple(o.name, type(o.kind, o.dtype, o.sizes)));
  py::dict ranges;
  for (const driver::SymRange &r : g.ranges)
    ranges[py::str(r.symbol)] =
        py::make_tuple(r.min, r.max < 0 ? py::object(py::none()) : py::object(py::int_(r.max)));
  py::dict d;
  d["name"] = g.name;
  d["params"] = params;
  d["weights"] = weights;
  d["outputs"] = outputs;
  d["ranges"] = ranges;
  d["out_spec"] = g.outSpec.empty() ? py::object(py::none()) : py::object(py::str(g.outSpec));
  return d;
}

/// Python number → Scalar of the graph input's scalar type.
Scalar scalarArg(py::handle obj, ValueKind kind, const std::string &name) {
  bool isBool = py::isinstance<py::bool_>(obj);
  bool isInt = py::isinstance<py::int_>(obj) && !isBool;
  bool isFloat = py::isinstance<py::float_>(obj);
  const char *want = "bool";
  switch (kind) {
  case ValueKind::Bool:
    if (isBool)
      return Scalar(obj.cast<bool>());
    break;
  case ValueKind::Int:
    want = "int";
    if (isInt || isBool)
      return Scalar(obj.cast<int64_t>());
    break;
  case ValueKind::Float:
    want = "float";
    if (isInt || isFloat || isBool)
      return Scalar(obj.cast<double>());
    break;
  case ValueKind::Tensor:
    break;
  }
  throw SpecializationError(
      fmt::format("input {} must be a Python {}, got {}", name, want,
                  py::str(py::type::of(obj).attr("__name__")).cast<std::string>()));
}

/// A graph compiled for the host CPU or a CUDA device; see the file comment.
class CompiledGraph {
public:
  CompiledGraph(const BuiltGraph &built, const py::dict &options);
  py::tuple call(const py::args &args) const;
  /// A loop node whose body is this graph: runs it for i in range(start, stop, step) on `args`
  /// (a list, updated in place), the index going to `indexSlot` (-1: none) and output k
  /// replacing input `carried[k]` after each run (-1: an output that is not carried). Stops early
  /// at an iteration whose inputs do not match what the graph was compiled for
  /// (SpecializationError); returns (the index it stopped at, the last run's outputs or None), so
  /// the caller runs the rest its own way.
  /// A graph that writes into its inputs (`distinctStorage`) stops at an iteration whose tensor
  /// inputs share storage (a write through one would have to be seen through the other).
  /// A loop with a `break` (`breakOutput` >= 0): output `breakOutput` is its test, and the run
  /// whose test is `breakWhen` ends the loop with the carried inputs as they were. Returns
  /// (index, outputs, whether it broke there).
  py::tuple loop(int64_t start, int64_t stop, int64_t step, py::list args,
                 const std::vector<int> &carried, int indexSlot, bool distinctStorage,
                 int breakOutput, bool breakWhen) const;

  py::dict info() const;
  const std::string &graphText() const { return graph().graphText; }
  const std::string &loopText() const { return graph().loopText; }
  std::string mlir() const { return cpuProgram() ? cpuProgram()->module().text : std::string(); }
  /// The CUDA C of a graph compiled for a CUDA device ("" for the CPU).
  std::string cudaSource() const {
    return cpuProgram() ? std::string() : runner_->executable().code();
  }
  py::dict dumps() const {
    codegen::cpu::CompileDumps d =
        cpuProgram() ? cpuProgram()->dumps() : codegen::cpu::CompileDumps{};
    py::dict out;
    out["lowered_mlir"] = d.loweredMlir;
    out["llvm_ir"] = d.llvmIr;
    out["assembly"] = d.assembly;
    return out;
  }
  std::vector<std::string> weightNames() const {
    std::vector<std::string> out;
    for (const driver::WeightSpec &w : graph().weights)
      out.push_back(w.name);
    return out;
  }
  const std::string &outSpec() const { return graph().outSpec; }

private:
  const PreparedGraph &graph() const { return runner_->graph(); }
  void readInputs(const py::sequence &args, std::vector<Tensor> &tensors,
                  std::vector<std::optional<int64_t>> &ints) const;
  py::tuple wrapOutputs(const std::vector<Tensor> &results, const py::sequence &args) const;
  const CompiledProgram *cpuProgram() const { return runner_->executable().cpuProgram(); }

  std::unique_ptr<driver::Runner> runner_;
  Device device_;
  driver::CompileReport report_;
};

CompiledGraph::CompiledGraph(const BuiltGraph &built, const py::dict &options) {
  driver::CompileOptions compile;
  driver::PipelineOptions &pipeline = compile.pipeline;
  if (options.contains("filename"))
    pipeline.filename = options["filename"].cast<std::string>();
  if (options.contains("pipeline"))
    pipeline.pipeline = options["pipeline"].cast<std::string>();
  pipeline.fuse = !options.contains("fuse") || options["fuse"].cast<bool>();
  if (options.contains("input_symbols"))
    pipeline.inputSymbols = options["input_symbols"].cast<std::map<int, std::string>>();
  compile.cpu.jit.dumpStages =
      options.contains("dump_stages") && options["dump_stages"].cast<bool>();
  if (options.contains("opt_level"))
    compile.cpu.jit.optLevel = options["opt_level"].cast<int>();
  if (options.contains("device"))
    compile.device = Device::parse(options["device"].cast<std::string>());
  if (options.contains("weights"))
    for (auto [key, value] : options["weights"].cast<py::dict>()) {
      std::string name = key.cast<std::string>();
      KILN_CHECK_KIND(Type, py::isinstance<Tensor>(value),
                      "compiled graph: weight \"{}\" must be a tensor", name);
      compile.weights.emplace(std::move(name), value.cast<Tensor>());
    }
  device_ = compile.device;
  auto [graph, positions] = built.copy();
  py::gil_scoped_release release; // a cold compile takes a while: let other threads run
  runner_ = driver::compile(std::move(graph), positions, compile, &report_);
}

void CompiledGraph::readInputs(const py::sequence &args, std::vector<Tensor> &tensors,
                               std::vector<std::optional<int64_t>> &ints) const {
  const PreparedGraph &g = graph();
  const std::vector<driver::InputSpec> &inputs = g.inputs;
  if (args.size() != inputs.size())
    throw py::type_error(fmt::format("compiled graph @{} takes {} inputs, got {}", g.name,
                                     inputs.size(), args.size()));
  tensors.assign(inputs.size(), Tensor());
  ints.assign(inputs.size(), std::nullopt);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const driver::InputSpec &in = inputs[k];
    py::handle a = args[k];
    if (in.kind == ValueKind::Tensor) {
      const Tensor *t = asTensor(a.ptr());
      if (t == nullptr)
        throw SpecializationError(fmt::format("input {} must be a tensor", in.name));
      tensors[k] = *t;
      if (tensors[k].dtype() != in.dtype ||
          tensors[k].dim() != static_cast<int64_t>(in.sizes.size()))
        throw SpecializationError(fmt::format("input {} is {} of shape {}, the graph expects "
                                              "{} of rank {}",
                                              in.name, dtypeName(tensors[k].dtype()),
                                              tensors[k].shapeStr(), dtypeName(in.dtype),
                                              in.sizes.size()));
    } else {
      Scalar s = scalarArg(a, in.kind, in.name);
      if (in.kind == ValueKind::Int)
        ints[k] = s.toInt();
      tensors[k] = Tensor::scalarTensor(s, in.dtype);
    }
  }
}

py::tuple CompiledGraph::wrapOutputs(const std::vector<Tensor> &results,
                                     const py::sequence &args) const {
  const PreparedGraph &g = graph();
  py::tuple out(g.outputs.size());
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const driver::OutputSpec &o = g.outputs[k];
    if (o.aliasOf >= 0) {
      out[k] = args[o.aliasOf];
      continue;
    }
    const Tensor &t = results[k];
    switch (o.kind) {
    case ValueKind::Tensor:
      out[k] = wrapTensor(t);
      break;
    case ValueKind::Int:
      out[k] = py::int_(t.item().toInt());
      break;
    case ValueKind::Float:
      out[k] = py::float_(t.item().toDouble());
      break;
    case ValueKind::Bool:
      out[k] = py::bool_(t.item().toBool());
      break;
    }
  }
  return out;
}

py::tuple CompiledGraph::call(const py::args &args) const {
  std::vector<Tensor> tensors;
  std::vector<std::optional<int64_t>> ints;
  readInputs(args, tensors, ints);
  std::vector<Tensor> results;
  {
    py::gil_scoped_release release;
    results = runner_->run(tensors, runner_->bind(tensors, ints));
  }
  return wrapOutputs(results, args);
}

namespace {

/// Whether two non-empty tensors among `tensors` share storage: a compiled part that writes
/// its inputs then runs eagerly (a write through one must be seen through the other).
bool shareStorage(std::span<const Tensor> tensors) {
  std::vector<const void *> seen;
  for (const Tensor &t : tensors) {
    if (!t.defined() || t.numel() == 0)
      continue;
    const void *p = t.storage()->address();
    if (std::find(seen.begin(), seen.end(), p) != seen.end())
      return true;
    seen.push_back(p);
  }
  return false;
}

/// A loop's index as the 0-d tensor the graph reads, written in place when no one else holds
/// the last run's (a fresh one costs an allocation per iteration).
void setIndex(Tensor &index, int64_t value, DType dtype) {
  if (index.defined() && index.dtype() == dtype && index.implPtr().use_count() == 1 &&
      index.storage().use_count() == 1) {
    if (dtype == DType::Int64) {
      *index.data<int64_t>() = value;
      return;
    }
    if (dtype == DType::Int32) {
      *index.data<int32_t>() = static_cast<int32_t>(value);
      return;
    }
  }
  index = Tensor::scalarTensor(Scalar(value), dtype);
}

std::vector<std::pair<Shape, Shape>> layoutsOf(std::span<const Tensor> tensors) {
  std::vector<std::pair<Shape, Shape>> layouts;
  layouts.reserve(tensors.size());
  for (const Tensor &t : tensors)
    layouts.emplace_back(t.sizes(), t.strides());
  return layouts;
}

bool sameLayouts(std::span<const Tensor> tensors,
                 const std::vector<std::pair<Shape, Shape>> &layouts) {
  for (size_t k = 0; k < tensors.size(); ++k)
    if (tensors[k].sizes() != layouts[k].first || tensors[k].strides() != layouts[k].second)
      return false;
  return true;
}

} // namespace

py::tuple CompiledGraph::loop(int64_t start, int64_t stop, int64_t step, py::list args,
                              const std::vector<int> &carried, int indexSlot, bool distinctStorage,
                              int breakOutput, bool breakWhen) const {
  const PreparedGraph &g = graph();
  KILN_CHECK(step != 0, "range() arg 3 must not be zero");
  KILN_CHECK(carried.size() <= g.outputs.size(), "loop: {} carried values, {} outputs",
             carried.size(), g.outputs.size());
  for (size_t k = 0; k < carried.size(); ++k) {
    int alias = g.outputs[k].aliasOf;
    KILN_CHECK(carried[k] == -1 ||
                   (carried[k] >= 0 && carried[k] < static_cast<int>(args.size()) &&
                    (alias < 0 || alias == carried[k]) && g.outputs[k].kind == ValueKind::Tensor),
               "loop: output {} cannot feed input {}", k, carried[k]);
  }
  KILN_CHECK(breakOutput < static_cast<int>(g.outputs.size()) &&
                 (breakOutput < 0 || static_cast<size_t>(breakOutput) >= carried.size() ||
                  carried[breakOutput] == -1),
             "loop: output {} cannot be the break test", breakOutput);
  std::vector<Tensor> tensors;
  std::vector<std::optional<int64_t>> ints;
  if (indexSlot >= 0)
    args[indexSlot] = py::int_(start);
  readInputs(args, tensors, ints);
  DType indexType = indexSlot >= 0 ? g.inputs[indexSlot].dtype : DType::Int64;
  // A run whose tensors have the layouts of the last bound run only rebinds the index.
  std::optional<driver::IntRebind> rebind;
  if (indexSlot >= 0)
    rebind = g.planIntRebind(static_cast<size_t>(indexSlot));
  ir::SymbolValues values;
  std::vector<std::pair<Shape, Shape>> boundLayouts;
  std::vector<Tensor> spare(carried.size());
  std::vector<Tensor> results;
  bool ran = false, broke = false;
  int64_t i = start;
  {
    py::gil_scoped_release release;
    for (; step > 0 ? i < stop : i > stop; i += step) {
      if (indexSlot >= 0) {
        ints[indexSlot] = i;
        setIndex(tensors[indexSlot], i, indexType);
      }
      if (distinctStorage && shareStorage(tensors))
        break;
      try {
        if (rebind && !boundLayouts.empty() && sameLayouts(tensors, boundLayouts)) {
          g.rebindInt(*rebind, values, i, ints);
        } else {
          values = runner_->bind(tensors, ints);
          boundLayouts = layoutsOf(tensors);
        }
        results = runner_->run(tensors, values, /*writeBack=*/true, spare);
      } catch (const SpecializationError &) {
        break; // the caller runs this iteration (and what follows) its own way
      }
      ran = true;
      if (breakOutput >= 0 && results[breakOutput].item().toBool() == breakWhen) {
        broke = true; // this run's outputs are the loop's; the carried inputs stay
        break;
      }
      for (size_t k = 0; k < carried.size(); ++k) {
        if (carried[k] < 0 || g.outputs[k].aliasOf >= 0) // an alias is the input, updated
          continue;
        Tensor last = std::exchange(tensors[carried[k]], results[k]);
        // The last run's input, when it was a result no one else holds (never the caller's
        // array), is the memory the next run computes this output in.
        spare[k] = last.implPtr().use_count() == 1 && last.storage().use_count() == 1
                       ? std::move(last)
                       : Tensor();
      }
    }
  }
  for (size_t k = 0; k < carried.size() && ran; ++k) // the last run's inputs
    if (carried[k] >= 0 && g.outputs[k].aliasOf < 0)
      args[carried[k]] = wrapTensor(tensors[carried[k]]);
  if (indexSlot >= 0)
    args[indexSlot] = py::int_(i);
  if (!ran)
    return py::make_tuple(i, py::none(), false);
  py::tuple out = wrapOutputs(results, args);
  for (size_t k = 0; k < carried.size() && !broke; ++k) // the carried objects, not new wrappers
    if (carried[k] >= 0)
      out[k] = args[carried[k]];
  return py::make_tuple(i, out, broke);
}

py::dict CompiledGraph::info() const {
  const PreparedGraph &g = graph();
  const CompiledProgram *program = cpuProgram();
  py::dict d;
  d["name"] = g.name;
  d["compile_seconds"] = report_.frontSeconds + report_.codeSeconds;
  d["frontend_seconds"] = report_.frontSeconds;
  d["jit_seconds"] = program ? program->compileSeconds() : report_.codeSeconds;
  d["from_cache"] = program ? program->fromCache() : false;
  d["device"] = device_.str();
  d["cache"] = report_.cache;
  d["kernels"] = g.kernels;
  d["extern_kernels"] = g.externKernels;
  size_t loopNodes = 0;
  for (const ir::loop::LoopNode &n : g.schedule.program.nodes())
    loopNodes += n.kind != ir::loop::LoopNodeKind::Extern;
  d["loop_nodes"] = loopNodes;
  d["generated_kernels"] = runner_->executable().generatedKernels();
  std::vector<std::string> assumed;
  for (const ir::SymRelation &r : g.unified)
    assumed.push_back(r.str());
  for (const ir::SymRelation &r : g.assumed)
    assumed.push_back(r.str());
  d["assumptions"] = assumed;
  py::list writes; // (the input written, its region or "" for all of it), in order
  for (const driver::WriteBack &w : g.writeBacks)
    writes.append(py::make_tuple(g.inputs[w.input].name, passes::lower::regionText(w.region)));
  d["write_backs"] = writes;
  py::list stages;
  for (const auto &[name, millis] : g.stageMillis)
    stages.append(py::make_tuple(name, millis / 1000.0));
  d["stage_seconds"] = stages;
  return d;
}

/// training_graphs: the forward and backward graphs of compiled training (see
/// passes/autodiff/training_graphs.h) as a dict of built graphs and their interface.

/// Per backward output (an input's gradient): the indices of the gradient inputs (after the
/// `saved` values) it is computed from. An input whose gradients all came as None gets None
/// from autograd, as in eager, not a gradient of zeros.
std::vector<std::vector<int>> gradSources(const ir::Graph &backward, size_t saved) {
  std::vector<ir::Value *> inputs = backward.inputs();
  std::unordered_map<const ir::Value *, std::set<int>> from; // value -> gradient inputs
  for (size_t k = saved; k < inputs.size(); ++k)
    from[inputs[k]] = {static_cast<int>(k - saved)};
  for (const ir::Node *n : backward.nodes()) { // in order: operands come first
    std::set<int> found;
    for (int i = 0; i < n->numOperands(); ++i)
      if (auto it = from.find(n->operand(i)); it != from.end())
        found.insert(it->second.begin(), it->second.end());
    if (!found.empty())
      for (int r = 0; r < n->numResults(); ++r)
        from[n->result(r)] = found;
  }
  std::vector<std::vector<int>> out;
  for (const ir::Value *v : backward.outputs()) {
    auto it = from.find(v);
    out.push_back(it == from.end() ? std::vector<int>{}
                                   : std::vector<int>(it->second.begin(), it->second.end()));
  }
  return out;
}

py::dict trainingGraphs(const BuiltGraph &built, const std::vector<bool> &needsGrad,
                        const std::vector<int> &noGradPositions) {
  std::unordered_set<int> positions(noGradPositions.begin(), noGradPositions.end());
  std::unordered_set<const ir::Node *> noGrad;
  for (const auto &[node, pos] : built.positions)
    if (positions.count(pos.line))
      noGrad.insert(node);
  passes::autodiff::TrainingGraphs t =
      passes::autodiff::buildTrainingGraphs(*built.graph, needsGrad, noGrad);
  auto wrap = [](std::unique_ptr<ir::Graph> g, ir::NodePositions positions) {
    auto out = std::make_shared<BuiltGraph>();
    out->graph = std::move(g);
    out->positions = std::move(positions);
    return out;
  };
  py::list saved;
  for (const passes::autodiff::SavedValue &s : t.saved)
    saved.append(py::make_tuple(s.isInput, s.index, s.bytes, s.producer));
  py::dict d;
  d["forward"] = wrap(std::move(t.forward), std::move(t.forwardPositions));
  d["backward"] = wrap(std::move(t.backward), std::move(t.backwardPositions));
  d["saved"] = saved;
  d["grad_outputs"] = t.gradOutputs;
  d["input_grads"] = t.inputGrads;
  py::list writeBacks;
  for (const passes::autodiff::WriteBack &w : t.writeBacks)
    writeBacks.append(py::make_tuple(w.input, w.output, w.sameOutputs));
  d["write_backs"] = writeBacks;
  d["input_grad_sources"] =
      gradSources(*d["backward"].cast<std::shared_ptr<BuiltGraph>>()->graph, t.saved.size());
  d["joint_text"] = t.jointText;
  return d;
}

} // namespace

void bindCompiler(py::module_ &parent) {
  py::module_ m = parent.def_submodule(
      "_compiler",
      "kiln's compiler: graph → passes → loop IR → schedule → CPU (MLIR/LLVM JIT) or CUDA "
      "(NVRTC) code");
  static py::exception<LoweringDeclined> loweringError(m, "LoweringError",
                                                       PyExc_NotImplementedError);
  static py::exception<SpecializationError> specializationError(m, "SpecializationError",
                                                                PyExc_ValueError);
  static py::exception<passes::autodiff::Unsupported> trainingUnsupported(
      m, "TrainingUnsupported", PyExc_NotImplementedError);
  // Per call of a compiled part that writes its inputs (every iteration of a loop node that is
  // not a native loop), so in C++.
  m.def(
      "share_storage",
      [](const py::tuple &args) {
        std::vector<Tensor> tensors;
        for (py::handle a : args)
          if (const Tensor *t = asTensor(a.ptr()))
            tensors.push_back(*t);
        return shareStorage(tensors);
      },
      py::arg("args"), "Whether two non-empty tensor arguments share storage.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const driver::LoweringDeclined &e) {
      PyErr_SetString(loweringError.ptr(), e.what());
    } catch (const SpecializationError &e) {
      PyErr_SetString(specializationError.ptr(), e.what());
    } catch (const passes::autodiff::Unsupported &e) {
      PyErr_SetString(trainingUnsupported.ptr(), e.what());
    }
  });

  py::class_<CompiledGraph, std::shared_ptr<CompiledGraph>>(
      m, "CompiledGraph",
      "A graph compiled for the CPU or a CUDA device: call it with the graph inputs.")
      .def("__call__", &CompiledGraph::call)
      .def("loop", &CompiledGraph::loop, py::arg("start"), py::arg("stop"), py::arg("step"),
           py::arg("args"), py::arg("carried"), py::arg("index_slot"), py::arg("distinct_storage"),
           py::arg("break_output") = -1, py::arg("break_when") = true)
      .def_property_readonly("info", &CompiledGraph::info,
                             "compile_seconds, jit_seconds, from_cache, cache (hit/miss and "
                             "why), kernels, extern_kernels, assumptions")
      .def_property_readonly("graph_text", &CompiledGraph::graphText,
                             "The .kir text after the graph passes")
      .def_property_readonly("loop_text", &CompiledGraph::loopText,
                             "The scheduled loop program (kernels, loop orders, memory plan)")
      .def_property_readonly("mlir", &CompiledGraph::mlir, "The emitted MLIR module")
      .def_property_readonly("cuda_source", &CompiledGraph::cudaSource,
                             "The CUDA C of a graph compiled for a CUDA device")
      .def_property_readonly("weight_names", &CompiledGraph::weightNames,
                             "The keys of the graph's weight nodes, in binding order")
      .def_property_readonly("out_spec", &CompiledGraph::outSpec,
                             "The return's out_spec attribute (\"\" when absent)")
      .def_property_readonly("dumps", &CompiledGraph::dumps,
                             "lowered_mlir, llvm_ir, assembly (compiled with dump_stages only)");

  m.def(
      "compile_graph",
      [](const BuiltGraph &graph, py::object options) {
        py::dict opts = options.is_none() ? py::dict() : options.cast<py::dict>();
        return std::make_shared<CompiledGraph>(graph, opts);
      },
      py::arg("graph"), py::arg("options") = py::none(),
      "Compiles one graph (kiln._C._ir.Graph) for the host CPU or a CUDA device. options: "
      "filename, pipeline (default: the "
      "registered subset of functionalize,simplify,const-fold,dce,cse,dce), fuse, opt_level, "
      "dump_stages (keep MLIR/LLVM IR/assembly; bypasses the kernel cache), weights ({key: "
      "Tensor} for the graph's weight nodes), input_symbols "
      "({input index: SymInt text} for int inputs: a symbol is bound from the int, an expression "
      "or constant is checked against it). Raises LoweringError "
      "(NotImplementedError) when a node has no lowering, ValueError for invalid graphs.");
  m.def("training_graphs", &trainingGraphs, py::arg("graph"), py::arg("needs_grad"),
        py::arg("no_grad_positions") = std::vector<int>(),
        "{forward, backward, saved, grad_outputs, input_grads, joint_text}: the joint "
        "forward+backward graph of a graph whose inputs `needs_grad` require grad (the nodes at "
        "no_grad_positions, builder number + 1, carry no gradient), split into a "
        "forward graph (its outputs, then the saved values it computes) and a backward graph "
        "(inputs: the saved values, then the gradients of grad_outputs; outputs: the gradients "
        "of input_grads). saved: (is_input, index, bytes, producing op) per saved value. Raises "
        "TrainingUnsupported for what has no compiled derivative.");
  m.def("can_lower", &canLower, py::arg("graph"), py::arg("filename") = "<kir>",
        "(ok, position, reason): whether every node of the graph lowers (after shape-infer, the "
        "verifier and functionalize); position is the builder number + 1 of the first node that "
        "declines, reason the diagnostic.");
  m.def("declines", &declines, py::arg("graph"), py::arg("filename") = "<kir>",
        "[(position, reason)] of every node that does not lower, found in one walk (a declining "
        "node's results count as inputs of what follows); empty when the whole graph lowers.");
  m.def("program_interface", &programInterface, py::arg("kir_text"), py::arg("filename") = "<kir>",
        "{name, params, weights, outputs, ranges, out_spec}: what an exported program declares "
        "at its boundary (ValueError for invalid text).");
  m.def("default_pipeline", &driver::defaultPipeline,
        "The graph passes compile_graph runs by default.");
  m.def(
      "cache_stats", [] { return KernelCache::global().stats().str(); },
      "The process kernel cache's hits and misses (KILN_LOGS=perf).");
  m.def(
      "cache_dir", [] { return KernelCache::global().dir(); },
      "The kernel cache's directory ($KILN_CACHE_DIR or ~/.cache/kiln).");
}

} // namespace kiln::frontend
