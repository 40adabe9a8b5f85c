// The lowering driver: inputs, one registered lowering per node, outputs.

#include "passes/lower/lowering.h"

#include "ir/diagnostic.h"
#include "passes/lower/lower_context.h"

#include <algorithm>
#include <set>

namespace kiln::passes::lower {

namespace {

const Registry &registry() {
  static const Registry r = [] {
    Registry r;
    registerElementwise(r);
    registerReductions(r);
    registerViews(r);
    registerNN(r);
    registerPools(r);
    registerShapeOps(r);
    registerGathers(r);
    registerClassLosses(r);
    registerScansAndSorts(r);
    registerRandom(r);
    return r;
  }();
  return r;
}

std::string missingReason(ir::OpKind op) {
  switch (op) {
  case ir::OpKind::Call:
    return "'call' runs an opaque Python callable, which compiled code cannot contain";
  case ir::OpKind::Copy:
    return "in-place 'copy_' must be functionalized before lowering";
  default:
    return "no lowering is registered for this op";
  }
}

/// The graph's strides when they lay the tensor out densely (a permutation of row-major, like a
/// transposed result), else the contiguous strides: an output buffer never has gaps or overlaps.
std::vector<SymInt> outputStrides(const ir::TensorMeta &meta) {
  std::vector<SymInt> contiguous = ir::contiguousStrides(meta.sizes);
  if (meta.strides == contiguous)
    return contiguous;
  std::vector<bool> used(meta.sizes.size(), false);
  size_t toPlace = 0;
  for (size_t k = 0; k < meta.sizes.size(); ++k)
    toPlace += meta.sizes[k] != SymInt(1);
  SymInt expected = 1;
  for (size_t placed = 0; placed < toPlace; ++placed) {
    bool found = false;
    for (size_t k = 0; k < meta.sizes.size() && !found; ++k) {
      if (used[k] || meta.sizes[k] == SymInt(1) || !(meta.strides[k] == expected))
        continue;
      used[k] = found = true;
      expected = expected * meta.sizes[k];
    }
    if (!found)
      return contiguous;
  }
  return meta.strides;
}

void lowerOutput(LowerContext &ctx, const ir::Value *v) {
  LoopProgram &p = ctx.program();
  if (!v->isTensor()) {
    ScalarRef s = ctx.scalar(v);
    p.markOutput(
        p.pointwise({}, [&](Ops &ops, Idx) { return LowerContext::scalarVal(ops, s, s.dtype()); }));
    return;
  }
  const TensorRef &t = ctx.tensor(v);
  std::vector<SymInt> strides = outputStrides(v->meta());
  if (t.isWholeBuffer(p) && p.buffer(t.buffer).kind == ir::loop::BufferKind::Intermediate &&
      p.buffer(t.buffer).meta.strides == strides) {
    p.markOutput(t.buffer);
    return;
  }
  p.markOutput(p.pointwise(
      t.sizes, [&](Ops &ops, Idx i) { return LowerContext::load(ops, t, i); }, strides));
}

} // namespace

bool hasLowering(ir::OpKind op) { return registry().find(op) != nullptr; }

namespace {

/// Defines `v` as a fresh program input of its type.
void defineAsInput(LowerContext &ctx, LoopProgram &program, const ir::Value *v) {
  if (v->isTensor()) {
    const ir::TensorMeta &m = v->meta();
    ctx.define(v, TensorRef::of(program, program.addInput(m.dtype, m.sizes, m.strides)));
    return;
  }
  ScalarRef s{v->type().scalar(), int64_t{0}};
  s.value = program.addInput(s.dtype(), {});
  ctx.define(v, s);
}

/// Lowers every node of `graph` into `program` but those in `skipped`, whose results are
/// program inputs (after the graph's own: inputs come first). A node that declines throws.
void lowerNodes(const ir::Graph &graph, LoopProgram &program, LowerContext &ctx,
                const std::vector<Declined> &skipped = {}) {
  for (const ir::Value *v : graph.inputs())
    defineAsInput(ctx, program, v);
  for (const Declined &d : skipped)
    for (const ir::Value *v : d.node->results())
      defineAsInput(ctx, program, v);
  for (const ir::Node *n : graph.nodes()) {
    if (n->op() == ir::OpKind::Input || n->op() == ir::OpKind::Output)
      continue;
    if (std::any_of(skipped.begin(), skipped.end(), [&](const Declined &d) { return d.node == n; }))
      continue;
    LowerFn fn = registry().find(n->op());
    if (!fn)
      ctx.decline(*n, missingReason(n->op()));
    try {
      fn(ctx, *n);
    } catch (const ir::DiagnosticError &) {
      throw;
    } catch (const Error &e) { // a rule of the loop IR or of SymInt: name the node
      ctx.decline(*n, e.what());
    }
  }
}

} // namespace

LoopProgram lowerGraph(const ir::Graph &graph) {
  LoopProgram program;
  LowerContext ctx(graph, program);
  lowerNodes(graph, program, ctx);
  for (const ir::Value *v : graph.outputs())
    lowerOutput(ctx, v);
  return program;
}

std::vector<Declined> findDeclines(const ir::Graph &graph) {
  // Each decline restarts the walk with that node's results as inputs: lowering is cheap next to
  // compiling, and a graph has few declines.
  std::vector<Declined> out;
  while (true) {
    LoopProgram program;
    LowerContext ctx(graph, program);
    try {
      lowerNodes(graph, program, ctx, out);
      return out;
    } catch (const ir::DiagnosticError &e) {
      const ir::Node *n = e.diagnostic().node;
      if (!n || std::any_of(out.begin(), out.end(), [&](const Declined &d) { return d.node == n; }))
        throw;
      out.push_back({n, e.diagnostic().message});
    }
  }
}

} // namespace kiln::passes::lower
