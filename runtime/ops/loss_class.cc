// Classification losses: nll_loss and cross_entropy (log_softmax fused with the nll gather, or
// with the probability-weighted sum for soft targets). The class dim is dim 1 (dim 0 for an
// unbatched (C,) input); every other dim indexes a sample.
#include "runtime/ops/loss.h"

#include "runtime/device_ops.h"

#include "runtime/ops/elementwise_impl.h"
#include "runtime/ops/loss_impl.h"
#include "runtime/ops/softmax_impl.h"

#include <algorithm>

namespace kiln::ops {

using namespace detail;

namespace {

/// Samples of a class loss: `rows` = N * d1 * ... , C classes, `inner` = d1 * ... (the stride
/// of the class dim), and the shape of one value per sample.
struct ClassGeom {
  int64_t rows, classes, inner;
  Shape sampleShape;
};

ClassGeom inputGeom(const char *op, const Tensor &input) {
  KILN_CHECK_KIND(Value, input.dim() >= 1, "{}: expected 1 or more dimensions (got 0)", op);
  if (input.dim() == 1)
    return {1, input.size(0), 1, {}};
  Shape sample = input.sizes();
  sample.erase(sample.begin() + 1);
  int64_t inner = 1;
  for (int64_t d = 2; d < input.dim(); ++d)
    inner *= input.size(d);
  return {numelOf(sample), input.size(1), inner, sample};
}

/// Checks class-index targets against the input's shape (torch's wording and error kinds).
ClassGeom indexTargetGeom(const char *op, const Tensor &input, const Tensor &target) {
  ClassGeom g = inputGeom(op, input);
  KILN_CHECK(target.dtype() == DType::Int64 || target.dtype() == DType::UInt8,
             "{}: expected target dtype to be int64 or uint8 (class indices), but got {}", op,
             dtypeName(target.dtype()));
  if (input.dim() == 1) {
    KILN_CHECK_KIND(Value, target.dim() == 0 || (target.dim() == 1 && target.size(0) == 1),
                    "{}: for 1D input, the target must be 0-d or have size 1, but got target of "
                    "shape {}",
                    op, target.shapeStr());
    g.sampleShape = target.sizes();
    return g;
  }
  KILN_CHECK_KIND(Value, target.dim() >= 1 && target.size(0) == input.size(0),
                  "{}: expected input batch_size ({}) to match target batch_size ({}) (input of "
                  "shape {}, target of shape {})",
                  op, input.size(0), target.dim() ? target.size(0) : 0, input.shapeStr(),
                  target.shapeStr());
  KILN_CHECK(target.sizes() == g.sampleShape,
             "{}: expected target of shape {} for input of shape {}, but got target of shape {}",
             op, shapeToString(g.sampleShape), input.shapeStr(), target.shapeStr());
  return g;
}

/// Class indices as int64, each in [0, C) or equal to ignoreIndex (IndexError otherwise).
std::vector<int64_t> checkedTargets(const char *op, const Tensor &target, int64_t classes,
                                    int64_t ignoreIndex) {
  Tensor t = target.to(DType::Int64).contiguous();
  std::vector<int64_t> out(t.data<int64_t>(), t.data<int64_t>() + t.numel());
  for (int64_t v : out)
    KILN_CHECK_KIND(Index, v == ignoreIndex || (v >= 0 && v < classes),
                    "{}: target {} is out of bounds: expected a class index in [0, {}) or "
                    "ignore_index ({})",
                    op, v, classes, ignoreIndex);
  return out;
}

/// Per-class weights as doubles (all ones when absent).
std::vector<double> classWeights(const char *op, const Tensor &weight, int64_t classes,
                                 const Tensor &input, bool sameDType) {
  if (!weight.defined())
    return std::vector<double>(classes, 1.0);
  KILN_CHECK(weight.dim() == 1 && weight.numel() == classes,
             "{}: weight tensor should be defined either for all {} classes or no classes but "
             "got weight tensor of shape: {}",
             op, classes, weight.shapeStr());
  if (sameDType)
    KILN_CHECK(weight.dtype() == input.dtype(),
               "{}: expected weight of the input's dtype {}, but got {}", op,
               dtypeName(input.dtype()), dtypeName(weight.dtype()));
  Tensor w = weight.to(DType::Float64).contiguous();
  return std::vector<double>(w.data<double>(), w.data<double>() + classes);
}

/// The input with its class dim moved last, contiguous: one row of C logits per sample.
Tensor classesLast(const Tensor &t) {
  if (t.dim() <= 2)
    return t.contiguous();
  Shape perm;
  perm.push_back(0);
  for (int64_t d = 2; d < t.dim(); ++d)
    perm.push_back(d);
  perm.push_back(1);
  return t.permute(perm).contiguous();
}

/// log(sum(exp(x))) of one row, shifted by the row max. float rows use the vectorizable fastExp
/// with the sum in double lanes; NaN anywhere gives NaN, an infinite max is returned as is.
template <typename T> double logSumExp(const T *x, int64_t n) {
  using A = NormAcc<T>;
  constexpr int kLanes = 16;
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t i = 0; i < n; ++i)
    m = static_cast<A>(x[i]) > m ? static_cast<A>(x[i]) : m; // NaN reaches the sum instead
  if (std::isinf(m)) { // all -inf, or some +inf: the max is the answer unless NaN is present
    bool nan = std::any_of(x, x + n, [](T v) { return std::isnan(static_cast<A>(v)); });
    return nan ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(m);
  }
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lanes[l] += fastExp(static_cast<A>(x[i + l]) - m);
  double s = 0;
  for (; i < n; ++i)
    s += fastExp(static_cast<A>(x[i]) - m);
  for (double l : lanes)
    s += l;
  return static_cast<double>(m) + std::log(s);
}

/// log_softmax of one logit given its row's logsumexp, rounded to the input dtype as torch's
/// log_softmax tensor is.
template <typename T> double logProb(T x, double lse) {
  using A = NormAcc<T>;
  return widen(static_cast<T>(static_cast<A>(x) - static_cast<A>(lse)));
}

/// Totals of a class loss: the summed loss and the summed weight of the counted samples.
struct Totals {
  double loss = 0, weight = 0;
};

Tensor finishClassLoss(const std::vector<double> &loss, const Totals &tot, const ClassGeom &g,
                       Reduction reduction, DType out) {
  if (reduction == Reduction::None)
    return rowsToTensor(loss, g.sampleShape, out);
  if (reduction == Reduction::Sum)
    return scalarResult(tot.loss, out);
  return scalarResult(
      tot.weight == 0 ? std::numeric_limits<double>::quiet_NaN() : tot.loss / tot.weight, out);
}

/// Cross entropy with class-index targets for one dtype; see crossEntropy.
template <typename T>
Totals indexCrossEntropy(const Tensor &x, const std::vector<int64_t> &targets,
                         const std::vector<double> &w, int64_t classes, int64_t ignoreIndex,
                         double smoothing, std::vector<double> &loss) {
  const T *xd = x.data<T>();
  const int64_t rows = static_cast<int64_t>(targets.size());
  std::vector<double> rowWeight(rows);
  parallelFor(0, rows, rowGrain(classes), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = targets[r];
      if (t == ignoreIndex) {
        loss[r] = rowWeight[r] = 0;
        continue;
      }
      const T *row = xd + r * classes;
      double lse = logSumExp(row, classes);
      double v = -w[t] * logProb(row[t], lse) * (1.0 - smoothing);
      if (smoothing > 0) {
        double smooth = 0;
        for (int64_t c = 0; c < classes; ++c)
          smooth -= w[c] * logProb(row[c], lse);
        v += smoothing / classes * smooth;
      }
      loss[r] = v;
      rowWeight[r] = w[t];
    }
  });
  Totals tot;
  for (int64_t r = 0; r < rows; ++r) {
    tot.loss += loss[r];
    tot.weight += rowWeight[r];
  }
  return tot;
}

