#include "passes/autodiff/training_graphs.h"

#include "ir/graph_builder.h"
#include "ir/printer.h"
#include "passes/autodiff/min_cut.h"
#include "passes/autodiff/node_vjp.h"
#include "passes/dce.h"
#include "passes/functionalize.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace kiln::passes::autodiff {

namespace {

using ir::OpKind;
using ir::Value;
using ValueMap = std::unordered_map<const Value *, Value *>;

bool typedAsGiven(OpKind op) {
  return op == OpKind::Constant || op == OpKind::Weight || op == OpKind::Call;
}

/// Adds a copy of `node` to `gb` with operands mapped by `map`; returns its results.
std::vector<Value *> replay(ir::GraphBuilder &gb, const ir::Node &node,
                            const std::function<Value *(Value *)> &map) {
  std::vector<Value *> operands;
  for (Value *v : node.operands())
    operands.push_back(map(v));
  std::optional<std::vector<ir::ValueType>> types;
  if (typedAsGiven(node.op())) {
    types.emplace();
    for (Value *r : node.results())
      types->push_back(r->type());
  }
  return gb.add(node.op(), std::move(operands), node.attrs(), node.loc(), std::move(types));
}

bool isFloatTensor(const Value *v) { return v->isTensor() && isFloating(v->meta().dtype); }

ir::TensorMeta denseMeta(const Value *v) {
  return ir::TensorMeta::contiguous(v->meta().dtype, v->meta().sizes, v->meta().device);
}

int64_t bytesOf(const Value *v) {
  if (!v->isTensor())
    return 8;
  int64_t n = static_cast<int64_t>(itemsize(v->meta().dtype));
  for (const ir::SymInt &s : v->meta().sizes)
    n *= s.constant().value_or(1);
  return n;
}

/// Whether a node reads two tensors of its own size (a residual add).
bool readsTwoOfItsSize(const ir::Node &n) {
  int full = 0;
  for (const Value *v : n.operands())
    full += v->isTensor() && n.result(0)->isTensor() && bytesOf(v) >= bytesOf(n.result(0));
  return full >= 2;
}

/// Forward nodes the backward may recompute instead of saving: pointwise ops, views,
/// reductions and the other ops of one loop (never a library call, a sort or a random draw
/// without its state).
bool recomputable(const ir::Node &n) {
  if (n.numResults() != 1 || n.hasTrait(ir::trait::Extern) || n.op() == OpKind::Call)
    return false;
  if (n.hasTrait(ir::trait::Elementwise) || n.hasTrait(ir::trait::View) ||
      n.hasTrait(ir::trait::Reduction))
    return true;
  switch (n.op()) {
  case OpKind::Constant:
  case OpKind::Full:
  case OpKind::Arange:
  case OpKind::Contiguous:
  case OpKind::MaskedFill:
  case OpKind::OneHot:
  case OpKind::Tril:
  case OpKind::Triu:
  case OpKind::Dropout: // its counters are an operand: the same draws
  case OpKind::SliceScatter:
  case OpKind::SelectScatter:
    return true;
  default:
    return false;
  }
}

/// The functional form of `graph`: a copy with its mutations turned into data flow, and the
/// (input, new value) pairs the forward writes back once at its end.
struct Functional {
  std::unique_ptr<ir::Graph> graph;
  std::vector<std::pair<Value *, Value *>> writeBacks;
};

Functional functionalCopy(const ir::Graph &graph,
                          std::unordered_map<const ir::Node *, ir::Node *> &map) {
  Functional f{ir::cloneGraph(graph, &map), {}};
  bool mutates = false;
  for (const ir::Node *n : f.graph->nodes())
    mutates = mutates || isMutation(*n);
  if (!mutates)
    return f;
  try {
    functionalize(*f.graph);
    f.writeBacks = takeWriteBacks(*f.graph);
  } catch (const std::exception &e) {
    throw Unsupported(fmt::format("a mutation compiled training cannot express: {}", e.what()));
  }
  return f;
}

class JointBuilder {
public:
  JointBuilder(const Functional &functional, const std::vector<bool> &needsGrad,
               std::unordered_set<const ir::Node *> noGrad)
      : graph_(*functional.graph), writeBacks_(functional.writeBacks), needsGrad_(needsGrad),
        noGrad_(std::move(noGrad)), joint_(graph_.name() + "_joint") {}

