// torch.einsum: parse the equation into per-dimension labels, take diagonals for repeated
// labels, sum out labels used once, then contract operands pairwise with batched GEMMs.
#include "runtime/ops/linalg.h"
#include "runtime/ops/linalg_impl.h"

#include <algorithm>
#include <string_view>
#include <vector>

namespace kiln::ops {

using namespace detail;

namespace {

constexpr int kNumLetters = 52;

int labelOf(char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return 26 + (c - 'a');
  return -1;
}

std::string labelName(int l) {
  if (l >= kNumLetters)
    return "...";
  return std::string(1, l < 26 ? char('A' + l) : char('a' + l - 26));
}

/// One side of the equation: the letter labels and where the ellipsis sits (-1: none).
struct Term {
  std::vector<int> letters;
  int ellipsisAt = -1;
};

/// Parses one term; `who` is the operand index (or -1 for the output) for messages.
Term parseTerm(std::string_view s, size_t offset, int who) {
  Term term;
  std::string side = who < 0 ? "the output" : fmt::format("operand {}", who);
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '.') {
      KILN_CHECK(term.ellipsisAt < 0,
                 "einsum(): found '.' for {} for which an ellipsis was already found", side);
      KILN_CHECK(s.substr(i, 3) == "...",
                 "einsum(): found '.' for {} that is not part of any ellipsis", side);
      term.ellipsisAt = static_cast<int>(term.letters.size());
      i += 2;
      continue;
    }
    int l = labelOf(c);
    KILN_CHECK(l >= 0,
               "einsum(): invalid subscript given at index {} in the equation string, subscripts "
               "must be in [a-zA-Z]",
               offset + i);
    term.letters.push_back(l);
  }
  return term;
}

/// The label of every dim of an operand of rank `ndim`; ellipsis dims get labels
/// kNumLetters.. right-aligned against the widest ellipsis `ellDims`.
std::vector<int> dimLabels(const Term &term, int64_t ndim, int64_t ellDims) {
  std::vector<int> labels;
  int64_t covered = ndim - static_cast<int64_t>(term.letters.size());
  for (size_t i = 0; i <= term.letters.size(); ++i) {
    if (static_cast<int>(i) == term.ellipsisAt)
      for (int64_t j = 0; j < covered; ++j)
        labels.push_back(static_cast<int>(kNumLetters + ellDims - covered + j));
    if (i < term.letters.size())
      labels.push_back(term.letters[i]);
  }
  return labels;
}

/// An operand with one dim per distinct label.
struct Operand {
  Tensor t;
  std::vector<int> labels;
};

/// Collapses repeated labels into their diagonal (a strided view, no copy).
Operand takeDiagonals(const Tensor &t, const std::vector<int> &labels, int who) {
  Operand op;
  Shape sizes, strides;
  for (size_t d = 0; d < labels.size(); ++d) {
    auto it = std::find(op.labels.begin(), op.labels.end(), labels[d]);
    if (it == op.labels.end()) {
      op.labels.push_back(labels[d]);
      sizes.push_back(t.size(d));
      strides.push_back(t.stride(d));
      continue;
    }
    size_t k = it - op.labels.begin();
    KILN_CHECK(sizes[k] == t.size(d),
               "einsum(): subscript {} is repeated for operand {} but the sizes don't match, {} "
               "!= {}",
               labelName(labels[d]), who, t.size(d), sizes[k]);
    strides[k] += t.stride(d);
  }
  op.t = op.labels.size() == labels.size() ? t : t.asStrided(sizes, strides, t.storageOffset());
  return op;
}