/// Cross entropy with class-probability targets: x in the input dtype, t (already smoothed) in
/// double, both with classes last.
template <typename T>
double probCrossEntropy(const Tensor &x, const Tensor &t, const std::vector<double> &w,
                        int64_t rows, int64_t classes, std::vector<double> &loss) {
  const T *xd = x.data<T>();
  const double *td = t.data<double>();
  parallelFor(0, rows, rowGrain(classes), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T *row = xd + r * classes;
      const double *trow = td + r * classes;
      double lse = logSumExp(row, classes);
      double v = 0;
      for (int64_t c = 0; c < classes; ++c)
        v -= w[c] * trow[c] * logProb(row[c], lse);
      loss[r] = v;
    }
  });
  double total = 0;
  for (double v : loss)
    total += v;
  return total;
}

/// target * (1 - smoothing) + smoothing / C as float64, rounded like torch's two tensor ops in
/// the target's dtype: the product uses the scalar at compute precision, the sum the scalar
/// rounded to the dtype.
Tensor smoothTargets(const Tensor &target, double smoothing, int64_t classes) {
  Tensor src = target.contiguous();
  Tensor out = Tensor::empty(target.sizes(), DType::Float64);
  dispatchNormFloat("cross_entropy", target.dtype(), [&]<typename T>() {
    using A = NormAcc<T>;
    const A keep = static_cast<A>(1.0 - smoothing);
    const A uniform = static_cast<A>(static_cast<T>(smoothing / static_cast<double>(classes)));
    const T *p = src.data<T>();
    double *o = out.data<double>();
    for (int64_t i = 0, n = src.numel(); i < n; ++i)
      o[i] = widen(
          static_cast<T>(static_cast<A>(static_cast<T>(static_cast<A>(p[i]) * keep)) + uniform));
  });
  return out;
}

