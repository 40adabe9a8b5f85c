// Tensor's view methods and copies with autograd history, and the in-place protocol.
//
// A view's rule maps the gradient of the view back onto its base's geometry. A recorded view
// remembers its base (AutogradMeta::viewBase), so that an in-place write through it rewrites the
// base's history (copy_slices.cc).
#include "autograd/derivatives.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/copy.h"
#include "runtime/error.h"

#include <algorithm>

namespace kiln::autograd {
namespace {
using B = EagerBuilder;

/// Records view `out` of self with `rule` (a rule lambda) and marks it a view of self's base.
template <class Rule>
Tensor recordView(const char *name, const Tensor &self, Tensor out, Rule rule) {
  if (record(name, {&self}, out, [&](const NodePtr &) { return rule; }))
    markView(out, self);
  return out;
}

/// The rule of every view that only changes sizes: reshape the gradient back.
auto reshapeBack(const Tensor &self) {
  return [sizes = self.sizes()](B &b, const Node &, Grads &g) {
    return Grads{b.reshape(g[0], sizes)};
  };
}

auto transposeBack(int64_t d0, int64_t d1) {
  return [d0, d1](B &b, const Node &, Grads &g) { return Grads{b.transpose(g[0], d0, d1)}; };
}

auto sliceBack(const Tensor &self, int64_t dim, int64_t start, int64_t end, int64_t step,
               bool selected) {
  return [sizes = self.sizes(), dim, start, end, step, selected](B &b, const Node &, Grads &g) {
    Tensor gs = selected ? b.unsqueeze(g[0], dim) : g[0];
    return Grads{b.sliceBackward(gs, sizes, dim, start, end, step)};
  };
}
} // namespace

Tensor view(const Tensor &self, IntList sizes) {
  return recordView("ViewBackward0", self, self.view(sizes), reshapeBack(self));
}
Tensor reshape(const Tensor &self, IntList sizes) {
  return recordView("ViewBackward0", self, self.reshape(sizes), reshapeBack(self));
}
Tensor flatten(const Tensor &self, int64_t startDim, int64_t endDim) {
  return recordView("ViewBackward0", self, self.flatten(startDim, endDim), reshapeBack(self));
}
Tensor unflatten(const Tensor &self, int64_t dim, IntList sizes) {
  return recordView("ViewBackward0", self, self.unflatten(dim, sizes), reshapeBack(self));
}
Tensor squeeze(const Tensor &self) {
  return recordView("SqueezeBackward0", self, self.squeeze(), reshapeBack(self));
}
Tensor squeeze(const Tensor &self, IntList dims) {
  return recordView("SqueezeBackward1", self, self.squeeze(dims), reshapeBack(self));
}
Tensor unsqueeze(const Tensor &self, int64_t dim) {
  return recordView("UnsqueezeBackward0", self, self.unsqueeze(dim), reshapeBack(self));
}

Tensor transpose(const Tensor &self, int64_t d0, int64_t d1) {
  return recordView("TransposeBackward0", self, self.transpose(d0, d1), transposeBack(d0, d1));
}
Tensor t(const Tensor &self) {
  return recordView("TBackward0", self, self.t(), transposeBack(0, self.dim() < 2 ? 0 : 1));
}
Tensor mT(const Tensor &self) {
  return recordView("TransposeBackward0", self, self.mT(), transposeBack(-2, -1));
}

Tensor permute(const Tensor &self, IntList dims) {
  Tensor out = self.permute(dims);
  Shape inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i)
    inverse[wrapDim(dims[i], self.dim(), "permute")] = static_cast<int64_t>(i);
  return recordView("PermuteBackward0", self, out, [inverse](B &b, const Node &, Grads &g) {
    return Grads{b.permute(g[0], inverse)};
  });
}

Tensor expand(const Tensor &self, IntList sizes) {
  return recordView("ExpandBackward0", self, self.expand(sizes),
                    [x = rules::infoOf<B>(self)](B &b, const Node &, Grads &g) {
                      return Grads{b.reduceTo(g[0], x.sizes, x.dtype)};
                    });
}

Tensor slice(const Tensor &self, int64_t dim, std::optional<int64_t> start,
             std::optional<int64_t> end, int64_t step) {
  Tensor out = self.slice(dim, start, end, step);
  if (!anyRequiresGrad({&self}))
    return out;
  // The same normalization as Tensor::slice, for the rule.
  int64_t d = wrapDim(dim, self.dim(), "slice");
  int64_t n = self.size(d);
  int64_t s = start.value_or(0), e = end.value_or(n);
  s = std::clamp<int64_t>(s < 0 ? s + n : s, 0, n);
  e = std::clamp<int64_t>(e < 0 ? e + n : e, s, n);
  return recordView("SliceBackward0", self, out, sliceBack(self, d, s, e, step, false));
}