  TrainingGraphs run() {
    markRequiresGrad();
    buildJoint();
    return split();
  }

private:
  void markRequiresGrad() {
    std::vector<Value *> inputs = graph_.inputs();
    for (size_t i = 0; i < inputs.size(); ++i)
      if (i < needsGrad_.size() && needsGrad_[i] && isFloatTensor(inputs[i]))
        requires_.insert(inputs[i]);
    for (const auto &[input, value] : writeBacks_) {
      if (requires_.count(input) && !noGrad_.count(value->definingNode())) {
        // An update with grad (relu_ of an activation an eager node made): the value is an
        // ordinary one here, an extra output, and the caller copies it into the input with
        // autograd recording (see TrainingGraphs::writeBacks).
        tracked_.emplace_back(input, value);
        continue;
      }
      updatedInputs_.insert(input);
      if (!requires_.count(input))
        continue;
      // An update under no_grad (an optimizer's step) leaves the input the same leaf: what
      // reads the updated value differentiates into the input's gradient, and nothing flows
      // through the update itself.
      requires_.insert(value);
      updated_.emplace(value, input);
    }
    for (const ir::Node *n : graph_.nodes()) {
      if (n->op() == OpKind::Input || n->op() == OpKind::Output)
        continue;
      bool any = false;
      for (Value *v : n->operands())
        any = any || requires_.count(v);
      if (!any || noGrad_.count(n))
        continue;
      switch (differentiability(*n)) {
      case Differentiability::Constant:
        continue;
      case Differentiability::Missing:
        throw Unsupported(fmt::format("'{}' has no compiled derivative yet", n->keyword()));
      case Differentiability::Rule:
        if (n->numResults() != 1)
          throw Unsupported(fmt::format("'{}' has several results", n->keyword()));
        break;
      }
      for (Value *r : n->results())
        if (isFloatTensor(r))
          requires_.insert(r);
    }
  }