bool contains(const std::vector<int> &v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

/// Sums `op` over the labels `drop` says to drop. Integer sums widen to int64 like torch.sum.
Operand sumOut(const Operand &op, const std::vector<bool> &drop) {
  std::vector<int64_t> order;
  Operand out;
  Shape keptSizes;
  int64_t kept = 1, dropped = 1;
  for (size_t d = 0; d < op.labels.size(); ++d)
    if (!drop[op.labels[d]]) {
      order.push_back(static_cast<int64_t>(d));
      out.labels.push_back(op.labels[d]);
      keptSizes.push_back(op.t.size(d));
      kept *= op.t.size(d);
    }
  for (size_t d = 0; d < op.labels.size(); ++d)
    if (drop[op.labels[d]]) {
      order.push_back(static_cast<int64_t>(d));
      dropped *= op.t.size(d);
    }
  DType dt = isFloating(op.t.dtype()) ? op.t.dtype() : DType::Int64;
  Tensor x = op.t.to(dt).permute(order).reshape({kept, dropped});
  Tensor ones = Tensor::empty({dropped, 1}, dt, op.t.device());
  ones.fill_(Scalar(int64_t{1}));
  out.t = batchedGemm(x, ones).view(keptSizes);
  return out;
}

/// Contracts a with b: labels in both that `needed` keeps become batch dims, the other shared
/// labels are summed by the GEMM.
Operand contract(Operand a, Operand b, const std::vector<bool> &needed) {
  std::vector<int> batch, left, contr, right;
  for (int l : a.labels)
    (contains(b.labels, l) ? (needed[l] ? batch : contr) : left).push_back(l);
  for (int l : b.labels)
    if (!contains(a.labels, l))
      right.push_back(l);
  if (a.t.dtype() != b.t.dtype() && !isFloating(a.t.dtype()) && !isFloating(b.t.dtype())) {
    a.t = a.t.to(DType::Int64); // an earlier integer sum widened one side
    b.t = b.t.to(DType::Int64);
  }
  checkGemmDTypes("einsum", a.t, b.t, "operands");
  auto pos = [](const Operand &o, int l) {
    return static_cast<int64_t>(std::find(o.labels.begin(), o.labels.end(), l) - o.labels.begin());
  };
  // A size-1 contracted dim broadcasts against the other operand's size.
  for (int l : contr) {
    int64_t pa = pos(a, l), pb = pos(b, l), sa = a.t.size(pa), sb = b.t.size(pb);
    Shape ea = a.t.sizes(), eb = b.t.sizes();
    ea[pa] = eb[pb] = std::max(sa, sb);
    a.t = a.t.expand(ea);
    b.t = b.t.expand(eb);
  }
  auto arrange = [&](const Operand &o, const std::vector<int> &mid, const std::vector<int> &last,
                     Shape &midSizes) {
    std::vector<int64_t> perm;
    Shape shape;
    int64_t rows = 1, cols = 1;
    for (int l : batch) {
      perm.push_back(pos(o, l));
      shape.push_back(o.t.size(perm.back()));
    }
    for (int l : mid) {
      perm.push_back(pos(o, l));
      midSizes.push_back(o.t.size(perm.back()));
      rows *= midSizes.back();
    }
    for (int l : last) {
      perm.push_back(pos(o, l));
      cols *= o.t.size(perm.back());
    }
    shape.push_back(rows);
    shape.push_back(cols);
    return o.t.permute(perm).reshape(shape);
  };
  Shape leftSizes, rightSizes, unused;
  Tensor ta = arrange(a, left, contr, leftSizes);
  Tensor tb = arrange(b, contr, right, unused);
  for (int l : right)
    rightSizes.push_back(b.t.size(pos(b, l)));
  Tensor r = batchedGemm(ta, tb);
  Shape outSizes(r.sizes().begin(), r.sizes().end() - 2);
  outSizes.insert(outSizes.end(), leftSizes.begin(), leftSizes.end());
  outSizes.insert(outSizes.end(), rightSizes.begin(), rightSizes.end());
  Operand out{r.view(outSizes), batch};
  out.labels.insert(out.labels.end(), left.begin(), left.end());
  out.labels.insert(out.labels.end(), right.begin(), right.end());
  return out;
}

/// The parsed equation: each operand's per-dim labels and the output labels.
struct Equation {
  std::vector<std::vector<int>> inputs;
  std::vector<int> output;
  int numLabels = kNumLetters;
};

Equation parseEquation(const std::string &equation, std::span<const Tensor> operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ')
      eq += c;
  size_t arrow = eq.find("->");
  std::string_view lhs = std::string_view(eq).substr(0, arrow);
  std::vector<Term> terms;
  for (size_t start = 0, i = 0; i <= lhs.size(); ++i)
    if (i == lhs.size() || lhs[i] == ',') {
      KILN_CHECK(terms.size() < operands.size(),
                 "einsum(): fewer operands were provided than specified in the equation");
      terms.push_back(
          parseTerm(lhs.substr(start, i - start), start, static_cast<int>(terms.size())));
      start = i + 1;
    }
  KILN_CHECK(terms.size() == operands.size(),
             "einsum(): more operands were provided than specified in the equation");
  int64_t ellDims = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    int64_t nl = static_cast<int64_t>(terms[i].letters.size()), nd = operands[i].dim();
    if (terms[i].ellipsisAt < 0)
      KILN_CHECK(nl == nd,
                 "einsum(): the number of subscripts in the equation ({}) does not match the "
                 "number of dimensions ({}) for operand {} and no ellipsis was given",
                 nl, nd, i);
    KILN_CHECK(nl <= nd,
               "einsum(): the number of subscripts in the equation ({}) is more than the number "
               "of dimensions ({}) for operand {}",
               nl, nd, i);
    if (terms[i].ellipsisAt >= 0)
      ellDims = std::max(ellDims, nd - nl);
  }
  Equation e;
  e.numLabels = kNumLetters + static_cast<int>(ellDims);
  std::vector<int> count(e.numLabels, 0);
  bool anyEllipsis = false;
  for (size_t i = 0; i < terms.size(); ++i) {
    e.inputs.push_back(dimLabels(terms[i], operands[i].dim(), ellDims));
    anyEllipsis = anyEllipsis || terms[i].ellipsisAt >= 0;
    for (int l : e.inputs.back())
      ++count[l];
  }
  if (arrow == std::string::npos) {
    // Implicit output: the broadcast dims, then labels used exactly once, alphabetically.
    for (int64_t j = 0; anyEllipsis && j < ellDims; ++j)
      e.output.push_back(static_cast<int>(kNumLetters + j));
    for (int l = 0; l < kNumLetters; ++l)
      if (count[l] == 1)
        e.output.push_back(l);
    return e;
  }
  Term out = parseTerm(std::string_view(eq).substr(arrow + 2), arrow + 2, -1);
  for (size_t i = 0; i < out.letters.size(); ++i) {
    int l = out.letters[i];
    KILN_CHECK(count[l] > 0,
               "einsum(): output subscript {} does not appear in the equation for any input "
               "operand",
               labelName(l));
    KILN_CHECK(std::count(out.letters.begin(), out.letters.end(), l) == 1,
               "einsum(): output subscript {} appears more than once in the output", labelName(l));
  }
  e.output = dimLabels(
      out, static_cast<int64_t>(out.letters.size()) + (out.ellipsisAt >= 0 ? ellDims : 0), ellDims);
  return e;
}