Tensor narrow(const Tensor &self, int64_t dim, int64_t start, int64_t length) {
  Tensor out = self.narrow(dim, start, length);
  if (!anyRequiresGrad({&self}))
    return out;
  int64_t d = wrapDim(dim, self.dim(), "narrow");
  int64_t s = start < 0 ? start + self.size(d) : start;
  return recordView("SliceBackward0", self, out, sliceBack(self, d, s, s + length, 1, false));
}

Tensor select(const Tensor &self, int64_t dim, int64_t index) {
  Tensor out = self.select(dim, index);
  if (!anyRequiresGrad({&self}))
    return out;
  int64_t d = wrapDim(dim, self.dim(), "select");
  int64_t i = index < 0 ? index + self.size(d) : index;
  return recordView("SelectBackward0", self, out, sliceBack(self, d, i, i + 1, 1, true));
}

/// The slices of `self` along dim, views recorded by one node whose backward stacks their
/// gradients: an RNN's per-step inputs, unbound once, cost one pass in the backward, where a
/// select per step would add a zero-padded copy of self per step (quadratic in the length).
std::vector<Tensor> unbind(const Tensor &self, int64_t dim) {
  if (!anyRequiresGrad({&self}))
    return self.unbind(dim);
  int64_t d = wrapDim(dim, self.dim(), "unbind");
  std::vector<Tensor> parts = self.unbind(d);
  const Tensor *inputs[] = {&self};
  bool recorded = record("UnbindBackward0", inputs, parts, [&](const NodePtr &) {
    Shape piece = self.sizes();
    piece.erase(piece.begin() + d);
    return [d, piece, n = parts.size(), dt = self.dtype()](B &b, const Node &, Grads &g) {
      std::vector<Tensor> pieces;
      for (size_t i = 0; i < n; ++i)
        pieces.push_back(
            b.unsqueeze(i < g.size() && g[i].defined() ? g[i] : b.zeros(piece, dt), d));
      return Grads{b.cat(pieces, d)};
    };
  });
  if (recorded) // the parts are views of self's base (an in-place write rewrites it)
    for (Tensor &p : parts)
      markView(p, self, true);
  return parts;
}

Tensor asStrided(const Tensor &self, IntList sizes, IntList strides,
                 std::optional<int64_t> offset) {
  KILN_CHECK_KIND(NotImplemented, !anyRequiresGrad({&self}),
                  "as_strided: the derivative of as_strided is not implemented yet; use view, "
                  "expand, slice or unfold-style indexing on a tensor that requires grad");
  return self.asStrided(sizes, strides, offset);
}

namespace {

/// Records `out`, a copy of `self`, as clone's: the gradient passes through.
Tensor recordedClone(const Tensor &self, Tensor out) {
  record("CloneBackward0", {&self}, out,
         [&](const NodePtr &) { return [](B &, const Node &, Grads &g) { return Grads{g[0]}; }; });
  return out;
}

} // namespace

Tensor clone(const Tensor &self) { return recordedClone(self, self.clone()); }

Tensor contiguous(const Tensor &self) { return self.isContiguous() ? self : clone(self); }

namespace {

/// Whether `t` is dense and non-overlapping: a permutation of a row-major layout (a transposed or
/// permuted tensor), whose strides a preserve_format copy keeps.
bool isPermutedDense(const Tensor &t) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) != 1)
      dims.push_back(d);
  std::sort(dims.begin(), dims.end(),
            [&](int64_t a, int64_t b) { return t.stride(a) < t.stride(b); });
  int64_t expected = 1;
  for (int64_t d : dims) {
    if (t.stride(d) != expected)
      return false;
    expected *= t.size(d);
  }
  return true;
}

} // namespace

Tensor clonePreservingLayout(const Tensor &self) {
  if (self.isContiguous() || self.numel() == 0 || !self.isCpu() || !isPermutedDense(self))
    return clone(self);
  Tensor out = Tensor::empty({self.numel()}, self.dtype(), self.device())
                   .asStrided(self.sizes(), self.strides(), 0);
  copyInto(out, self);
  return recordedClone(self, out);
}

Tensor to(const Tensor &self, DType dtype, bool copy) {
  if (self.dtype() == dtype && !copy)
    return self;
  Tensor out = self.to(dtype, copy);
  if (!isFloating(dtype)) // an integer or bool result carries no gradient, as in torch
    return out;
  record("ToCopyBackward0", {&self}, out, [&](const NodePtr &) {
    return [dt = self.dtype()](B &b, const Node &, Grads &g) { return Grads{b.cast(g[0], dt)}; };
  });
  return out;
}