Tensor probTargetCrossEntropy(const Tensor &input, const Tensor &target, const Tensor &weight,
                              Reduction reduction, int64_t ignoreIndex, double smoothing) {
  const char *op = "cross_entropy";
  KILN_CHECK(isFloating(target.dtype()),
             "{}: expected floating point type for target with class probabilities, got {}", op,
             dtypeName(target.dtype()));
  KILN_CHECK(ignoreIndex < 0, "{}: ignore_index is not supported for floating point target", op);
  ClassGeom g = inputGeom(op, input);
  DType out =
      weight.defined() ? resultTypeOf({input, target, weight}) : resultTypeOf({input, target});
  std::vector<double> w = classWeights(op, weight, g.classes, input, false);
  Tensor x = classesLast(input);
  Tensor t = classesLast(smoothing > 0 ? smoothTargets(target, smoothing, g.classes)
                                       : target.to(DType::Float64));
  std::vector<double> loss(g.rows);
  double total = dispatchNormFloat(op, input.dtype(), [&]<typename T>() {
    return probCrossEntropy<T>(x, t, w, g.rows, g.classes, loss);
  });
  Totals tot{total, static_cast<double>(g.rows)};
  return finishClassLoss(loss, tot, g, reduction, out);
}

} // namespace

namespace {

const char *reductionName(Reduction r) {
  return r == Reduction::None ? "none" : r == Reduction::Sum ? "sum" : "mean";
}

/// A class loss on a device: the graph op, with its weight when given.
Tensor deviceClassLoss(const char *op, const Tensor &input, const Tensor &target,
                       const Tensor &weight, std::string attrs) {
  if (weight.defined())
    return deviceOp(op, {input, target, weight}, attrs);
  return deviceOp(op, {input, target}, attrs);
}

} // namespace

Tensor nllLoss(const Tensor &input, const Tensor &target, const Tensor &weight, Reduction reduction,
               int64_t ignoreIndex) {
  if (onDevice({&input, &target, &weight}))
    return deviceClassLoss("nll_loss", input, target, weight,
                           fmt::format("ignore_index = {}, reduction = \"{}\"", ignoreIndex,
                                       reductionName(reduction)));
  const char *op = "nll_loss";
  ClassGeom g = indexTargetGeom(op, input, target);
  checkFloatInput(op, input);
  std::vector<double> w = classWeights(op, weight, g.classes, input, true);
  std::vector<int64_t> targets = checkedTargets(op, target, g.classes, ignoreIndex);
  Tensor x = input.contiguous();
  std::vector<double> loss(targets.size());
  Totals tot;
  dispatchNormFloat(op, input.dtype(), [&]<typename T>() {
    const T *xd = x.data<T>();
    for (size_t s = 0; s < targets.size(); ++s) {
      const int64_t t = targets[s];
      if (t == ignoreIndex) {
        loss[s] = 0;
        continue;
      }
      const int64_t n = static_cast<int64_t>(s) / g.inner, i = static_cast<int64_t>(s) % g.inner;
      loss[s] = -w[t] * widen(xd[(n * g.classes + t) * g.inner + i]);
      tot.loss += loss[s];
      tot.weight += w[t];
    }
  });
  return finishClassLoss(loss, tot, g, reduction, input.dtype());
}

Tensor crossEntropy(const Tensor &input, const Tensor &target, const Tensor &weight,
                    Reduction reduction, int64_t ignoreIndex, double labelSmoothing) {
  if (onDevice({&input, &target, &weight})) {
    std::string attrs =
        fmt::format("ignore_index = {}, reduction = \"{}\"", ignoreIndex, reductionName(reduction));
    if (labelSmoothing != 0) // a float literal: the text always has a point or an exponent
      attrs += fmt::format(", label_smoothing = {:#}", labelSmoothing);
    return deviceClassLoss("cross_entropy", input, target, weight, attrs);
  }
  const char *op = "cross_entropy";
  KILN_CHECK(labelSmoothing <= 1.0, "{}: label_smoothing must be between 0.0 and 1.0. Got: {}", op,
             labelSmoothing);
  inputGeom(op, input);
  checkFloatInput(op, input);
  if (input.sizes() == target.sizes())
    return probTargetCrossEntropy(input, target, weight, reduction, ignoreIndex, labelSmoothing);
  ClassGeom g = indexTargetGeom(op, input, target);
  std::vector<double> w = classWeights(op, weight, g.classes, input, true);
  std::vector<int64_t> targets = checkedTargets(op, target, g.classes, ignoreIndex);
  Tensor x = classesLast(input);
  std::vector<double> loss(targets.size());
  double smoothing = labelSmoothing > 0 ? labelSmoothing : 0.0;
  Totals tot = dispatchNormFloat(op, input.dtype(), [&]<typename T>() {
    return indexCrossEntropy<T>(x, targets, w, g.classes, ignoreIndex, smoothing, loss);
  });
  return finishClassLoss(loss, tot, g, reduction, input.dtype());
}

} // namespace kiln::ops