/// Checks that every label has one size across operands, up to broadcasting of size 1.
void checkLabelSizes(const std::vector<Operand> &ops, int numLabels) {
  std::vector<int64_t> seen(numLabels, -1);
  for (size_t i = 0; i < ops.size(); ++i)
    for (size_t d = 0; d < ops[i].labels.size(); ++d) {
      int l = ops[i].labels[d];
      int64_t s = ops[i].t.size(d);
      if (seen[l] < 0 || seen[l] == 1) {
        seen[l] = s;
        continue;
      }
      KILN_CHECK(s == 1 || s == seen[l],
                 "einsum(): subscript {} has size {} for operand {} which does not broadcast "
                 "with previously seen size {}",
                 labelName(l), s, i, seen[l]);
    }
}

} // namespace

Tensor einsum(const std::string &equation, std::span<const Tensor> operands) {
  KILN_CHECK(!operands.empty(), "einsum(): must provide at least one operand");
  for (size_t i = 1; i < operands.size(); ++i)
    KILN_CHECK(operands[i].dtype() == operands[0].dtype(),
               "einsum(): expected all operands to have the same dtype, but operand 0 is {} and "
               "operand {} is {}",
               dtypeName(operands[0].dtype()), i, dtypeName(operands[i].dtype()));
  Equation e = parseEquation(equation, operands);
  std::vector<Operand> ops;
  for (size_t i = 0; i < operands.size(); ++i)
    ops.push_back(takeDiagonals(operands[i], e.inputs[i], static_cast<int>(i)));
  checkLabelSizes(ops, e.numLabels);
  // lastUse[l]: the last operand that has label l; labels of the output are never dropped.
  std::vector<int> lastUse(e.numLabels, -1), uses(e.numLabels, 0);
  for (size_t i = 0; i < ops.size(); ++i)
    for (int l : ops[i].labels) {
      lastUse[l] = static_cast<int>(i);
      ++uses[l];
    }
  for (int l : e.output)
    lastUse[l] = static_cast<int>(ops.size());
  for (Operand &op : ops) {
    std::vector<bool> drop(e.numLabels, false);
    bool any = false;
    for (int l : op.labels)
      any |= drop[l] = uses[l] == 1 && lastUse[l] < static_cast<int>(ops.size());
    if (any)
      op = sumOut(op, drop);
  }
  Operand cur = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    std::vector<bool> needed(e.numLabels, false);
    for (int l = 0; l < e.numLabels; ++l)
      needed[l] = lastUse[l] > static_cast<int>(i);
    cur = contract(cur, ops[i], needed);
  }
  std::vector<int64_t> perm;
  for (int l : e.output)
    perm.push_back(static_cast<int64_t>(std::find(cur.labels.begin(), cur.labels.end(), l) -
                                        cur.labels.begin()));
  return cur.t.permute(perm);
}

} // namespace kiln::ops