Tensor to(const Tensor &self, Device device, bool copy) {
  if (self.device() == device && !copy)
    return self;
  Tensor out = self.to(device, copy);
  record("ToCopyBackward0", {&self}, out, [&](const NodePtr &) {
    return [dev = self.device()](B &, const Node &, Grads &g) { return Grads{g[0].to(dev)}; };
  });
  return out;
}

Tensor inplaceOperand(const Tensor &self, std::initializer_list<const Tensor *> others) {
  bool any = anyRequiresGrad({&self});
  for (const Tensor *t : others)
    any = any || anyRequiresGrad({t});
  if (!any)
    return self;
  checkInplace(self, "in-place op");
  return clone(self);
}

Tensor &applyInplace(const char *op, Tensor &self, const Tensor &result) {
  const bool tracked = isGradEnabled() && (result.requiresGrad() || self.requiresGrad());
  if (tracked)
    checkInplace(self, op);
  if (AutogradMeta *m = metaOrNull(self); tracked && m && m->viewBase.defined()) {
    writeThroughView(op, m->viewBase, self, result);
    return self;
  }
  kiln::ops::inplace(op, self, result);
  if (!tracked)
    return self;
  if (Node *fn = gradFn(result)) {
    setHistory(self, fn->shared_from_this(), meta(result).outputNr);
  } else {
    // The new value does not depend on anything that requires grad: self's old history gets
    // no gradient from here on, but self still requires grad (as torch's copy_ of a constant).
    Tensor old = self;
    Tensor fresh = detach(self);
    record("FillBackward0", {&old}, fresh, [&](const NodePtr &) {
      return [](B &, const Node &, Grads &) { return Grads{Tensor()}; };
    });
    setHistory(self, meta(fresh).gradFn, 0);
  }
  return self;
}

} // namespace kiln::autograd

namespace kiln::autograd::ops {

std::vector<Tensor> meshgrid(std::span<const Tensor> tensors, const std::string &indexing) {
  std::vector<Tensor> grids = kiln::ops::meshgrid(tensors, indexing); // checks, no-grad values
  std::vector<const Tensor *> inputs;
  for (const Tensor &t : tensors)
    inputs.push_back(&t);
  bool any = false;
  for (const Tensor *t : inputs)
    any = any || anyRequiresGrad({t});
  if (!any)
    return grids;
  // Each grid is its input viewed along its own dim and expanded: views, as torch's.
  const Shape sizes = grids.front().sizes();
  const bool xy = indexing == "xy" && tensors.size() >= 2;
  for (size_t i = 0; i < tensors.size(); ++i) {
    Shape shape(sizes.size(), 1);
    size_t dim = xy && i < 2 ? 1 - i : i;
    shape[dim] = sizes[dim];
    grids[i] = autograd::expand(autograd::reshape(tensors[i], shape), sizes);
  }
  return grids;
}

} // namespace kiln::autograd::ops

namespace kiln::autograd::ops {

std::vector<Tensor> broadcastTensors(std::span<const Tensor> tensors) {
  std::vector<Tensor> out = kiln::ops::broadcastTensors(tensors); // checks, no-grad views
  for (size_t i = 0; i < tensors.size(); ++i)
    if (anyRequiresGrad({&tensors[i]}))
      out[i] = autograd::expand(tensors[i], out[i].sizes());
  return out;
}

Tensor movedim(const Tensor &self, IntList source, IntList destination) {
  Tensor out = kiln::ops::movedim(self, source, destination); // checks, and the no-grad view
  if (!anyRequiresGrad({&self}))
    return out;
  // torch's order: the moved dims at their destinations, the others in order around them
  const int64_t n = self.dim();
  if (n == 0) // nothing moves: a view of self with its history
    return autograd::permute(self, {});
  auto wrap = [n](int64_t d) { return d < 0 ? d + n : d; };
  Shape perm(n, -1);
  std::vector<bool> moved(n, false);
  for (size_t i = 0; i < source.size(); ++i) {
    perm[wrap(destination[i])] = wrap(source[i]);
    moved[wrap(source[i])] = true;
  }
  int64_t next = 0;
  for (int64_t &p : perm) {
    if (p >= 0)
      continue;
    while (moved[next])
      ++next;
    p = next++;
  }
  return autograd::permute(self, perm);
}

Tensor maskedSelect(const Tensor &self, const Tensor &mask) {
  Tensor out = kiln::ops::maskedSelect(self, mask); // checks, and the no-grad values
  if (!anyRequiresGrad({&self}))
    return out;
  // the elements of self (broadcast with the mask) where it is set, as a differentiable gather
  Shape shape = broadcastShapes(self.sizes(), mask.sizes(), "masked_select");
  Tensor flat = autograd::reshape(autograd::expand(self, shape), {-1});
  Tensor where = kiln::ops::nonzero(mask.expand(shape).reshape({-1})).reshape({-1});
  return indexSelect(flat, 0, where);
}

} // namespace kiln::autograd::ops
