#include "autograd/engine.h"

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "autograd/ops.h"
#include "runtime/error.h"
#include "runtime/ops/factory.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace kiln::autograd {
namespace {

/// KILN_AUTOGRAD_PROFILE=1: time spent in each kind of node, printed to stderr at exit.
class NodeProfile {
public:
  static NodeProfile *get() {
    static NodeProfile *profile = std::getenv("KILN_AUTOGRAD_PROFILE") ? new NodeProfile : nullptr;
    return profile;
  }
  void add(const std::string &name, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto &[total, calls] = totals_[name];
    total += seconds;
    ++calls;
  }
  ~NodeProfile() = default;

private:
  NodeProfile() {
    std::atexit([] { get()->print(); });
  }
  void print() {
    std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(totals_.begin(),
                                                                         totals_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto &a, const auto &b) { return a.second.first > b.second.first; });
    std::fprintf(stderr, "kiln autograd profile (time in node apply, all backward calls):\n");
    for (const auto &[name, v] : rows)
      std::fprintf(stderr, "  %-32s %10.3f ms %8lld calls\n", name.c_str(), v.first * 1e3,
                   static_cast<long long>(v.second));
  }
  std::mutex mutex_;
  std::unordered_map<std::string, std::pair<double, int64_t>> totals_;
};

struct LaterFirst {
  bool operator()(const Node *a, const Node *b) const { return a->sequence < b->sequence; }
};

/// Where grad() reads a result: output `slot` of a node, into results[index].
struct Capture {
  uint32_t slot;
  size_t index;
};

class GraphTask {
public:
  GraphTask(bool keepGraph, bool createGraph) : keepGraph_(keepGraph), createGraph_(createGraph) {}

  void addRoot(const Edge &edge, Tensor grad) {
    // A leaf's accumulator may be held by nothing else (it is created on demand).
    held_.push_back(edge.fn);
    roots_.push_back(edge.fn.get());
    accumulate(edge, std::move(grad));
  }
  void capture(Node *node, uint32_t slot, size_t index) {
    captures_[node].push_back({slot, index});
  }
  /// grad(): AccumulateGrad nodes do not run, and only nodes leading to a capture do.
  void onlyCaptures() { onlyCaptures_ = true; }
  /// backward(inputs=...): only these accumulators run.
  void restrictAccumulators(std::unordered_set<Node *> allowed) {
    allowedAccumulators_ = std::move(allowed);
    restrictAccumulators_ = true;
  }

  std::vector<Tensor> run(size_t numResults);

private:
  void accumulate(const Edge &edge, Tensor grad) {
    std::vector<Tensor> &buffer = buffers_[edge.fn.get()];
    if (buffer.size() <= edge.inputNr)
      buffer.resize(edge.inputNr + 1);
    Tensor &slot = buffer[edge.inputNr];
    if (!slot.defined())
      slot = std::move(grad);
    else
      slot = createGraph_ ? ops::add(slot, grad) : kiln::ops::add(slot, grad);
  }
  void countDependencies();
  void markNeeded();
  bool shouldRun(Node *node) const;

  bool keepGraph_, createGraph_;
  bool onlyCaptures_ = false, restrictAccumulators_ = false;
  std::vector<Node *> roots_;
  std::vector<std::shared_ptr<Node>> held_;
  std::unordered_map<Node *, std::vector<Tensor>> buffers_;
  std::unordered_map<Node *, int> dependencies_;
  std::unordered_map<Node *, std::vector<Capture>> captures_;
  std::unordered_set<Node *> needed_;
  std::unordered_set<Node *> allowedAccumulators_;
};

void GraphTask::countDependencies() {
  std::vector<Node *> stack(roots_.begin(), roots_.end());
  std::unordered_set<Node *> seen(roots_.begin(), roots_.end());
  while (!stack.empty()) {
    Node *n = stack.back();
    stack.pop_back();
    for (const Edge &e : n->next) {
      if (!e.valid())
        continue;
      ++dependencies_[e.fn.get()];
      if (seen.insert(e.fn.get()).second)
        stack.push_back(e.fn.get());
    }
  }
}

void GraphTask::markNeeded() {
  // Post-order over the graph without recursion (graphs of long loops are deep): a node is needed
  // when it is captured or one of its next nodes is.
  std::unordered_set<Node *> done;
  std::vector<std::pair<Node *, size_t>> stack;
  for (Node *root : roots_)
    if (done.insert(root).second)
      stack.push_back({root, 0});
  while (!stack.empty()) {
    auto &[n, i] = stack.back();
    if (i < n->next.size()) {
      Node *child = n->next[i++].fn.get();
      if (child && done.insert(child).second)
        stack.push_back({child, 0});
      continue;
    }
    bool needed = captures_.count(n) > 0;
    for (const Edge &e : n->next)
      needed = needed || (e.valid() && needed_.count(e.fn.get()));
    if (needed)
      needed_.insert(n);
    stack.pop_back();
  }
}

bool GraphTask::shouldRun(Node *node) const {
  bool accumulator = dynamic_cast<AccumulateGrad *>(node) != nullptr;
  if (onlyCaptures_)
    return !accumulator && needed_.count(node);
  if (accumulator && restrictAccumulators_)
    return allowedAccumulators_.count(node) > 0;
  return true;
}

