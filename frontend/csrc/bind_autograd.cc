// Autograd's Python surface: Tensor.grad / grad_fn / backward / register_hook / retain_grad /
// detach, grad_fn nodes (`next_functions`), and kiln._C._autograd (the engine entry points and the
// per-thread grad mode that kiln.no_grad and friends set).
#include "autograd/autocast.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"
#include "runtime/error.h"

#include <pybind11/stl.h>

#include <memory>

namespace kiln::frontend {
namespace {
using autograd::Node;

/// What Tensor.register_hook returns: remove() disables the hook.
struct HookHandle {
  std::shared_ptr<bool> removed;
  void remove() { *removed = true; }
};

/// A Python hook as a GradHook: None keeps the gradient, a Tensor replaces it.
autograd::GradHook pythonHook(py::function fn, std::shared_ptr<bool> removed) {
  // The graph may drop the hook on a thread without the GIL: release the function under it.
  std::shared_ptr<py::object> held(new py::object(std::move(fn)), [](py::object *o) {
    py::gil_scoped_acquire gil;
    delete o;
  });
  return [held, removed](const Tensor &grad) -> Tensor {
    if (*removed)
      return Tensor();
    py::gil_scoped_acquire gil;
    py::object r = (*held)(wrap(grad));
    if (r.is_none())
      return Tensor();
    KILN_CHECK_KIND(Type, py::isinstance<Tensor>(r),
                    "hook returned an object of type {}; expected a Tensor or None",
                    std::string(py::str(py::type::of(r).attr("__name__"))));
    return r.cast<Tensor>();
  };
}

/// Adds a hook on t's gradient: a leaf's runs before accumulation, a non-leaf's before its
/// grad_fn.
void addHook(const Tensor &t, autograd::GradHook hook) {
  AutogradMeta &m = autograd::meta(t);
  if (!m.gradFn) {
    m.hooks.push_back(std::move(hook));
    return;
  }
  auto &pre = m.gradFn->preHooks;
  if (pre.size() <= m.outputNr)
    pre.resize(m.outputNr + 1);
  pre[m.outputNr].push_back(std::move(hook));
}

std::vector<Tensor> tensorList(py::handle obj, const char *what) {
  std::vector<Tensor> ts;
  if (py::isinstance<Tensor>(obj)) {
    ts.push_back(obj.cast<Tensor>());
    return ts;
  }
  for (py::handle h : obj) {
    KILN_CHECK_KIND(Type, py::isinstance<Tensor>(h),
                    "{}: expected a Tensor or a sequence of "
                    "Tensors, got an element of type {}",
                    what, std::string(py::str(py::type::of(h).attr("__name__"))));
    ts.push_back(h.cast<Tensor>());
  }
  return ts;
}

/// Gradients aligned with `outputs`: None (or a missing list) gives undefined tensors.
std::vector<Tensor> gradList(py::handle obj, size_t n, const char *what) {
  std::vector<Tensor> gs(n);
  if (obj.is_none())
    return gs;
  if (py::isinstance<Tensor>(obj)) {
    KILN_CHECK(n == 1, "{}: got 1 gradient for {} outputs", what, n);
    gs[0] = obj.cast<Tensor>();
    return gs;
  }
  size_t i = 0;
  for (py::handle h : obj) {
    KILN_CHECK(i < n, "{}: more gradients than outputs ({})", what, n);
    if (!h.is_none())
      gs[i] = h.cast<Tensor>();
    ++i;
  }
  KILN_CHECK(i == n, "{}: got {} gradients for {} outputs", what, i, n);
  return gs;
}

void runBackward(const std::vector<Tensor> &outputs, const std::vector<Tensor> &grads,
                 py::handle retainGraph, bool createGraph, py::handle inputs) {
  bool keep = retainGraph.is_none() ? createGraph : retainGraph.cast<bool>();
  std::vector<Tensor> only;
  if (!inputs.is_none())
    only = tensorList(inputs, "backward(inputs=...)");
  autograd::backward(outputs, grads, keep, createGraph, only);
}

void bindTensorAutograd(py::class_<Tensor> &t) {
  t.def_property("requires_grad", &Tensor::requiresGrad, [](Tensor &self, bool v) {
    if (!autograd::isLeaf(self)) {
      KILN_CHECK(v, "you can only change requires_grad flags of leaf variables. If you want "
                    "to use a computed variable in a subgraph that doesn't require "
                    "differentiation use var_no_grad = var.detach().");
      return;
    }
    KILN_CHECK(!v || isFloating(self.dtype()),
               "only Tensors of floating point and complex dtype can require gradients");
    self.setRequiresGrad(v);
  });
  t.def_property_readonly("is_leaf", [](const Tensor &self) { return autograd::isLeaf(self); });
  t.def_property(
      "grad",
      [](const Tensor &self) -> py::object {
        AutogradMeta *m = autograd::metaOrNull(self);
        return m && m->grad.defined() ? wrap(m->grad) : py::none();
      },
      [](const Tensor &self, py::handle g) {
        if (g.is_none()) {
          if (AutogradMeta *m = autograd::metaOrNull(self))
            m->grad = Tensor();
          return;
        }
        KILN_CHECK_KIND(Type, py::isinstance<Tensor>(g),
                        "assigned grad expected to be a Tensor "
                        "or None but got grad of type {}",
                        std::string(py::str(py::type::of(g).attr("__name__"))));
        Tensor grad = g.cast<Tensor>();
        KILN_CHECK(grad.dtype() == self.dtype(),
                   "assigned grad has data of type {} that differs from the tensor's {}",
                   dtypeName(grad.dtype()), dtypeName(self.dtype()));
        KILN_CHECK(grad.sizes() == self.sizes(), "assigned grad has data of a different size");
        autograd::meta(self).grad = grad;
      });
  t.def_property_readonly("grad_fn", [](const Tensor &self) -> py::object {
    AutogradMeta *m = autograd::metaOrNull(self);
    if (m && autograd::viewHistoryStale(*m))
      autograd::refreshViewHistory(self); // a write through another view changed the base
    return m && m->gradFn ? py::cast(m->gradFn) : py::none();
  });
  t.def_property_readonly("output_nr", [](const Tensor &self) {
    AutogradMeta *m = autograd::metaOrNull(self);
    return m ? m->outputNr : 0u;
  });
  t.def_property_readonly("retains_grad", [](const Tensor &self) {
    AutogradMeta *m = autograd::metaOrNull(self);
    return m && m->retainsGrad;
  });
  t.def("retain_grad", [](const Tensor &self) {
    KILN_CHECK(self.requiresGrad(), "can't retain_grad on Tensor that has requires_grad=False");
    AutogradMeta &m = autograd::meta(self);
    if (!m.gradFn || m.retainsGrad)
      return;
    m.retainsGrad = true;
    std::weak_ptr<TensorImpl> weak = self.implPtr();
    m.gradFn->retainHooks.emplace_back(m.outputNr, [weak](const Tensor &grad) -> Tensor {
      if (std::shared_ptr<TensorImpl> impl = weak.lock()) {
        AutogradMeta &meta = autograd::meta(Tensor(impl));
        meta.grad = meta.grad.defined() ? ops::add(meta.grad, grad) : grad.clone();
      }
      return Tensor();
    });
  });
  t.def(
      "register_hook",
      [](const Tensor &self, py::function fn) {
        KILN_CHECK(self.requiresGrad(),
                   "cannot register a hook on a tensor that doesn't require gradient");
        auto removed = std::make_shared<bool>(false);
        addHook(self, pythonHook(std::move(fn), removed));
        return HookHandle{removed};
      },
      py::arg("hook"));
  t.def(
      "register_post_accumulate_grad_hook",
      [](const Tensor &self, py::function fn) {
        KILN_CHECK(self.requiresGrad(),
                   "cannot register a hook on a tensor that doesn't require gradient");
        KILN_CHECK(autograd::isLeaf(self),
                   "post accumulate grad hooks cannot be registered on non-leaf tensors");
        auto removed = std::make_shared<bool>(false);
        // Released under the GIL: the graph may drop the hook on a thread without it.
        std::shared_ptr<py::object> held(new py::object(std::move(fn)), [](py::object *o) {
          py::gil_scoped_acquire gil;
          delete o;
        });
        autograd::meta(self).postAccumulateHooks.push_back([held, removed](const Tensor &leaf) {
          if (*removed)
            return;
          py::gil_scoped_acquire gil;
          (*held)(wrap(leaf));
        });
        return HookHandle{removed};
      },
      py::arg("hook"));
  t.def(
      "backward",
      [](const Tensor &self, py::handle gradient, py::handle retainGraph, bool createGraph,
         py::handle inputs) {
        std::vector<Tensor> grads(1);
        if (!gradient.is_none())
          grads[0] = gradient.cast<Tensor>();
        runBackward({self}, grads, retainGraph, createGraph, inputs);
      },
      py::arg("gradient") = py::none(), py::arg("retain_graph") = py::none(),
      py::arg("create_graph") = false, py::arg("inputs") = py::none());
  t.def("_replace_data", [](const Tensor &self, const Tensor &other) {
    TensorImpl &impl = self.impl();
    impl.storage = other.storage();
    impl.dtype = other.dtype();
    impl.sizes = other.sizes();
    impl.strides = other.strides();
    impl.storageOffset = other.storageOffset();
  });
  t.def("detach_", [](py::object self) {
    Tensor &s = self.cast<Tensor &>();
    if (AutogradMeta *m = autograd::metaOrNull(s)) {
      KILN_CHECK(!m->viewBase.defined(), "Can't detach views in-place. Use detach() instead.");
      m->gradFn.reset();
      m->outputNr = 0;
    }
    s.setRequiresGrad(false);
    return self;
  });
}

/// The node of a kiln.autograd.Function call: its backward is the Python `backward` callable,
/// called with one gradient per output (None where the output got none) and returning one per
/// input.
class PythonFunctionNode final : public Node {
public:
  PythonFunctionNode(std::string name, py::function backward)
      : name_(std::move(name)), backward_(new py::object(std::move(backward)), [](py::object *o) {
          py::gil_scoped_acquire gil;
          delete o;
        }) {}

