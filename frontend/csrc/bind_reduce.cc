// Reductions, scans and sorting without an op-table row (var/std, nansum, aminmax, sort/topk,
// median, unique, ...): kiln.<op> functions and Tensor methods bound by hand. sum, mean, max,
// min, norm, softmax, cumsum, argsort, ... are bound from their ops.def rows (bind_op_table.cc).
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"
#include "runtime/error.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/scan.h"
#include "runtime/ops/softmax.h"
#include "runtime/ops/sort.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

using OptDType = std::optional<DType>;

/// Binds fn as kiln.name and as the Tensor method name (the same signature minus `input`).
template <typename Fn, typename... Extra>
void bindBoth(py::module_ &m, py::class_<Tensor> &t, const char *name, Fn fn,
              const Extra &...extra) {
  m.def(name, fn, py::arg("input"), extra...);
  t.def(name, fn, extra...);
}

/// correction from torch's two spellings: `unbiased` (legacy) or `correction`.
double toCorrection(const char *op, py::handle unbiased, py::handle correction) {
  KILN_CHECK(unbiased.is_none() || correction.is_none(),
             "{}: cannot specify both the unbiased and the correction arguments", op);
  if (!unbiased.is_none())
    return unbiased.cast<bool>() ? 1.0 : 0.0;
  return correction.is_none() ? 1.0 : toScalar(correction, op).toDouble();
}

/// var/std/var_mean/std_mean argument parsing: var(x, True) passes `unbiased` in dim's place.
template <typename Fn> auto varLike(const char *op, Fn fn) {
  return [op, fn](const Tensor &a, py::object dim, py::object unbiased, bool keepdim,
                  py::object correction) {
    if (PyBool_Check(dim.ptr())) {
      unbiased = dim;
      dim = py::none();
    }
    return fn(a, toDims(dim, op), toCorrection(op, unbiased, correction), keepdim);
  };
}

void bindSums(py::module_ &m, py::class_<Tensor> &t) {
  auto sumLike = [](auto fn, const char *op) {
    return [fn, op](const Tensor &a, py::object dim, bool keepdim, OptDType dtype) {
      return fn(a, toDims(dim, op), keepdim, dtype);
    };
  };
  auto args = [](auto &&bind, const char *name, auto fn) {
    bind(name, fn, py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
         py::arg("dtype") = py::none());
  };
  auto both = [&](const char *name, auto fn, auto... extra) { bindBoth(m, t, name, fn, extra...); };
  args(both, "nansum", sumLike(&ops::nansum, "nansum"));
  args(both, "nanmean", sumLike(&ops::nanmean, "nanmean"));
}

void bindExtremes(py::module_ &m, py::class_<Tensor> &t) {
  bindBoth(
      m, t, "aminmax",
      [](const Tensor &a, std::optional<int64_t> dim, bool keepdim) {
        auto [lo, hi] = ops::aminmax(a, dim, keepdim);
        return returnType("aminmax", lo, hi);
      },
      py::kw_only(), py::arg("dim") = py::none(), py::arg("keepdim") = false);
}

void bindStats(py::module_ &m, py::class_<Tensor> &t) {
  auto varArgs = [&](const char *name, auto fn, bool method) {
    auto f = varLike(name, fn);
    if (method)
      bindBoth(m, t, name, f, py::arg("dim") = py::none(), py::arg("unbiased") = py::none(),
               py::arg("keepdim") = false, py::kw_only(), py::arg("correction") = py::none());
    else
      m.def(name, f, py::arg("input"), py::arg("dim") = py::none(),
            py::arg("unbiased") = py::none(), py::arg("keepdim") = false, py::kw_only(),
            py::arg("correction") = py::none());
  };
  varArgs("var", &ops::var, true);
  varArgs("std", &ops::stdDev, true);
  varArgs(
      "var_mean",
      [](const Tensor &a, const ops::DimList &d, double c, bool k) {
        auto [v, mean] = ops::varMean(a, d, c, k, false);
        return py::make_tuple(v, mean);
      },
      false);
  varArgs(
      "std_mean",
      [](const Tensor &a, const ops::DimList &d, double c, bool k) {
        auto [v, mean] = ops::varMean(a, d, c, k, true);
        return py::make_tuple(v, mean);
      },
      false);
}