std::vector<Tensor> GraphTask::run(size_t numResults) {
  autocast::Suspend noAutocast; // gradients keep the dtypes the forward recorded
  std::vector<Tensor> results(numResults);
  countDependencies();
  if (onlyCaptures_)
    markNeeded();
  std::priority_queue<Node *, std::vector<Node *>, LaterFirst> ready;
  std::unordered_set<Node *> queued;
  for (Node *root : roots_)
    if (dependencies_[root] == 0 && queued.insert(root).second)
      ready.push(root);
  // Holds every node that ran so that releasing saved tensors cannot free a node mid-walk.
  std::vector<std::shared_ptr<Node>> ran;
  while (!ready.empty()) {
    Node *node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers_[node]);
    buffers_.erase(node);
    grads.resize(std::max(grads.size(), node->outputs.size()));
    bool anyGrad = false;
    for (const Tensor &g : grads)
      anyGrad = anyGrad || g.defined();
    if (anyGrad) {
      for (size_t slot = 0; slot < grads.size(); ++slot) {
        if (!grads[slot].defined() && slot < node->outputs.size()) {
          if (!node->materializeGrads)
            continue;
          const OutputInfo &info = node->outputs[slot];
          grads[slot] = kiln::ops::zeros(info.sizes, info.dtype).to(info.device);
        }
        if (slot < node->preHooks.size())
          for (const GradHook &hook : node->preHooks[slot])
            if (Tensor replaced = hook(grads[slot]); replaced.defined())
              grads[slot] = std::move(replaced);
      }
      for (const auto &[slot, hook] : node->retainHooks)
        if (slot < grads.size() && grads[slot].defined())
          hook(grads[slot]);
    }
    if (auto it = captures_.find(node); it != captures_.end())
      for (const Capture &c : it->second)
        if (c.slot < grads.size())
          results[c.index] = grads[c.slot];
    std::vector<Tensor> inputGrads;
    if (anyGrad && shouldRun(node)) {
      GradModeGuard mode(createGraph_);
      if (NodeProfile *profile = NodeProfile::get()) {
        auto start = std::chrono::steady_clock::now();
        inputGrads = node->apply(std::move(grads));
        profile->add(
            node->name(),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      } else {
        inputGrads = node->apply(std::move(grads));
      }
      ran.push_back(node->shared_from_this());
      if (!keepGraph_)
        node->releaseSaved();
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge &e = node->next[i];
      if (!e.valid())
        continue;
      if (i < inputGrads.size() && inputGrads[i].defined())
        accumulate(e, std::move(inputGrads[i]));
      if (--dependencies_[e.fn.get()] == 0 && queued.insert(e.fn.get()).second)
        ready.push(e.fn.get());
    }
  }
  return results;
}

/// The gradient that starts at output i: the given one (shape-checked) or implicit ones.
Tensor rootGrad(const Tensor &output, const Tensor *given, size_t i) {
  if (given && given->defined()) {
    KILN_CHECK(given->sizes() == output.sizes(),
               "Mismatch in shape: grad_output[{}] has a shape of {} and output[{}] has a shape "
               "of {}.",
               i, given->shapeStr(), i, output.shapeStr());
    return *given;
  }
  KILN_CHECK(output.numel() == 1, "grad can be implicitly created only for scalar outputs");
  return kiln::ops::ones(output.sizes(), output.dtype()).to(output.device());
}

void addRoots(GraphTask &task, std::span<const Tensor> outputs,
              std::span<const Tensor> gradOutputs) {
  KILN_CHECK(gradOutputs.empty() || gradOutputs.size() == outputs.size(),
             "grad requires one gradient per output: got {} gradients for {} outputs",
             gradOutputs.size(), outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    KILN_CHECK_KIND(NotImplemented, outputs[i].isCpu(),
                    "backward of CUDA tensors is not supported yet (the CUDA path runs inference); "
                    "train on the CPU");
    Edge edge = gradEdge(outputs[i]);
    KILN_CHECK(edge.valid(),
               "element {} of tensors does not require grad and does not have a grad_fn", i);
    task.addRoot(edge, rootGrad(outputs[i], gradOutputs.empty() ? nullptr : &gradOutputs[i], i));
  }
}

} // namespace

void backward(std::span<const Tensor> outputs, std::span<const Tensor> gradOutputs, bool keepGraph,
              bool createGraph, std::span<const Tensor> inputs) {
  GraphTask task(keepGraph, createGraph);
  addRoots(task, outputs, gradOutputs);
  if (!inputs.empty()) {
    std::unordered_set<Node *> allowed;
    for (const Tensor &t : inputs) {
      KILN_CHECK(t.requiresGrad(), "One of the differentiated Tensors does not require grad");
      KILN_CHECK(isLeaf(t), "backward(inputs=...): only leaf tensors are supported as inputs");
      allowed.insert(gradEdge(t).fn.get());
    }
    task.restrictAccumulators(std::move(allowed));
  }
  task.run(0);
}

std::vector<Tensor> grad(std::span<const Tensor> outputs, std::span<const Tensor> gradOutputs,
                         std::span<const Tensor> inputs, bool keepGraph, bool createGraph,
                         bool allowUnused) {
  GraphTask task(keepGraph, createGraph);
  // Inputs first: a leaf input's accumulator must exist before the walk to be captured.
  std::vector<Edge> inputEdges;
  for (const Tensor &t : inputs) {
    KILN_CHECK(t.requiresGrad(), "One of the differentiated Tensors does not require grad");
    inputEdges.push_back(gradEdge(t));
  }
  addRoots(task, outputs, gradOutputs);
  for (size_t i = 0; i < inputEdges.size(); ++i)
    task.capture(inputEdges[i].fn.get(), inputEdges[i].inputNr, i);
  task.onlyCaptures();
  std::vector<Tensor> results = task.run(inputs.size());
  for (size_t i = 0; i < results.size(); ++i)
    KILN_CHECK(results[i].defined() || allowUnused,
               "One of the differentiated Tensors appears to not have been used in the graph. "
               "Set allow_unused=True if this is the desired behavior.");
  return results;
}

} // namespace kiln::autograd