  std::vector<Tensor> apply(std::vector<Tensor> &&gradOutputs) override {
    py::gil_scoped_acquire gil;
    KILN_CHECK(backward_, "Trying to backward through the graph a second time (or directly "
                          "access saved tensors after they have already been freed). Saved "
                          "intermediate values of the graph are freed when you call .backward() "
                          "or autograd.grad(). Specify retain_graph=True if you need to backward "
                          "through the graph a second time or if you need to access saved tensors "
                          "after calling backward.");
    py::tuple args(gradOutputs.size());
    for (size_t i = 0; i < gradOutputs.size(); ++i)
      args[i] = gradOutputs[i].defined() ? wrap(gradOutputs[i]) : py::none();
    py::object r = (*backward_)(*args);
    py::tuple grads = py::isinstance<py::tuple>(r) ? r.cast<py::tuple>() : py::make_tuple(r);
    KILN_CHECK(grads.size() >= next.size(),
               "function {} returned an incorrect number of gradients (expected {}, got {})", name_,
               next.size(), grads.size());
    std::vector<Tensor> out(next.size());
    for (size_t i = 0; i < next.size(); ++i) {
      if (grads[i].is_none())
        continue;
      KILN_CHECK_KIND(Type, py::isinstance<Tensor>(grads[i]),
                      "function {} returned a gradient of type {} for input {}; expected a "
                      "Tensor or None",
                      name_, std::string(py::str(py::type::of(grads[i]).attr("__name__"))), i);
      Tensor g = grads[i].cast<Tensor>();
      if (next[i].valid() && i < inputSizes.size())
        KILN_CHECK(g.sizes() == inputSizes[i],
                   "Function {} returned an invalid gradient at index {} - got {} but expected "
                   "shape compatible with {}",
                   name_, i, g.shapeStr(), shapeToString(inputSizes[i]));
      out[i] = std::move(g);
    }
    return out;
  }
  std::string name() const override { return name_; }
  void releaseSaved() override { backward_.reset(); }