void bindLogical(py::module_ &m, py::class_<Tensor> &t) {
  bindBoth(
      m, t, "count_nonzero",
      [](const Tensor &a, py::object dim) {
        return ops::countNonzero(a, toDims(dim, "count_nonzero"));
      },
      py::arg("dim") = py::none());
  m.def(
      "_linalg_vector_norm",
      [](const Tensor &a, py::handle ord, py::object dim, bool keepdim, OptDType dtype) {
        return ops::vectorNorm(a, toScalar(ord, "linalg.vector_norm").toDouble(),
                               toDims(dim, "linalg.vector_norm"), keepdim, dtype);
      },
      py::arg("x"), py::arg("ord") = 2, py::arg("dim") = py::none(), py::arg("keepdim") = false,
      py::kw_only(), py::arg("dtype") = py::none());
}

/// Wraps an op returning (values, indices) so it returns kiln.return_types.<name>.
template <typename Fn> auto named(const char *name, Fn fn) {
  return [name, fn](auto &&...args) {
    auto [a, b] = fn(std::forward<decltype(args)>(args)...);
    return returnType(name, a, b);
  };
}

void bindScans(py::module_ &m, py::class_<Tensor> &t) {
  bindBoth(
      m, t, "cummax",
      [](const Tensor &a, int64_t dim) { return named("cummax", &ops::cummax)(a, dim); },
      py::arg("dim"));
  bindBoth(
      m, t, "cummin",
      [](const Tensor &a, int64_t dim) { return named("cummin", &ops::cummin)(a, dim); },
      py::arg("dim"));
}

/// median/nanmedian: a 0-d tensor without dim, (values, indices) with one.
template <typename All, typename Dim> auto medianFn(const char *name, All all, Dim byDim) {
  return [=](const Tensor &a, std::optional<int64_t> dim, bool keepdim) -> py::object {
    if (!dim)
      return wrap(all(a));
    return named(name, byDim)(a, *dim, keepdim);
  };
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

void bindSorting(py::module_ &m, py::class_<Tensor> &t) {
  bindBoth(
      m, t, "sort",
      [](const Tensor &a, int64_t dim, bool descending, bool stable) {
        return named("sort", &ops::sort)(a, dim, descending, stable);
      },
      py::arg("dim") = -1, py::arg("descending") = false, py::kw_only(), py::arg("stable") = false);
  bindBoth(m, t, "msort", [](const Tensor &a) { return ops::sort(a, 0).first; });
  bindBoth(
      m, t, "topk",
      [](const Tensor &a, int64_t k, int64_t dim, bool largest, bool sorted) {
        return named("topk", &ops::topk)(a, k, dim, largest, sorted);
      },
      py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true, py::arg("sorted") = true);
  bindBoth(
      m, t, "kthvalue",
      [](const Tensor &a, int64_t k, int64_t dim, bool keepdim) {
        return named("kthvalue", &ops::kthvalue)(a, k, dim, keepdim);
      },
      py::arg("k"), py::arg("dim") = -1, py::arg("keepdim") = false);
  bindBoth(m, t, "median", medianFn("median", &ops::median, &ops::medianDim),
           py::arg("dim") = py::none(), py::arg("keepdim") = false);
  bindBoth(m, t, "nanmedian", medianFn("nanmedian", &ops::nanmedian, &ops::nanmedianDim),
           py::arg("dim") = py::none(), py::arg("keepdim") = false);
  bindBoth(
      m, t, "mode",
      [](const Tensor &a, int64_t dim, bool keepdim) {
        return named("mode", &ops::mode)(a, dim, keepdim);
      },
      py::arg("dim") = -1, py::arg("keepdim") = false);
  bindBoth(
      m, t, "unique",
      [](const Tensor &a, bool sorted, bool inverse, bool counts, std::optional<int64_t> dim) {
        (void)sorted; // results always come sorted, which torch allows for sorted=False too
        return uniqueResult(ops::unique(a, dim, inverse, counts), inverse, counts);
      },
      py::arg("sorted") = true, py::arg("return_inverse") = false, py::arg("return_counts") = false,
      py::arg("dim") = py::none());
  bindBoth(
      m, t, "unique_consecutive",
      [](const Tensor &a, bool inverse, bool counts, std::optional<int64_t> dim) {
        return uniqueResult(ops::uniqueConsecutive(a, dim, inverse, counts), inverse, counts);
      },
      py::arg("return_inverse") = false, py::arg("return_counts") = false,
      py::arg("dim") = py::none());
}

} // namespace

void bindReduce(py::module_ &m) {
  auto t = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  bindSums(m, t);
  bindExtremes(m, t);
  bindStats(m, t);
  bindLogical(m, t);
  bindScans(m, t);
  bindSorting(m, t);
}

} // namespace kiln::frontend
