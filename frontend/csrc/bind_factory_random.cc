// Random numbers: kiln.Generator, the seeding functions, the sampling factories and the in-place
// Tensor samplers.
#include "frontend/csrc/bind_factory.h"
#include "frontend/csrc/bindings.h"
#include "runtime/error.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/random.h"

#include <pybind11/stl.h>

#include <cstring>

namespace kiln::frontend {

Generator *toGenerator(py::handle obj, const char *op) {
  if (obj.is_none())
    return nullptr;
  KILN_CHECK_KIND(Type, py::isinstance<Generator>(obj),
                  "{}(): argument 'generator' must be a kiln.Generator, not {}", op,
                  std::string(py::str(py::type::of(obj).attr("__name__"))));
  return obj.cast<Generator *>();
}

namespace {

py::class_<Tensor> tensorClass(py::module_ &m) {
  return py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
}

/// A seed in [-2^63, 2^64); negative seeds wrap modulo 2^64 as in torch.
uint64_t toSeed(py::handle seed) {
  py::object idx = py::reinterpret_steal<py::object>(PyNumber_Index(seed.ptr()));
  if (!idx)
    throw py::error_already_set();
  unsigned long long u = PyLong_AsUnsignedLongLong(idx.ptr());
  if (!PyErr_Occurred())
    return u;
  PyErr_Clear();
  long long s = PyLong_AsLongLong(idx.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    fail(ErrorKind::Value, "manual_seed: seed {} is out of range [-2**63, 2**64)",
         std::string(py::str(seed)));
  }
  return static_cast<uint64_t>(s);
}

Tensor stateTensor(const Generator &g) {
  auto state = g.getState();
  Tensor t = Tensor::empty({Generator::kStateBytes}, DType::UInt8);
  std::memcpy(t.rawData(), state.data(), state.size());
  return t;
}

void setStateFrom(Generator &g, const Tensor &t) {
  KILN_CHECK_KIND(Type, t.dtype() == DType::UInt8 && t.numel() == Generator::kStateBytes,
                  "set_rng_state: expected a uint8 tensor of {} elements (as returned by "
                  "get_rng_state()), got a {} tensor of shape {}",
                  Generator::kStateBytes, dtypeName(t.dtype()), t.shapeStr());
  std::array<uint8_t, Generator::kStateBytes> state{};
  Tensor c = t.contiguous();
  std::memcpy(state.data(), c.rawData(), state.size());
  g.setState(state);
}

void bindGenerator(py::module_ &m) {
  py::class_<Generator, std::shared_ptr<Generator>> g(m, "Generator");
  g.def(py::init([](py::handle device) {
          checkDevice(device, "Generator");
          return std::make_shared<Generator>();
        }),
        py::arg("device") = "cpu");
  g.def(
      "manual_seed",
      [](py::object self, py::handle seed) {
        self.cast<Generator &>().manualSeed(toSeed(seed));
        return self;
      },
      py::arg("seed"));
  g.def("seed", &Generator::seedRandomly);
  g.def("initial_seed", &Generator::initialSeed);
  g.def("get_state", &stateTensor);
  g.def(
      "set_state",
      [](py::object self, const Tensor &state) {
        setStateFrom(self.cast<Generator &>(), state);
        return self;
      },
      py::arg("new_state"));
  g.def_property_readonly("device", [](const Generator &) { return "cpu"; });

  m.attr("default_generator") = Generator::defaultGenerator();
  m.def(
      "manual_seed",
      [](py::handle seed) {
        Generator::defaultGenerator()->manualSeed(toSeed(seed));
        return Generator::defaultGenerator();
      },
      py::arg("seed"));
  m.def("seed", [] { return Generator::defaultGenerator()->seedRandomly(); });
  m.def("initial_seed", [] { return Generator::defaultGenerator()->initialSeed(); });
  m.def("get_rng_state", [] { return stateTensor(*Generator::defaultGenerator()); });
  m.def(
      "set_rng_state",
      [](const Tensor &state) { setStateFrom(*Generator::defaultGenerator(), state); },
      py::arg("new_state"));
}

void checkFloating(DType t, const char *op) {
  KILN_CHECK_KIND(NotImplemented, isFloating(t),
                  "{}: not implemented for '{}' (expected a floating point dtype: float16, "
                  "bfloat16, float32 or float64)",
                  op, dtypeName(t));
}

/// Binds kiln.name(*size, generator=None, dtype=None, device=None, requires_grad=False) and
/// kiln.name_like(input, ...) for a floating sampler.
template <typename Sample>
void defSampler(py::module_ &m, const char *name, const char *likeName, Sample sample) {
  m.def(
      name,
      [name, sample](py::args args, py::handle size, py::handle generator,
                     std::optional<DType> dtype, py::handle device, bool requiresGrad) {
        std::optional<Device> target = targetDevice(device, name);
        Shape shape = factoryShape(args, size, name);
        ops::checkSizes(name, shape);
        Tensor t = Tensor::empty(shape, dtype.value_or(defaultFloatDType()));
        checkFloating(t.dtype(), name);
        sample(t, toGenerator(generator, name)); // on the host: one generator stream everywhere
        return finishFactory(placeOn(t, target), requiresGrad, name);
      },
      py::arg("size") = py::none(), py::arg("generator") = py::none(),
      py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false);
  m.def(
      likeName,
      [likeName, sample](const Tensor &input, py::handle generator, std::optional<DType> dtype,
                         py::handle device, bool requiresGrad, py::handle) {
        std::optional<Device> target = targetDeviceLike(device, input, likeName);
        Tensor t = target ? Tensor::empty(input.sizes(), dtype.value_or(input.dtype()))
                          : ops::emptyLike(input, dtype.value_or(input.dtype()));
        checkFloating(t.dtype(), likeName);
        sample(t, toGenerator(generator, likeName));
        return finishFactory(placeOn(t, target), requiresGrad, likeName);
      },
      py::arg("input"), py::kw_only(), py::arg("generator") = py::none(),
      py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false, py::arg("memory_format") = py::none());
}

int64_t toInt(py::handle obj, const char *op, const char *arg) {
  Scalar s = toScalar(obj, op);
  KILN_CHECK_KIND(Type, !s.isFloating(), "{}(): argument '{}' must be int, not float", op, arg);
  return s.toInt();
}

void bindIntSamplers(py::module_ &m) {
  m.def(
      "randint",
      [](py::object low, py::object high, py::object size, py::handle generator,
         std::optional<DType> dtype, py::handle device, bool requiresGrad) {
        std::optional<Device> target = targetDevice(device, "randint");
        if (size.is_none()) { // randint(high, size)
          size = high;
          high = low;
          low = py::none();
        }
        if (high.is_none()) { // randint(high, size=...)
          high = low;
          low = py::none();
        }
        KILN_CHECK_KIND(Type, !high.is_none() && !size.is_none(),
                        "randint() expects randint(high, size) or randint(low, high, size)");
        int64_t lo = low.is_none() ? 0 : toInt(low, "randint", "low");
        Tensor t = ops::randint(lo, toInt(high, "randint", "high"), toIntList(size, "randint"),
                                dtype.value_or(DType::Int64), toGenerator(generator, "randint"));
        return finishFactory(placeOn(t, target), requiresGrad, "randint");
      },
      py::arg("low") = py::none(), py::arg("high") = py::none(), py::arg("size") = py::none(),
      py::kw_only(), py::arg("generator") = py::none(), py::arg("dtype") = py::none(),
      py::arg("device") = py::none(), py::arg("requires_grad") = false);
  m.def(
      "randint_like",
      [](const Tensor &input, py::object low, py::object high, std::optional<DType> dtype,
         py::handle device, bool requiresGrad, py::handle) {
        std::optional<Device> target = targetDevice(device, "randint_like");
        if (high.is_none()) {
          high = low;
          low = py::none();
        }
        KILN_CHECK_KIND(Type, !high.is_none(), "randint_like() missing required argument 'high'");
        int64_t lo = low.is_none() ? 0 : toInt(low, "randint_like", "low");
        int64_t hi = toInt(high, "randint_like", "high");
        KILN_CHECK(lo < hi,
                   "randint_like: expected 'low' to be less than 'high', but got low={} "
                   ">= high={}",
                   lo, hi);
        Tensor t = ops::emptyLike(input, dtype.value_or(input.dtype()));
        ops::random_(t, lo, hi);
        return finishFactory(placeOn(t, target), requiresGrad, "randint_like");
      },
      py::arg("input"), py::arg("low") = py::none(), py::arg("high") = py::none(), py::kw_only(),
      py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false, py::arg("memory_format") = py::none());
  m.def(
      "randperm",
      [](int64_t n, py::handle generator, std::optional<DType> dtype, py::handle device,
         bool requiresGrad) {
        std::optional<Device> target = targetDevice(device, "randperm");
        Tensor t =
            ops::randperm(n, dtype.value_or(DType::Int64), toGenerator(generator, "randperm"));
        return finishFactory(placeOn(t, target), requiresGrad, "randperm");
      },
      py::arg("n"), py::kw_only(), py::arg("generator") = py::none(), py::arg("dtype") = py::none(),
      py::arg("device") = py::none(), py::arg("requires_grad") = false);
}

void bindDistributions(py::module_ &m) {
  m.def(
      "normal",
      [](py::handle mean, py::handle std, py::handle size, py::handle generator,
         std::optional<DType> dtype, py::handle device, bool requiresGrad) {
        std::optional<Device> target = targetDevice(device, "normal");
        Generator *gen = toGenerator(generator, "normal");
        bool tensorArgs = py::isinstance<Tensor>(mean) || py::isinstance<Tensor>(std);
        if (!size.is_none()) {
          KILN_CHECK_KIND(Type, !tensorArgs,
                          "normal(): size= is only accepted with float mean and std (with tensor "
                          "arguments the shape comes from broadcasting them)");
          Tensor t = ops::empty(toIntList(size, "normal"), dtype.value_or(defaultFloatDType()));
          checkFloating(t.dtype(), "normal");
          ops::normal_(t, toScalar(mean, "normal").toDouble(), toScalar(std, "normal").toDouble(),
                       gen);
          return finishFactory(placeOn(t, target), requiresGrad, "normal");
        }
        KILN_CHECK_KIND(Type, tensorArgs,
                        "normal(): with float mean and std the size argument is required");
        KILN_CHECK_KIND(Type, !dtype, "normal(): dtype= is only accepted with float mean and std");
        Tensor t = ops::normal(toOperand(mean, "normal"), toOperand(std, "normal"), gen);
        return finishFactory(t, requiresGrad, "normal");
      },
      py::arg("mean"), py::arg("std") = 1.0, py::arg("size") = py::none(), py::kw_only(),
      py::arg("generator") = py::none(), py::arg("dtype") = py::none(),
      py::arg("device") = py::none(), py::arg("requires_grad") = false);

  // kiln.dropout / F.dropout are Python glue (argument names, returning the input object).
  m.def(
      "_dropout",
      [](const Tensor &input, double p, bool train, py::handle generator) {
        return ops::dropout(input, p, train, toGenerator(generator, "dropout"));
      },
      py::arg("input"), py::arg("p"), py::arg("train"), py::arg("generator") = py::none());
  m.def(
      "_dropout_",
      [](Tensor &input, double p, bool train, py::handle generator) {
        Generator *gen = toGenerator(generator, "dropout_");
        if (train && p > 0 && autograd::anyRequiresGrad({&input}))
          autograd::applyInplace("dropout_", input,
                                 ops::dropout(autograd::inplaceOperand(input), p, train, gen));
        else
          kiln::ops::dropout_(input, p, train, gen);
      },
      py::arg("input"), py::arg("p"), py::arg("train"), py::arg("generator") = py::none());
}

/// Binds Tensor.name(args..., *, generator=None) as an in-place sampler that returns self. A
/// device tensor (nn.init on a model made under `with kiln.device("cuda")`) is filled from the
/// CPU generator through a host copy: kiln has no device generator yet.
template <typename... Args, typename Fn>
void defInPlace(py::class_<Tensor> &t, const char *name, Fn fn, Args... args) {
  t.def(
      name,
      [name, fn](py::object self, py::handle a, py::handle b, py::handle generator) {
        Tensor &s = self.cast<Tensor &>();
        if (s.isCpu()) {
          fn(s, a, b, toGenerator(generator, name));
        } else {
          Tensor host = Tensor::empty(s.sizes(), s.dtype());
          fn(host, a, b, toGenerator(generator, name));
          s.copy_(host);
        }
        return self;
      },
      args..., py::kw_only(), py::arg("generator") = py::none());
}

void bindInPlaceSamplers(py::module_ &m) {
  auto t = tensorClass(m);
  auto num = [](py::handle h, const char *op) { return toScalar(h, op).toDouble(); };
  defInPlace(
      t, "uniform_",
      [num](Tensor &s, py::handle a, py::handle b, Generator *g) {
        ops::uniform_(s, num(a, "uniform_"), num(b, "uniform_"), g);
      },
      py::arg("from") = 0.0, py::arg("to") = 1.0);
  defInPlace(
      t, "normal_",
      [num](Tensor &s, py::handle a, py::handle b, Generator *g) {
        ops::normal_(s, num(a, "normal_"), num(b, "normal_"), g);
      },
      py::arg("mean") = 0.0, py::arg("std") = 1.0);
  t.def(
      "exponential_",
      [num](py::object self, py::handle lambd, py::handle generator) {
        ops::exponential_(self.cast<Tensor &>(), num(lambd, "exponential_"),
                          toGenerator(generator, "exponential_"));
        return self;
      },
      py::arg("lambd") = 1.0, py::kw_only(), py::arg("generator") = py::none());
  t.def(
      "bernoulli_",
      [](py::object self, py::handle p, py::handle generator) {
        Tensor &s = self.cast<Tensor &>();
        Generator *g = toGenerator(generator, "bernoulli_");
        if (py::isinstance<Tensor>(p))
          ops::bernoulli_(s, p.cast<const Tensor &>(), g);
        else
          ops::bernoulli_(s, toScalar(p, "bernoulli_").toDouble(), g);
        return self;
      },
      py::arg("p") = 0.5, py::kw_only(), py::arg("generator") = py::none());
  // random_(), random_(to), random_(from, to).
  defInPlace(
      t, "random_",
      [](Tensor &s, py::handle a, py::handle b, Generator *g) {
        if (a.is_none() && b.is_none())
          ops::random_(s, 0, std::nullopt, g);
        else if (b.is_none())
          ops::random_(s, 0, toInt(a, "random_", "to"), g);
        else
          ops::random_(s, a.is_none() ? 0 : toInt(a, "random_", "from"), toInt(b, "random_", "to"),
                       g);
      },
      py::arg("from") = py::none(), py::arg("to") = py::none());
}

} // namespace

void bindRandom(py::module_ &m) {
  bindGenerator(m);
  defSampler(m, "rand", "rand_like",
             [](Tensor &t, Generator *g) { ops::uniform_(t, 0.0, 1.0, g); });
  defSampler(m, "randn", "randn_like",
             [](Tensor &t, Generator *g) { ops::normal_(t, 0.0, 1.0, g); });
  bindIntSamplers(m);
  bindDistributions(m);
  bindInPlaceSamplers(m);
}

} // namespace kiln::frontend
