// The eager kernels of the op table's reduction, statistics, scan and sorting rows without a
// node kind (ir/ops.def KILN_EAGER_SPELLING: var/std, nansum, aminmax, sort/topk, median, unique,
// ...). Each entry reads its arguments by their position in the row's schema; the binding
// generator has already checked their types and applied the defaults.
#include "frontend/csrc/eager_kernels.h"

#include "frontend/csrc/py_convert.h"
#include "runtime/error.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/scan.h"
#include "runtime/ops/sort.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

/// The correction of var/std from torch's two spellings, `unbiased` (legacy) or `correction`,
/// at argument positions `unbiased` and `correction` (either may be None).
double correctionOf(const BoundArgs &a, int unbiased, int correction) {
  KILN_CHECK(a.isNone(unbiased) || a.isNone(correction),
             "{}: cannot specify both the unbiased and the correction arguments", a.opName());
  if (!a.isNone(unbiased))
    return a.toBool(unbiased) ? 1.0 : 0.0;
  return a.isNone(correction) ? 1.0 : a.scalar(correction).toDouble();
}

/// var/std(input, dim=None, unbiased=None, keepdim=False, *, correction=None).
template <Tensor (*F)(const Tensor &, const ops::DimList &, double, bool)>
Tensor statistic(const BoundArgs &a) {
  return F(a.tensor(0), a.optIntList(1), correctionOf(a, 2, 4), a.toBool(3));
}

/// var/std(input, unbiased): over every element.
template <Tensor (*F)(const Tensor &, const ops::DimList &, double, bool)>
Tensor statisticUnbiased(const BoundArgs &a) {
  return F(a.tensor(0), std::nullopt, a.toBool(1) ? 1.0 : 0.0, false);
}

template <bool Std> py::object statisticMean(const BoundArgs &a) {
  auto [v, mean] =
      ops::varMean(a.tensor(0), a.optIntList(1), correctionOf(a, 2, 4), a.toBool(3), Std);
  return py::make_tuple(v, mean);
}

template <bool Std> py::object statisticMeanUnbiased(const BoundArgs &a) {
  auto [v, mean] = ops::varMean(a.tensor(0), std::nullopt, a.toBool(1) ? 1.0 : 0.0, false, Std);
  return py::make_tuple(v, mean);
}

py::object named(const char *name, std::pair<Tensor, Tensor> r) {
  return returnType(name, std::move(r.first), std::move(r.second));
}

/// unique's result: the values alone, or a tuple with the requested inverse and counts.
py::object uniqueResult(const ops::UniqueResult &r, bool inverse, bool counts) {
  if (!inverse && !counts)
    return wrap(r.values);
  py::list out;
  out.append(wrap(r.values));
  if (inverse)
    out.append(wrap(r.inverse));
  if (counts)
    out.append(wrap(r.counts));
  return py::tuple(out);
}

// clang-format off
const EagerKernel kReduceKernels[] = {
    {std::nullopt, "nansum", [](const BoundArgs &a) {
       return ops::nansum(a.tensor(0), a.optIntList(1), a.toBool(2), a.optDType(3));
     }},
    {std::nullopt, "nanmean", [](const BoundArgs &a) {
       return ops::nanmean(a.tensor(0), a.optIntList(1), a.toBool(2), a.optDType(3));
     }},
    {std::nullopt, "aminmax", nullptr, nullptr, [](const BoundArgs &a) {
       return named("aminmax", ops::aminmax(a.tensor(0), a.optInt(1), a.toBool(2)));
     }},
    {std::nullopt, "count_nonzero", [](const BoundArgs &a) {
       return ops::countNonzero(a.tensor(0), a.optIntList(1));
     }},
    // Statistics: the full schema (5 arguments) and the legacy (input, unbiased) overload.
    {std::nullopt, "var", statistic<&ops::var>, nullptr, nullptr, 5},
    {std::nullopt, "var", statisticUnbiased<&ops::var>, nullptr, nullptr, 2},
    {std::nullopt, "std", statistic<&ops::stdDev>, nullptr, nullptr, 5},
    {std::nullopt, "std", statisticUnbiased<&ops::stdDev>, nullptr, nullptr, 2},
    {std::nullopt, "var_mean", nullptr, nullptr, statisticMean<false>, 5},
    {std::nullopt, "var_mean", nullptr, nullptr, statisticMeanUnbiased<false>, 2},
    {std::nullopt, "std_mean", nullptr, nullptr, statisticMean<true>, 5},
    {std::nullopt, "std_mean", nullptr, nullptr, statisticMeanUnbiased<true>, 2},
    // Scans with indices.
    {std::nullopt, "cummax", nullptr, nullptr, [](const BoundArgs &a) {
       return named("cummax", ops::cummax(a.tensor(0), a.toInt(1)));
     }},
    {std::nullopt, "cummin", nullptr, nullptr, [](const BoundArgs &a) {
       return named("cummin", ops::cummin(a.tensor(0), a.toInt(1)));
     }},
    // Sorting and selection.
    {std::nullopt, "sort", nullptr, nullptr, [](const BoundArgs &a) {
       return named("sort", ops::sort(a.tensor(0), a.toInt(1), a.toBool(2),
                                      !a.isNone(3) && a.toBool(3)));
     }},
    {std::nullopt, "msort", [](const BoundArgs &a) { return ops::sort(a.tensor(0), 0).first; }},
    {std::nullopt, "topk", nullptr, nullptr, [](const BoundArgs &a) {
       return named("topk", ops::topk(a.tensor(0), a.toInt(1), a.toInt(2), a.toBool(3),
                                      a.toBool(4)));
     }},
    {std::nullopt, "kthvalue", nullptr, nullptr, [](const BoundArgs &a) {
       return named("kthvalue", ops::kthvalue(a.tensor(0), a.toInt(1), a.toInt(2), a.toBool(3)));
     }},
    {std::nullopt, "median", [](const BoundArgs &a) { return ops::median(a.tensor(0)); },
     nullptr, nullptr, 1},
    {std::nullopt, "median", nullptr, nullptr, [](const BoundArgs &a) {
       return named("median", ops::medianDim(a.tensor(0), a.toInt(1), a.toBool(2)));
     }, 3},
    {std::nullopt, "nanmedian", [](const BoundArgs &a) { return ops::nanmedian(a.tensor(0)); },
     nullptr, nullptr, 1},
    {std::nullopt, "nanmedian", nullptr, nullptr, [](const BoundArgs &a) {
       return named("nanmedian", ops::nanmedianDim(a.tensor(0), a.toInt(1), a.toBool(2)));
     }, 3},
    {std::nullopt, "mode", nullptr, nullptr, [](const BoundArgs &a) {
       return named("mode", ops::mode(a.tensor(0), a.toInt(1), a.toBool(2)));
     }},
    // unique's results always come sorted, which torch allows for sorted=False too.
    {std::nullopt, "unique", nullptr, nullptr, [](const BoundArgs &a) {
       bool inverse = a.toBool(2), counts = a.toBool(3);
       return uniqueResult(ops::unique(a.tensor(0), a.optInt(4), inverse, counts), inverse,
                           counts);
     }},
    {std::nullopt, "unique_consecutive", nullptr, nullptr, [](const BoundArgs &a) {
       bool inverse = a.toBool(1), counts = a.toBool(2);
       return uniqueResult(ops::uniqueConsecutive(a.tensor(0), a.optInt(3), inverse, counts),
                           inverse, counts);
     }},
};
// clang-format on

} // namespace

std::span<const EagerKernel> reduceEagerKernels() { return kReduceKernels; }

} // namespace kiln::frontend
