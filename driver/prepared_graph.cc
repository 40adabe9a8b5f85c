// The pipeline from .kir text to a scheduled loop program, and the program's input contract.

#include "driver/prepared_graph.h"

#include "ir/printer.h"
#include "ir/shape_rules.h"
#include "ir/verifier.h"
#include "passes/dce.h"
#include "passes/functionalize.h"
#include "passes/lower/lowering.h"
#include "passes/pass_manager.h"
#include "passes/shape_infer.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <set>

namespace kiln::driver {

namespace {

/// The graph pipeline: every pass of this list that the pass manager knows, in order.
constexpr std::string_view kDefaultPasses[] = {"functionalize", "simplify", "const-fold",
                                               "dce",           "cse",      "dce"};

ValueKind scalarKind(ir::ScalarType t) {
  return t == ir::ScalarType::Int     ? ValueKind::Int
         : t == ir::ScalarType::Float ? ValueKind::Float
                                      : ValueKind::Bool;
}

DType scalarDType(ValueKind k) {
  return k == ValueKind::Int ? DType::Int64 : k == ValueKind::Float ? DType::Float64 : DType::Bool;
}

[[noreturn]] void failAt(const ir::Node *n, const ir::NodePositions &positions,
                         const std::string &filename, std::string message) {
  ir::Diagnostic d;
  d.message = std::move(message);
  d.node = n;
  throw ir::DiagnosticError(located(std::move(d), positions, filename));
}

/// Takes `sym_constrain_range` nodes out of the graph into `out` (and `assumed` as relations).
void takeRanges(ir::Graph &graph, const ir::NodePositions &positions, const std::string &filename,
                PreparedGraph &out) {
  std::set<std::string, std::less<>> inputSymbols;
  for (const ir::Value *v : graph.inputs())
    if (v->isTensor())
      for (const ir::SymInt &s : v->meta().sizes)
        s.collectSymbols(inputSymbols);
  for (ir::Node *n : graph.nodes()) {
    if (n->op() != ir::OpKind::SymConstrainRange)
      continue;
    SymRange r{n->attr("symbol")->toString(), n->attr("min")->toInt(), n->attr("max")->toInt()};
    if (!inputSymbols.count(r.symbol))
      failAt(n, positions, filename,
             fmt::format("sym_constrain_range: no input has a size '{}'", r.symbol));
    for (const SymRange &seen : out.ranges)
      if (seen.symbol == r.symbol)
        failAt(n, positions, filename,
               fmt::format("sym_constrain_range: '{}' is constrained twice", r.symbol));
    ir::SymInt sym = ir::SymInt::parse(r.symbol);
    out.assumed.push_back({sym, ir::RelOp::Ge, ir::SymInt(r.min)});
    if (r.max >= 0)
      out.assumed.push_back({sym, ir::RelOp::Le, ir::SymInt(r.max)});
    out.ranges.push_back(std::move(r));
    graph.erase(n);
  }
}

/// Turns `weight` nodes into graph inputs after the parameters, recording them in `out`.
void hoistWeights(ir::Graph &graph, const ir::NodePositions &positions, const std::string &filename,
                  PreparedGraph &out) {
  std::map<std::string, ir::Value *, std::less<>> byName;
  for (ir::Node *n : graph.nodes()) {
    if (n->op() != ir::OpKind::Weight)
      continue;
    const std::string &name = n->attr("name")->toString();
    const ir::TensorMeta &m = n->result()->meta();
    WeightSpec spec{name, m.dtype, {}};
    for (const ir::SymInt &s : m.sizes) {
      if (!s.isConstant())
        failAt(n, positions, filename,
               fmt::format("weight \"{}\" must have constant sizes, got {}", name,
                           ir::printType(n->result()->type())));
      spec.sizes.push_back(*s.constant());
    }
    if (!m.isContiguous())
      failAt(n, positions, filename, fmt::format("weight \"{}\" must be contiguous", name));
    auto [it, fresh] = byName.try_emplace(name, nullptr);
    if (fresh) {
      it->second = graph.addInput(n->result()->type(), fmt::format("weight{}", out.weights.size()),
                                  n->loc());
      out.weights.push_back(std::move(spec));
    } else if (it->second->type() != n->result()->type()) {
      failAt(n, positions, filename,
             fmt::format("weight \"{}\" is used with two types: {} and {}", name,
                         ir::printType(it->second->type()), ir::printType(n->result()->type())));
    }
    n->result()->replaceAllUsesWith(it->second);
    graph.erase(n);
  }
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

using SymbolSet = std::set<std::string, std::less<>>;

/// The symbols a call's binding gives values: the inputs' sizes and the int inputs named as
/// symbols.
SymbolSet bindableSymbols(const ir::Graph &graph, const std::map<int, std::string> &inputSymbols) {
  SymbolSet bound;
  for (const ir::Value *v : graph.inputs())
    if (v->isTensor())
      for (const ir::SymInt &s : v->meta().sizes)
        s.collectSymbols(bound);
  for (const auto &[k, text] : inputSymbols)
    ir::SymInt::parse(text).collectSymbols(bound);
  return bound;
}

/// Whether every symbol of `exprs` is in `bound`.
bool allBound(std::initializer_list<ir::SymInt> exprs, const SymbolSet &bound) {
  SymbolSet symbols;
  for (const ir::SymInt &e : exprs)
    e.collectSymbols(symbols);
  return std::all_of(symbols.begin(), symbols.end(),
                     [&](const std::string &s) { return bound.count(s) > 0; });
}

/// A select at a run-time index (`hist[t - 1]`) reads and writes at that index as it is: the
/// program assumes `0 <= index < size`, which the binding checks, so a negative index (NumPy's
/// count from the end) or one out of range runs the code eagerly, which does what NumPy does.
void assumeIndicesInRange(const ir::Graph &graph, PreparedGraph &out, const SymbolSet &bound) {
  std::set<std::string> seen;
  for (const ir::Node *n : graph.nodes()) {
    if (n->op() != ir::OpKind::Select && n->op() != ir::OpKind::SelectScatter)
      continue;
    passes::lower::Region r = *passes::lower::regionOf(*n);
    const ir::SymInt &size = n->operand(0)->meta().sizes[r.dim];
    if (r.start.isConstant() || !allBound({r.start, size}, bound))
      continue;
    for (ir::SymRelation rel : {ir::SymRelation{r.start, ir::RelOp::Ge, ir::SymInt(0)},
                                ir::SymRelation{r.start, ir::RelOp::Lt, size}})
      if (seen.insert(rel.str()).second)
        out.assumed.push_back(std::move(rel));
  }
}

/// Whether a region is a small part of an array of `sizes`: it selects (drops a dim: a row, a
/// column, an element), or its size is a known quarter of the array's or less. A stencil's
/// interior (`B[1:-1, 1:-1] = ...`) is not: the program computes the whole new array directly in
/// the argument's memory, one pass, where a region write would compute then copy.
bool smallRegion(const std::vector<passes::lower::Region> &region,
                 const std::vector<ir::SymInt> &sizes) {
  for (const passes::lower::Region &r : region)
    if (r.select)
      return true;
  std::optional<int64_t> whole = 1, part = 1;
  std::vector<ir::SymInt> dims = sizes;
  for (const passes::lower::Region &r : region)
    dims[r.dim] = r.len;
  for (size_t d = 0; d < sizes.size(); ++d) {
    std::optional<int64_t> w = sizes[d].constant(), p = dims[d].constant();
    if (!w || !p)
      return false;
    *whole *= *w;
    *part *= *p;
  }
  return *part * 4 <= *whole;
}

/// Whether `n` reads single elements through selects only (`A[j, j]`): the program computes such
/// a read of a value between two writes at that element, without holding the value whole.
bool elementRead(const ir::Node &n) {
  if (n.op() != ir::OpKind::Select)
    return false;
  const ir::Value *r = n.result(0);
  if (r->meta().sizes.empty())
    return true;
  return std::all_of(r->uses().begin(), r->uses().end(),
                     [](const ir::Use &u) { return elementRead(*u.user); });
}

/// `value`, the new value of graph input `input`, as writes of regions of the input in the
/// order they apply: when it is a chain of scatters into the input (`h[t, 0] = a; h[t, 1] = b`)
/// that nothing reads after the last, each region small (smallRegion), and whose regions the
/// call's symbols (`bound`) locate. The program then computes only the written values, and the
/// runner stores each into its region of the argument: a time loop's `hist[t] = row` costs a
/// row per step, not the whole history. A value between two writes may be read at single
/// elements (`A[i, j] -= x; A[i, j] /= A[j, j]`): the program computes those from the input as
/// it was before the call, and the writes land only after the run.
std::optional<std::vector<RegionWrite>> regionWrites(const ir::Value *input, const ir::Value *value,
                                                     const SymbolSet &bound) {
  if (value->hasUses())
    return std::nullopt; // the new value is read too (returned, or by a later op)
  std::vector<RegionWrite> writes;
  std::vector<const ir::Node *> readers; // the nodes of the write above that read `v`
  for (const ir::Value *v = value; v != input;) {
    for (const ir::Use &u : v->uses())
      if (std::find(readers.begin(), readers.end(), u.user) == readers.end() &&
          !elementRead(*u.user))
        return std::nullopt; // read whole between writes: the program would hold it
    const ir::Node &top = *v->definingNode();
    if (!passes::lower::isScatter(top))
      return std::nullopt;
    passes::lower::ComposedScatter c = passes::lower::composeScatter(top);
    if (c.levels[0].len == ir::SymInt(0))
      return std::nullopt;
    if (!smallRegion(c.levels, input->meta().sizes))
      return std::nullopt; // most of the array: computed in its memory (canComputeInPlace)
    for (const passes::lower::Region &r : c.levels)
      if (!allBound({r.start, r.len}, bound))
        return std::nullopt;
    writes.push_back({std::move(c.levels), c.source});
    readers.assign({&top});
    if (c.firstView)
      readers.push_back(c.firstView);
    v = top.operand(0);
  }
  if (writes.empty())
    return std::nullopt;
  std::reverse(writes.begin(), writes.end());
  return writes;
}

/// The graph passes leave a mutated input as a trailing `copy_(input, value)`; the lowering
/// takes only pure graphs, so each becomes one more program result that the runner copies into
/// its input (PreparedGraph::writeBacks), or several: the values of the regions it writes.
void takeWriteBacks(ir::Graph &graph, PreparedGraph &out, const SymbolSet &bound) {
  if (!passes::writtenBackInputs(graph))
    return; // some other mutation is left: lowering names it
  std::vector<ir::Value *> ins = graph.inputs(), outs = graph.outputs();
  bool regions = false;
  for (auto [input, value] : passes::takeWriteBacks(graph)) {
    int k = static_cast<int>(std::find(ins.begin(), ins.end(), input) - ins.begin());
    KILN_CHECK(k < static_cast<int>(out.inputs.size()),
               "graph @{}: a weight of the program is written to", out.name);
    if (std::optional<std::vector<RegionWrite>> writes = regionWrites(input, value, bound)) {
      for (RegionWrite &w : *writes) {
        // a value the program returns anyway is that result (the carried state of a time loop)
        auto it = std::find(outs.begin(), outs.end(), w.source);
        if (it == outs.end())
          it = outs.insert(outs.end(), const_cast<ir::Value *>(w.source));
        out.writeBacks.push_back({k, static_cast<int>(it - outs.begin()), std::move(w.region)});
      }
      regions = true;
      continue;
    }
    out.writeBacks.push_back({k, static_cast<int>(outs.size()), {}});
    outs.push_back(value);
  }
  if (!out.writeBacks.empty())
    graph.setOutputs(outs, graph.returnNode()->loc());
  if (regions) // the scatters that wrote whole arrays
    passes::eliminateDeadCode(graph);
}

} // namespace

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

ir::Diagnostic located(ir::Diagnostic d, const ir::NodePositions &positions,
                       const std::string &filename) {
  d.buffer = filename;
  if (d.node) {
    if (auto it = positions.find(d.node); it != positions.end())
      d.pos = it->second;
    if (d.node->loc().known())
      d.message += fmt::format(" (from {}:{})", d.node->loc().file, d.node->loc().line);
  }
  return d;
}

namespace {

using Substitution = std::map<std::string, ir::SymInt, std::less<>>;

/// Whether a symbol appears in an attribute (a slice bound, a view shape): renaming it there
/// would take more than retyping values.
bool mentionedInAttributes(const ir::Graph &graph, const std::string &symbol) {
  for (const ir::Node *node : graph.nodes()) {
    for (const auto &[name, attr] : node->attrs()) {
      std::string text = attr.str();
      for (size_t at = text.find(symbol); at != std::string::npos; at = text.find(symbol, at + 1)) {
        size_t end = at + symbol.size();
        bool word = (at == 0 || !std::isalnum(static_cast<unsigned char>(text[at - 1]))) &&
                    (end == text.size() || !std::isalnum(static_cast<unsigned char>(text[end])));
        if (word)
          return true;
      }
    }
  }
  return false;
}

void substituteInTypes(ir::Graph &graph, const Substitution &subs) {
  auto retype = [&](ir::Value *v) {
    if (!v->isTensor())
      return;
    ir::TensorMeta m = v->meta();
    for (ir::SymInt &s : m.sizes)
      s = s.substitute(subs);
    for (ir::SymInt &s : m.strides)
      s = s.substitute(subs);
    v->setType(ir::ValueType(std::move(m)));
  };
  for (ir::Value *in : graph.inputs())
    retype(in);
  for (ir::Node *node : graph.nodes())
    for (int i = 0; i < node->numResults(); ++i)
      retype(node->result(i));
}

/// Duck sizing by what the shape rules assumed: `c * x[1:-1]` with c of size s3 and the slice of
/// size s0 - 2 assumes `s0 - 2 == s3` (a guard establishes it before the graph runs). Two names
/// for one size keep the loops from seeing that c and the slice walk together (c's loads decode
/// a flat position with a floordiv and a mod per element), so an input's own size symbol is
/// replaced by the other side and the graph's types follow; the input binding checks the
/// equality on each call. Symbols of scalar inputs (`reserved`) and of attributes stay.
/// Returns the replacements made.
Substitution unifyAssumedSizes(ir::Graph &graph, const std::vector<ir::SymRelation> &assumed,
                               const std::set<std::string, std::less<>> &reserved) {
  std::set<std::string, std::less<>> inputSymbols;
  for (const ir::Value *in : graph.inputs())
    if (in->isTensor())
      for (const ir::SymInt &s : in->meta().sizes)
        if (!s.symbolName().empty() && !reserved.count(s.symbolName()))
          inputSymbols.insert(std::string(s.symbolName()));
  Substitution subs;
  for (const ir::SymRelation &r : assumed) {
    if (r.op != ir::RelOp::Eq)
      continue;
    ir::SymInt lhs = r.lhs.substitute(subs), rhs = r.rhs.substitute(subs);
    for (auto [from, to] : {std::pair{&rhs, &lhs}, std::pair{&lhs, &rhs}}) {
      std::string name(from->symbolName());
      std::set<std::string, std::less<>> inTo;
      to->collectSymbols(inTo);
      if (name.empty() || !inputSymbols.count(name) || inTo.count(name) ||
          mentionedInAttributes(graph, name))
        continue;
      for (auto &[k, v] : subs)
        v = v.substitute({{name, *to}});
      subs.emplace(name, *to);
      break;
    }
  }
  if (!subs.empty())
    substituteInTypes(graph, subs);
  return subs;
}

} // namespace

static void typeAndVerify(ir::Graph &graph, const ir::NodePositions &positions,
                          const std::string &filename, ir::SymAssumptions *assumed) {
  try {
    passes::ShapeInference inference = passes::inferShapes(graph);
    if (assumed)
      *assumed = std::move(inference.assumed);
  } catch (const ir::DiagnosticError &e) {
    throw ir::DiagnosticError(located(e.diagnostic(), positions, filename));
  }
  if (std::optional<ir::Diagnostic> d = ir::verify(graph))
    throw ir::DiagnosticError(located(std::move(*d), positions, filename));
}

PreparedGraph prepareGraph(std::string_view text, const PipelineOptions &options) {
  ir::ParsedModule module = ir::parseModule(text, options.filename);
  KILN_CHECK_KIND(Value, module.graphs.size() == 1,
                  "{}: a program holds exactly one graph, found {}", options.filename,
                  module.graphs.size());
  return prepareGraph(std::move(module.graphs[0]), module.positions, options);
}

namespace {

/// Prints stage `stage`'s IR (`text()`) when the dump options ask for it, as the pass manager
/// prints a graph pass's.
template <typename Text>
void dumpStage(const passes::PassManagerOptions &dumps, std::string_view stage,
               const std::string &graph, Text text) {
  if (!(dumps.printAfterAll || dumps.printAfter.count(stage)) || !dumps.dumpStream)
    return;
  *dumps.dumpStream << "// -----// IR Dump After " << stage << " //----- //\n// graph @" << graph
                    << "\n"
                    << text() << std::flush;
}

} // namespace

PreparedGraph prepareGraph(std::unique_ptr<ir::Graph> graph, const ir::NodePositions &positions,
                           const PipelineOptions &options) {
  const std::string &filename = options.filename;
  PreparedGraph out;
  auto last = std::chrono::steady_clock::now();
  auto lap = [&](std::string stage) {
    auto now = std::chrono::steady_clock::now();
    out.stageMillis.emplace_back(std::move(stage),
                                 std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
  };
  ir::SymAssumptions assumed;
  typeAndVerify(*graph, positions, filename, &assumed);
  std::set<std::string, std::less<>> scalarSymbols;
  for (const auto &[k, text] : options.inputSymbols)
    ir::SymInt::parse(text).collectSymbols(scalarSymbols);
  if (Substitution subs = unifyAssumedSizes(*graph, assumed.relations(), scalarSymbols);
      !subs.empty()) {
    std::vector<ir::SymRelation> before = assumed.relations();
    assumed = {};
    for (const ir::SymRelation &r : before) // the ones that still say something
      assumed.add({r.lhs.substitute(subs), r.op, r.rhs.substitute(subs)});
    ir::SymAssumptions again;
    typeAndVerify(*graph, positions, filename, &again);
    for (const ir::SymRelation &r : again.relations())
      assumed.add(r);
    for (const auto &[symbol, value] : subs)
      out.unified.push_back({ir::SymInt::symbol(symbol), ir::RelOp::Eq, value});
  }
  out.name = graph->name();
  for (const ir::SymRelation &r : assumed.relations())
    out.assumed.push_back(r);
  SymbolSet bound = bindableSymbols(*graph, options.inputSymbols);
  assumeIndicesInRange(*graph, out, bound);
  if (const ir::Attribute *spec = graph->returnNode()->attr("out_spec"))
    out.outSpec = spec->toString();

  // Inputs and outputs as the caller sees them (passes keep their number and order).
  std::vector<ir::Value *> ins = graph->inputs();
  for (size_t k = 0; k < ins.size(); ++k) {
    InputSpec spec;
    spec.name = ins[k]->name().empty() ? fmt::format("arg{}", k) : ins[k]->name();
    if (ins[k]->isTensor()) {
      const ir::TensorMeta &m = ins[k]->meta();
      spec.sizes = m.sizes;
      spec.strides = m.strides;
      spec.contiguous = m.isContiguous();
      spec.dtype = m.dtype;
    } else {
      spec.kind = scalarKind(ins[k]->type().scalar());
      spec.dtype = scalarDType(spec.kind);
      if (auto it = options.inputSymbols.find(static_cast<int>(k));
          it != options.inputSymbols.end())
        spec.value = ir::SymInt::parse(it->second);
    }
    out.inputs.push_back(std::move(spec));
  }
  // An output that is an input in the text is that very object; one that a pass (`x * 1` →
  // x) turned into an input is still a fresh tensor, as eager code makes it.
  ir::ValueNumbering names(*graph);
  for (const ir::Value *v : graph->outputs()) {
    OutputSpec spec;
    spec.name = names.name(v).substr(1); // without the `%`
    auto it = std::find(ins.begin(), ins.end(), v);
    spec.aliasOf = it == ins.end() ? -1 : static_cast<int>(it - ins.begin());
    if (v->isTensor()) {
      spec.dtype = v->meta().dtype;
      spec.sizes = v->meta().sizes;
    } else {
      spec.kind = scalarKind(v->type().scalar());
      spec.dtype = scalarDType(spec.kind);
    }
    out.outputs.push_back(std::move(spec));
  }
  takeRanges(*graph, positions, filename, out);
  hoistWeights(*graph, positions, filename, out);
  lap("parse+shape-infer");
  if (options.until == PipelineEnd::Interface)
    return out;

  std::string pipeline = options.pipeline.value_or(defaultPipeline());
  if (!pipeline.empty()) {
    passes::PassManager pm(options.dumps);
    pm.addPipeline(pipeline);
    try {
      pm.run(*graph);
    } catch (const ir::DiagnosticError &e) {
      throw ir::DiagnosticError(located(e.diagnostic(), positions, filename));
    }
    for (const auto &[name, millis] : pm.lastTimings())
      out.stageMillis.emplace_back(name, millis);
    last = std::chrono::steady_clock::now();
  }
  takeWriteBacks(*graph, out, bound);
  out.graphText = ir::printGraph(*graph);

  if (options.collectDeclines && options.until == PipelineEnd::Lowered) {
    for (const passes::lower::Declined &d : passes::lower::findDeclines(*graph))
      out.declines.push_back(
          located(ir::Diagnostic{d.reason, "", {}, d.node}, positions, filename));
    lap("lower");
    return out;
  }
  ir::loop::LoopProgram lowered;
  try {
    lowered = passes::lower::lowerGraph(*graph);
  } catch (const ir::DiagnosticError &e) {
    // Point at the optimized graph's text when the node is not in the input (a pass made it).
    throw LoweringDeclined(located(e.diagnostic(), positions, filename));
  }
  lap("lower");
  dumpStage(options.dumps, "lower", out.name, [&] { return lowered.str(); });
  if (options.until == PipelineEnd::Lowered)
    return out;
  passes::schedule::ScheduleOptions scheduleOptions;
  scheduleOptions.fuse = options.fuse;
  out.schedule = passes::schedule::schedule(lowered, scheduleOptions);
  for (const std::string &sym : out.schedule.program.sizeSymbols())
    out.programSymbols.push_back(sym);
  lap("schedule");
  out.loopText = out.schedule.str();
  dumpStage(options.dumps, "schedule", out.name, [&] { return out.loopText; });
  if (options.dumps.timePasses && options.dumps.dumpStream)
    for (const auto &[stage, millis] : out.stageMillis)
      if (stage == "lower" || stage == "schedule")
        *options.dumps.dumpStream << fmt::format("// {:10.3f} ms  {} @{}\n", millis, stage,
                                                 out.name);
  for (const passes::schedule::Kernel &k : out.schedule.kernels) // a launch runs as one kernel
    if (!k.withPrevious)
      (k.kind == passes::schedule::KernelKind::Extern ? out.externKernels : out.kernels) += 1;
  return out;
}

namespace {

/// The checks bindSymbols and rebindInt share, each throwing SpecializationError.
void checkRange(const SymRange &r, int64_t value) {
  if (value < r.min || (r.max >= 0 && value > r.max))
    throw SpecializationError(fmt::format("size {} = {} is outside its range [{}, {}]", r.symbol,
                                          value, r.min,
                                          r.max < 0 ? std::string("inf") : std::to_string(r.max)));
}

void checkIntInput(const InputSpec &in, int64_t value, const ir::SymbolValues &values) {
  if (in.value->evaluate(values) != value)
    throw SpecializationError(fmt::format("int input {} is {}, the graph was compiled for {}",
                                          in.name, value, in.value->str()));
}

void checkAssumed(const ir::SymRelation &r, const ir::SymbolValues &values) {
  if (!r.evaluate(values))
    throw SpecializationError(fmt::format("the compiled graph assumed {}", r.str()));
}

} // namespace

ir::SymbolValues PreparedGraph::bindSymbols(std::span<const Tensor> tensors,
                                            std::span<const std::optional<int64_t>> ints) const {
  KILN_CHECK(tensors.size() == inputs.size() && ints.size() == inputs.size(),
             "bindSymbols: {} inputs for a graph of {}", tensors.size(), inputs.size());
  ir::SymbolValues values;
  auto bind = [&](const std::string &name, int64_t v, size_t k) {
    auto [it, fresh] = values.try_emplace(name, v);
    if (!fresh && it->second != v)
      throw SpecializationError(fmt::format("size {} is {} but input {} makes it {}", name,
                                            it->second, inputs[k].name, v));
  };
  for (size_t k = 0; k < inputs.size(); ++k) {
    const InputSpec &in = inputs[k];
    if (in.kind != ValueKind::Tensor) {
      if (in.value && ints[k] && !in.value->symbolName().empty())
        bind(std::string(in.value->symbolName()), *ints[k], k);
      continue;
    }
    for (size_t d = 0; d < in.sizes.size(); ++d)
      if (std::string_view s = in.sizes[d].symbolName(); !s.empty())
        bind(std::string(s), tensors[k].size(static_cast<int64_t>(d)), k);
  }
  // Sizes that are expressions in one symbol no input gives directly (`s0*2`).
  for (size_t k = 0; k < inputs.size(); ++k) {
    for (size_t d = 0; inputs[k].kind == ValueKind::Tensor && d < inputs[k].sizes.size(); ++d) {
      if (inputs[k].sizes[d].isConstant() || !inputs[k].sizes[d].symbolName().empty())
        continue; // a number, or a symbol bound above
      std::set<std::string, std::less<>> syms;
      inputs[k].sizes[d].collectSymbols(syms);
      std::vector<std::string> unbound;
      for (const std::string &s : syms)
        if (!values.count(s))
          unbound.push_back(s);
      if (unbound.size() != 1)
        continue;
      int64_t size = tensors[k].size(static_cast<int64_t>(d));
      if (std::optional<int64_t> v = solveLinear(inputs[k].sizes[d], unbound[0], values, size))
        values[unbound[0]] = *v;
    }
  }
  for (const SymRange &r : ranges) {
    auto it = values.find(r.symbol);
    if (it != values.end())
      checkRange(r, it->second);
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    const InputSpec &in = inputs[k];
    if (in.kind != ValueKind::Tensor)
      continue;
    const Tensor &t = tensors[k];
    for (size_t d = 0; d < in.sizes.size(); ++d) {
      if (!in.sizes[d].isConstant() && in.sizes[d].symbolName().empty()) {
        std::set<std::string, std::less<>> syms;
        in.sizes[d].collectSymbols(syms);
        for (const std::string &s : syms)
          if (!values.count(s))
            throw SpecializationError(fmt::format("size {} of input {} has no value (size {})", s,
                                                  in.name, in.sizes[d].str()));
      }
      int64_t want = in.sizes[d].evaluate(values);
      if (want != t.size(static_cast<int64_t>(d)))
        throw SpecializationError(fmt::format("input {} has shape {}, the graph expects size "
                                              "{} = {} in dim {}",
                                              in.name, t.shapeStr(), in.sizes[d].str(), want, d));
      if (!in.contiguous && want > 1 &&
          in.strides[d].evaluate(values) != t.stride(static_cast<int64_t>(d)))
        throw SpecializationError(
            fmt::format("input {} has strides {}, the graph expects stride {} in dim {}", in.name,
                        shapeToString(t.strides()), in.strides[d].str(), d));
    }
  }
  for (const std::string &s : programSymbols)
    if (!values.count(s))
      throw SpecializationError(fmt::format("no input gives size symbol {} a value", s));
  for (size_t k = 0; k < inputs.size(); ++k) {
    const InputSpec &in = inputs[k];
    if (in.kind == ValueKind::Tensor || !in.value || !ints[k] || !in.value->symbolName().empty())
      continue; // a symbol is the int bound above
    std::set<std::string, std::less<>> syms;
    in.value->collectSymbols(syms);
    bool known = std::all_of(syms.begin(), syms.end(), [&](auto &s) { return values.count(s); });
    if (known)
      checkIntInput(in, *ints[k], values);
  }
  for (const ir::SymRelation &r : assumed)
    checkAssumed(r, values);
  return values;
}

std::optional<IntRebind> PreparedGraph::planIntRebind(size_t k) const {
  KILN_CHECK(k < inputs.size() && inputs[k].kind != ValueKind::Tensor,
             "planIntRebind: input {} is not an int", k);
  IntRebind plan;
  plan.input = k;
  if (inputs[k].value)
    plan.symbol = std::string(inputs[k].value->symbolName());
  if (plan.symbol.empty())
    return plan;
  auto mentions = [&](const auto &expr) {
    std::set<std::string, std::less<>> syms;
    expr.collectSymbols(syms);
    return syms.count(plan.symbol) > 0;
  };
  for (const InputSpec &in : inputs) {
    if (in.kind != ValueKind::Tensor)
      continue;
    for (size_t d = 0; d < in.sizes.size(); ++d)
      if (mentions(in.sizes[d]) || (!in.contiguous && mentions(in.strides[d])))
        return std::nullopt;
  }
  for (const SymRange &r : ranges)
    if (r.symbol == plan.symbol)
      plan.ranges.push_back(&r);
  for (const ir::SymRelation &r : assumed) {
    std::set<std::string, std::less<>> syms;
    r.lhs.collectSymbols(syms);
    r.rhs.collectSymbols(syms);
    if (syms.count(plan.symbol))
      plan.relations.push_back(&r);
  }
  for (size_t j = 0; j < inputs.size(); ++j) {
    if (j == k || inputs[j].kind == ValueKind::Tensor || !inputs[j].value ||
        !inputs[j].value->symbolName().empty())
      continue;
    std::set<std::string, std::less<>> syms;
    inputs[j].value->collectSymbols(syms);
    if (syms.count(plan.symbol))
      plan.intChecks.emplace_back(j, std::vector<std::string>(syms.begin(), syms.end()));
  }
  return plan;
}

void PreparedGraph::rebindInt(const IntRebind &plan, ir::SymbolValues &values, int64_t value,
                              std::span<const std::optional<int64_t>> ints) const {
  if (plan.symbol.empty())
    return;
  auto it = values.find(plan.symbol);
  KILN_CHECK(it != values.end(), "rebindInt: {} was not bound", plan.symbol);
  it->second = value;
  for (const SymRange *r : plan.ranges)
    checkRange(*r, value);
  for (const auto &[j, symbols] : plan.intChecks) {
    bool known = std::all_of(symbols.begin(), symbols.end(),
                             [&](const std::string &sym) { return values.count(sym) > 0; });
    if (known && ints[j])
      checkIntInput(inputs[j], *ints[j], values);
  }
  for (const ir::SymRelation *r : plan.relations)
    checkAssumed(*r, values);
}

} // namespace kiln::driver