  std::vector<Shape> inputSizes;

private:
  std::string name_;
  std::shared_ptr<py::object> backward_;
};

void bindNodes(py::module_ &ag) {
  py::class_<Node, std::shared_ptr<Node>>(ag, "Node")
      .def("name", &Node::name)
      .def_property_readonly("next_functions",
                             [](const Node &n) {
                               py::tuple out(n.next.size());
                               for (size_t i = 0; i < n.next.size(); ++i)
                                 out[i] = py::make_tuple(n.next[i].fn ? py::cast(n.next[i].fn)
                                                                      : py::none(),
                                                         n.next[i].inputNr);
                               return out;
                             })
      .def_property_readonly("variable",
                             [](const Node &n) -> py::object {
                               auto *acc = dynamic_cast<const autograd::AccumulateGrad *>(&n);
                               KILN_CHECK_KIND(Type, acc,
                                               "'{}' object has no attribute "
                                               "'variable'",
                                               n.name());
                               Tensor v = acc->variable();
                               return v.defined() ? wrap(v) : py::none();
                             })
      .def("__repr__", [](const Node &n) {
        return fmt::format("<{} object at {}>", n.name(), static_cast<const void *>(&n));
      });
  py::class_<HookHandle>(ag, "RemovableHandle").def("remove", &HookHandle::remove);
}
} // namespace

void bindAutograd(py::module_ &m) {
  auto t = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  bindTensorAutograd(t);
  py::module_ ag = m.def_submodule("_autograd", "the autograd engine and grad mode");
  bindNodes(ag);
  ag.def(
      "_record_function",
      [](const std::string &name, py::function backward, py::list inputs, py::list outputs,
         bool materializeGrads) {
        auto node = std::make_shared<PythonFunctionNode>(name, std::move(backward));
        node->materializeGrads = materializeGrads;
        for (py::handle h : inputs) {
          if (py::isinstance<Tensor>(h)) {
            Tensor t = h.cast<Tensor>();
            node->next.push_back(autograd::gradEdge(t));
            node->inputSizes.push_back(t.sizes());
          } else {
            node->next.push_back({});
            node->inputSizes.push_back({});
          }
        }
        std::vector<Tensor> outs;
        for (py::handle h : outputs) {
          Tensor t = h.cast<Tensor>();
          node->outputs.push_back({t.sizes(), t.dtype(), t.device()});
          outs.push_back(t);
        }
        for (size_t i = 0; i < outs.size(); ++i)
          autograd::setHistory(outs[i], node, static_cast<uint32_t>(i));
        return std::shared_ptr<Node>(node);
      },
      py::arg("name"), py::arg("backward"), py::arg("inputs"), py::arg("outputs"),
      py::arg("materialize_grads") = true);
  ag.def("is_grad_enabled", &autograd::isGradEnabled);
  ag.def("_set_grad_enabled", &autograd::setGradEnabled, py::arg("mode"));
  // Autocast regions (kiln.amp.autocast): per thread, per device type.
  auto deviceType = [](const std::string &device) {
    KILN_CHECK(device == "cpu" || device == "cuda",
               "User specified an unsupported autocast device_type '{}'", device);
    return device == "cuda" ? DeviceType::CUDA : DeviceType::CPU;
  };
  ag.def(
      "_autocast_region",
      [deviceType](const std::string &device) {
        autograd::autocast::Region r = autograd::autocast::region(deviceType(device));
        return py::make_tuple(r.enabled, r.dtype);
      },
      py::arg("device_type"));
  ag.def(
      "_set_autocast_region",
      [deviceType](const std::string &device, bool enabled, DType dtype) {
        autograd::autocast::setRegion(deviceType(device), {enabled, dtype});
      },
      py::arg("device_type"), py::arg("enabled"), py::arg("dtype"));
  ag.def("_autocast_any_enabled", &autograd::autocast::anyEnabled);
  ag.def(
      "_autocast_lower", [](const Tensor &t) { return autograd::autocast::lower(t); },
      py::arg("tensor"));
  // One int for every region's state (enabled and dtype), what compiled code is guarded on: a
  // block built in compiled code reads the dtype even of a disabled region.
  ag.def("_autocast_key", [] {
    auto code = [](DeviceType d) {
      autograd::autocast::Region r = autograd::autocast::region(d);
      return (r.enabled ? 1 : 0) + 2 * static_cast<int64_t>(r.dtype);
    };
    return code(DeviceType::CPU) + 1024 * code(DeviceType::CUDA);
  });
  ag.def(
      "_autocast_policy",
      [](const std::string &keyword) {
        switch (autograd::autocast::policy(keyword)) {
        case autograd::autocast::Policy::Lower:
          return "lower";
        case autograd::autocast::Policy::LowerOnCuda:
          return "lower_cuda";
        case autograd::autocast::Policy::Widen:
          return "float32";
        case autograd::autocast::Policy::WidenOnCuda:
          return "float32_cuda";
        default:
          return "";
        }
      },
      py::arg("keyword"));
  ag.def("is_inference_mode_enabled", &autograd::isInferenceMode);
  ag.def("_set_inference_mode", &autograd::setInferenceMode, py::arg("mode"));
  ag.def(
      "backward",
      [](py::handle tensors, py::handle gradTensors, py::handle retainGraph, bool createGraph,
         py::handle inputs) {
        std::vector<Tensor> outs = tensorList(tensors, "backward");
        runBackward(outs, gradList(gradTensors, outs.size(), "backward"), retainGraph, createGraph,
                    inputs);
      },
      py::arg("tensors"), py::arg("grad_tensors") = py::none(),
      py::arg("retain_graph") = py::none(), py::arg("create_graph") = false,
      py::arg("inputs") = py::none());
  ag.def(
      "grad",
      [](py::handle outputs, py::handle inputs, py::handle gradOutputs, py::handle retainGraph,
         bool createGraph, bool allowUnused) {
        std::vector<Tensor> outs = tensorList(outputs, "grad");
        std::vector<Tensor> ins = tensorList(inputs, "grad");
        bool keep = retainGraph.is_none() ? createGraph : retainGraph.cast<bool>();
        std::vector<Tensor> gs = autograd::grad(outs, gradList(gradOutputs, outs.size(), "grad"),
                                                ins, keep, createGraph, allowUnused);
        py::tuple result(gs.size());
        for (size_t i = 0; i < gs.size(); ++i)
          result[i] = gs[i].defined() ? wrap(gs[i]) : py::none();
        return result;
      },
      py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs") = py::none(),
      py::arg("retain_graph") = py::none(), py::arg("create_graph") = false,
      py::arg("allow_unused") = false);
}

} // namespace kiln::frontend