  void buildJoint() {
    std::vector<Value *> inputs = graph_.inputs();
    for (Value *v : inputs) {
      map_[v] = joint_.input(v->type(), v->name(), v->definingNode()->loc());
      inputIndex_[map_[v]] = inputIndex_.size();
    }
    numInputs_ = joint_.mark();
    for (Value *v : inputs)
      if (v->isTensor())
        for (const ir::SymInt &e : v->meta().sizes)
          e.collectSymbols(tensorSymbols_);
    std::vector<Value *> outputs = graph_.outputs();
    for (const auto &[input, value] : tracked_) {
      std::vector<int> same;
      for (size_t k = 0; k < graph_.outputs().size(); ++k)
        if (graph_.outputs()[k] == value)
          same.push_back(static_cast<int>(k));
      writeBackOut_.push_back({static_cast<int>(inputIndex_.at(map_.at(input))),
                               static_cast<int>(outputs.size()), std::move(same)});
      outputs.push_back(value);
    }
    std::vector<Value *> seeds;
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (!requires_.count(outputs[k]))
        continue;
      gradOutputs_.push_back(static_cast<int>(k));
      seeds.push_back(joint_.input(denseMeta(outputs[k]), fmt::format("grad_out{}", k)));
      inputIndex_[seeds.back()] = inputIndex_.size();
    }
    for (const ir::Node *n : graph_.nodes()) {
      if (n->op() == OpKind::Input || n->op() == OpKind::Output)
        continue;
      std::vector<Value *> rs = replay(joint_, *n, [&](Value *v) { return map_.at(v); });
      for (int i = 0; i < n->numResults(); ++i)
        map_[n->result(i)] = rs[i];
      forwardNodes_.insert(rs.empty() ? joint_.graph().nodes().back() : rs[0]->definingNode());
    }
    for (size_t s = 0; s < seeds.size(); ++s)
      accumulate(outputs[gradOutputs_[s]], seeds[s], {});
    std::vector<ir::Node *> nodes = graph_.nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      const ir::Node *n = *it;
      if (n->op() == OpKind::Input || n->op() == OpKind::Output || n->numResults() != 1)
        continue;
      auto g = grads_.find(n->result(0));
      if (g == grads_.end() || !requires_.count(n->result(0)) || updated_.count(n->result(0)))
        continue;
      autograd::rules::Needs need;
      for (int i = 0; i < n->numOperands(); ++i)
        if (requires_.count(n->operand(i)))
          need.set(static_cast<size_t>(i));
      GraphRuleBuilder b(joint_, n->loc());
      const ir::Node &copy = *map_.at(n->result(0))->definingNode();
      std::vector<Value *> gs = nodeVjp(b, copy, g->second, need);
      for (int i = 0; i < n->numOperands() && i < static_cast<int>(gs.size()); ++i)
        if (need[i] && gs[i])
          accumulate(n->operand(i), gs[i], n->loc());
    }
    for (const auto &[value, input] : updated_)
      if (auto g = grads_.find(value); g != grads_.end())
        accumulate(input, g->second, {});
    std::vector<Value *> jointOutputs;
    for (Value *v : outputs)
      jointOutputs.push_back(map_.at(v));
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto g = grads_.find(inputs[i]);
      if (g == grads_.end() || !requires_.count(inputs[i]))
        continue;
      inputGrads_.push_back(static_cast<int>(i));
      jointOutputs.push_back(g->second);
    }
    numJointOutputs_ = outputs.size();
    jointGraph_ = joint_.finish(jointOutputs);
  }

  /// Adds `grad` (a joint value) into the gradient of `v` (a value of the original graph).
  void accumulate(const Value *v, Value *grad, const ir::SourceLoc &loc) {
    const ir::TensorMeta &want = v->meta();
    const ir::TensorMeta &got = grad->meta();
    if (got.sizes != want.sizes)
      throw Unsupported(fmt::format("a gradient of {} came out as {}", ir::printType(v->type()),
                                    ir::printType(grad->type())));
    GraphRuleBuilder b(joint_, loc);
    if (got.dtype != want.dtype)
      grad = b.cast(grad, want.dtype);
    auto [it, fresh] = grads_.emplace(v, grad);
    if (!fresh)
      it->second = b.add(it->second, grad);
  }

  /// Whether the backward may recompute `n` (a joint node that reads no output gradient). A
  /// node of the forward that reads two tensors of its own size (a residual add) is saved
  /// instead: each recomputation re-reads both, and chains of them (the residual stream
  /// x0 + a1 + a2 + ...) would be re-read by every layer's backward.
  bool mayRecompute(const ir::Node &n) const {
    if (!recomputable(n) || usesIntOnlySymbols(n))
      return false;
    return !(forwardNodes_.count(&n) && readsTwoOfItsSize(n));
  }

  /// Whether `n`'s attributes or result sizes name a symbol no tensor input's size gives (a
  /// slice bound from an int argument, `x[:, a:b]`): the backward, whose inputs are tensors,
  /// could not bind it, so such a node is saved, not recomputed.
  bool usesIntOnlySymbols(const ir::Node &n) const {
    std::set<std::string, std::less<>> used;
    for (const auto &[name, attr] : n.attrs()) {
      if (attr.is<ir::SymInt>())
        attr.toSymInt().collectSymbols(used);
      else if (attr.is<std::vector<ir::SymInt>>())
        for (const ir::SymInt &e : attr.toSymInts())
          e.collectSymbols(used);
    }
    for (const Value *r : n.results())
      if (r->isTensor())
        for (const ir::SymInt &e : r->meta().sizes)
          e.collectSymbols(used);
    for (const std::string &sym : used)
      if (!tensorSymbols_.count(sym))
        return true;
    return false;
  }

  bool isGradInput(const Value *v) const {
    size_t i = jointInputIndex(v);
    return i != SIZE_MAX && i >= numInputs_;
  }

  /// The position of a joint input (forward inputs, then output gradients); SIZE_MAX for a
  /// value a node computes.
  size_t jointInputIndex(const Value *v) const {
    auto it = inputIndex_.find(v);
    return it == inputIndex_.end() ? SIZE_MAX : it->second;
  }

  /// The min-cut partition: which forward values the backward takes as saved inputs.
  ///
  /// The forward region is every joint value that does not depend on an output gradient (the
  /// forward's nodes, and backward nodes such as relu's mask that only read forward values). Each
  /// such value v is an edge v_in -> v_out costing its bytes (an input costs nothing: it is alive
  /// anyway); the source feeds every input and every value that may not be recomputed, each
  /// value feeds its users, and the values the backward reads feed the sink. A minimum cut is
  /// the cheapest set of values to save such that the backward recomputes the rest from them.
  void partition(const std::vector<ir::Node *> &nodes, const std::vector<Value *> &bwdOuts) {
    for (ir::Node *n : nodes) {
      bool dep = false;
      for (Value *v : n->operands())
        dep = dep || isGradInput(v) || dependent_.count(v->definingNode());
      if (dep)
        dependent_.insert(n);
    }
    // The backward's live nodes: those the gradients are computed through.
    std::unordered_set<const ir::Node *> live;
    std::vector<Value *> needs;
    std::function<void(Value *)> reach = [&](Value *v) {
      const ir::Node *d = v->definingNode();
      if (!dependent_.count(d)) {
        if (!isGradInput(v))
          needs.push_back(v);
        return;
      }
      if (!live.insert(d).second)
        return;
      for (Value *o : d->operands())
        reach(o);
    };
    for (Value *v : bwdOuts)
      reach(v);

    std::unordered_map<const Value *, int> id;
    std::vector<Value *> values;
    auto add = [&](Value *v) {
      id[v] = static_cast<int>(values.size());
      values.push_back(v);
    };
    for (Value *v : jointGraph_->inputs())
      if (!isGradInput(v))
        add(v);
    for (ir::Node *n : nodes)
      if (!dependent_.count(n))
        for (Value *v : n->results())
          add(v);
    const int source = 2 * static_cast<int>(values.size()), sink = source + 1;
    FlowNetwork net(sink + 1);
    for (size_t k = 0; k < values.size(); ++k) {
      const Value *v = values[k];
      const ir::Node *d = v->definingNode();
      const bool input = d->op() == OpKind::Input;
      net.addEdge(2 * k, 2 * k + 1, input ? 0 : std::max<int64_t>(bytesOf(v), 1));
      if (input || !mayRecompute(*d))
        net.addEdge(source, 2 * k, FlowNetwork::kInfinite);
      for (Value *o : d->operands())
        if (auto it = id.find(o); it != id.end())
          net.addEdge(2 * it->second + 1, 2 * k, FlowNetwork::kInfinite);
    }
    for (Value *v : needs)
      net.addEdge(2 * id.at(v) + 1, sink, FlowNetwork::kInfinite);
    net.maxFlow(source, sink);
    std::vector<bool> side = net.sourceSide(source);
    auto cut = [&](const Value *v) {
      int k = id.at(v);
      return side[2 * k] && !side[2 * k + 1];
    };
    // The cut values the backward reads (a free input edge is cut whether read or not).
    std::unordered_set<const Value *> used, seen;
    std::function<void(Value *)> take = [&](Value *v) {
      if (!seen.insert(v).second)
        return;
      if (cut(v)) {
        used.insert(v);
        return;
      }
      for (Value *o : v->definingNode()->operands())
        take(o);
    };
    for (Value *v : needs)
      take(v);
    for (Value *v : values)
      if (used.count(v))
        savedValues_.push_back(v);
  }

  TrainingGraphs split() {
    TrainingGraphs out;
    out.jointText = ir::printGraph(*jointGraph_);
    std::vector<Value *> jointIns = jointGraph_->inputs();
    std::vector<Value *> jointOuts = jointGraph_->outputs();
    std::vector<ir::Node *> nodes;
    for (ir::Node *n : jointGraph_->nodes())
      if (n->op() != OpKind::Input && n->op() != OpKind::Output)
        nodes.push_back(n);
    std::vector<Value *> gradOuts(jointOuts.begin() + numJointOutputs_, jointOuts.end());
    partition(nodes, gradOuts);

    // The backward graph: saved values, then the output gradients.
    ir::GraphBuilder bwd(graph_.name() + "_backward");
    ValueMap bmap;
    for (size_t s = 0; s < savedValues_.size(); ++s) {
      Value *v = savedValues_[s];
      ir::ValueType type = v->isTensor() ? ir::ValueType(denseMeta(v)) : v->type();
      bmap[v] = bwd.input(type, fmt::format("saved{}", s));
    }
    for (size_t i = numInputs_; i < jointIns.size(); ++i)
      bmap[jointIns[i]] = bwd.input(jointIns[i]->type(), jointIns[i]->name());
    std::function<Value *(Value *)> materialize = [&](Value *v) -> Value * {
      if (auto it = bmap.find(v); it != bmap.end())
        return it->second;
      const ir::Node *d = v->definingNode();
      if (!dependent_.count(d) && (d->op() == OpKind::Input || !mayRecompute(*d)))
        throw Unsupported(fmt::format("the partition left %{} ({}) neither saved nor "
                                      "recomputable",
                                      v->name(), d->keyword()));
      std::vector<Value *> rs = replay(bwd, *d, materialize); // recomputed or a backward node
      for (int i = 0; i < d->numResults(); ++i)
        bmap[d->result(i)] = rs[i];
      return bmap.at(v);
    };
    std::vector<Value *> bwdOuts;
    for (Value *v : gradOuts)
      bwdOuts.push_back(materialize(v));
    out.backwardPositions = bwd.positions();
    out.backward = bwd.finish(bwdOuts);

    // The forward graph: the original outputs, then the saved values it computes.
    ir::GraphBuilder fwd(graph_.name() + "_forward");
    ValueMap fmap;
    for (size_t i = 0; i < numInputs_; ++i)
      fmap[jointIns[i]] =
          fwd.input(jointIns[i]->type(), jointIns[i]->name(), jointIns[i]->definingNode()->loc());
    std::function<Value *(Value *)> compute = [&](Value *v) -> Value * {
      if (auto it = fmap.find(v); it != fmap.end())
        return it->second;
      const ir::Node *d = v->definingNode(); // a backward node of forward values it saves
      std::vector<Value *> rs = replay(fwd, *d, compute);
      for (int i = 0; i < d->numResults(); ++i)
        fmap[d->result(i)] = rs[i];
      return fmap.at(v);
    };
    for (ir::Node *n : nodes) {
      if (!forwardNodes_.count(n))
        continue;
      std::vector<Value *> rs = replay(fwd, *n, compute);
      for (int i = 0; i < n->numResults(); ++i)
        fmap[n->result(i)] = rs[i];
    }
    for (const auto &[input, value] : writeBacks_) { // the forward's mutations, written back once
      bool byCaller = std::any_of(tracked_.begin(), tracked_.end(),
                                  [&](const auto &t) { return t.first == input; });
      if (!byCaller)
        fwd.add(OpKind::Copy, {fmap.at(map_.at(input)), fmap.at(map_.at(value))}, {});
    }
    std::vector<Value *> fwdOuts;
    for (size_t k = 0; k < numJointOutputs_; ++k)
      fwdOuts.push_back(fmap.at(jointOuts[k]));
    for (Value *v : savedValues_) {
      SavedValue sv;
      sv.bytes = bytesOf(v);
      sv.producer = std::string(v->definingNode()->keyword());
      if (size_t i = jointInputIndex(v); i < numInputs_) {
        // The forward writes an updated input back before the backward runs.
        if (updatedInputs_.count(graph_.inputs()[i]))
          throw Unsupported(fmt::format("the backward reads %{} from before its in-place update",
                                        graph_.inputs()[i]->name()));
        sv.isInput = true;
        sv.index = static_cast<int>(i);
      } else {
        sv.index = static_cast<int>(fwdOuts.size());
        fwdOuts.push_back(compute(v));
      }
      out.saved.push_back(sv);
    }
    out.forwardPositions = fwd.positions();
    out.forward = fwd.finish(fwdOuts);
    out.gradOutputs = gradOutputs_;
    out.inputGrads = inputGrads_;
    out.writeBacks = writeBackOut_;
    return out;
  }

  const ir::Graph &graph_;
  const std::vector<std::pair<Value *, Value *>> &writeBacks_;
  const std::vector<bool> &needsGrad_;
  std::unordered_set<const ir::Node *> noGrad_;
  /// Updated values that stand for the input they are written back into (see markRequiresGrad).
  std::unordered_map<const Value *, const Value *> updated_;
  std::unordered_set<const Value *> updatedInputs_;
  /// Updates with grad, written back by the caller (input, updated value), and where.
  std::vector<std::pair<Value *, Value *>> tracked_;
  std::vector<WriteBack> writeBackOut_;
  ir::GraphBuilder joint_;
  std::unique_ptr<ir::Graph> jointGraph_;
  size_t numInputs_ = 0, numJointOutputs_ = 0;
  std::unordered_map<const Value *, size_t> inputIndex_; ///< joint input -> its position
  std::unordered_set<const Value *> requires_;
  ValueMap map_;                                     ///< original value → joint value
  std::unordered_map<const Value *, Value *> grads_; ///< original value → joint gradient
  std::unordered_set<const ir::Node *> forwardNodes_;
  std::set<std::string, std::less<>> tensorSymbols_; ///< symbols the inputs' sizes give
  std::vector<int> gradOutputs_, inputGrads_;
  std::vector<Value *> savedValues_;
  std::unordered_set<const ir::Node *> dependent_; ///< joint nodes that read an output gradient
};

} // namespace

TrainingGraphs buildTrainingGraphs(const ir::Graph &graph, const std::vector<bool> &inputNeedsGrad,
                                   const std::unordered_set<const ir::Node *> &noGrad) {
  std::unordered_map<const ir::Node *, ir::Node *> map;
  Functional functional = functionalCopy(graph, map);
  std::unordered_set<const ir::Node *> stopped;
  for (const ir::Node *n : noGrad)
    if (auto it = map.find(n); it != map.end())
      stopped.insert(it->second);
  return JointBuilder(functional, inputNeedsGrad, std::move(stopped)).run();
}

} // namespace kiln::passes::autodiff
