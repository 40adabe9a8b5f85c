// The extern contract of passes/lower/README.md, implemented by kiln's eager kernels.

#include "codegen/externs.h"

#include "ir/loop/interpreter.h"
#include "runtime/error.h"
#include "runtime/generator.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/index.h"
#include "runtime/ops/interpolate.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/pool.h"
#include "runtime/ops/random.h"
#include "runtime/ops/scan.h"
#include "runtime/ops/shape_ops.h"
#include "runtime/ops/sort.h"

namespace kiln::codegen {

namespace {

using Inputs = std::span<const Tensor>;

bool flag(const ir::Attributes &attrs, const char *name) {
  auto it = attrs.find(name);
  return it != attrs.end() && it->second.toBool();
}

Shape ints(const ir::Attributes &attrs, const char *name, Shape fallback) {
  auto it = attrs.find(name);
  return it == attrs.end() ? fallback : it->second.toInts();
}

void expectInputs(const char *op, Inputs in, size_t lo, size_t hi) {
  KILN_CHECK_KIND(Value, in.size() >= lo && in.size() <= hi, "extern {}: {} inputs", op, in.size());
}

/// The options of a conv2d or convolution_weight_grad extern (absent lists take torch's
/// defaults).
ops::ConvOptions convOptions(const ir::Attributes &attrs) {
  ops::ConvOptions o;
  o.stride = ints(attrs, "stride", {1});
  o.padding = ints(attrs, "padding", {0});
  o.dilation = ints(attrs, "dilation", {1});
  auto g = attrs.find("groups");
  o.groups = g == attrs.end() ? 1 : g->second.toInt();
  return o;
}

/// The window options of a max_pool2d / avg_pool2d extern (absent lists take torch's defaults).
ops::PoolOptions poolOptions(const ir::Attributes &attrs) {
  ops::PoolOptions o;
  o.kernelSize = ints(attrs, "kernel_size", {});
  o.stride = ints(attrs, "stride", {});
  o.padding = ints(attrs, "padding", {0});
  o.dilation = ints(attrs, "dilation", {1});
  o.ceilMode = flag(attrs, "ceil_mode");
  return o;
}

void addPools(ExternTable &t) {
  t.emplace("max_pool2d_backward", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("max_pool2d_backward", in, 2, 2);
    Tensor indices = ops::maxPool(2, in[0], poolOptions(attrs), true).second;
    return std::vector<Tensor>{ops::maxPoolBackward(in[1], indices, in[0].sizes(), 2)};
  });
  t.emplace("max_pool2d", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("max_pool2d", in, 1, 1);
    return std::vector<Tensor>{ops::maxPool(2, in[0], poolOptions(attrs), false).first};
  });
  t.emplace("avg_pool2d", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("avg_pool2d", in, 1, 1);
    auto include = attrs.find("count_include_pad");
    std::optional<int64_t> divisor;
    if (auto it = attrs.find("divisor_override"); it != attrs.end())
      divisor = it->second.toInt();
    bool countIncludePad = include == attrs.end() || include->second.toBool();
    return std::vector<Tensor>{
        ops::avgPool(2, in[0], poolOptions(attrs), countIncludePad, divisor)};
  });
  t.emplace("adaptive_avg_pool2d", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("adaptive_avg_pool2d", in, 1, 1);
    ops::AdaptiveSize size;
    for (int64_t s : ints(attrs, "output_size", {}))
      size.emplace_back(s);
    return std::vector<Tensor>{ops::adaptiveAvgPool(2, in[0], size)};
  });
}

int64_t intOr(const ir::Attributes &attrs, const char *name, int64_t fallback) {
  auto it = attrs.find(name);
  return it == attrs.end() ? fallback : it->second.toInt();
}

std::string stringOr(const ir::Attributes &attrs, const char *name) {
  auto it = attrs.find(name);
  return it == attrs.end() ? std::string() : it->second.toString();
}

/// A flag attribute that is true when absent.
bool flagOrTrue(const ir::Attributes &attrs, const char *name) {
  auto it = attrs.find(name);
  return it == attrs.end() || it->second.toBool();
}

void addScansAndSorts(ExternTable &t) {
  auto scan = [](const char *op, Tensor (*fn)(const Tensor &, int64_t, std::optional<DType>)) {
    return [op, fn](Inputs in, const ir::Attributes &attrs) {
      expectInputs(op, in, 1, 1);
      std::optional<DType> dtype;
      if (auto it = attrs.find("dtype"); it != attrs.end())
        dtype = it->second.toDType();
      return std::vector<Tensor>{fn(in[0], intOr(attrs, "dim", 0), dtype)};
    };
  };
  t.emplace("cumsum", scan("cumsum", ops::cumsum));
  t.emplace("cumprod", scan("cumprod", ops::cumprod));
  t.emplace("cumprod_backward", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("cumprod_backward", in, 2, 2);
    return std::vector<Tensor>{ops::cumprodBackward(in[0], in[1], attrs.at("dim").toInt())};
  });
  t.emplace("linalg_solve", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("linalg_solve", in, 2, 2);
    return std::vector<Tensor>{ops::linalgSolve(in[0], in[1], flag(attrs, "inverse"))};
  });
  t.emplace("linalg_solve_triangular", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("linalg_solve_triangular", in, 2, 2);
    return std::vector<Tensor>{ops::linalgSolveTriangular(in[0], in[1], flag(attrs, "upper"),
                                                          flag(attrs, "unitriangular"))};
  });
  t.emplace("linalg_cholesky", [](Inputs in, const ir::Attributes &) {
    expectInputs("linalg_cholesky", in, 1, 1);
    return std::vector<Tensor>{ops::linalgCholesky(in[0])};
  });
  t.emplace("linalg_logabsdet", [](Inputs in, const ir::Attributes &) {
    expectInputs("linalg_logabsdet", in, 1, 1);
    return std::vector<Tensor>{ops::linalgLogabsdet(in[0])};
  });
  t.emplace("linalg_det_sign", [](Inputs in, const ir::Attributes &) {
    expectInputs("linalg_det_sign", in, 1, 1);
    return std::vector<Tensor>{ops::linalgDetSign(in[0])};
  });
  t.emplace("linalg_eigh_packed", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("linalg_eigh_packed", in, 1, 1);
    return std::vector<Tensor>{ops::linalgEighPacked(in[0], flag(attrs, "upper"))};
  });
  t.emplace("argsort", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("argsort", in, 1, 1);
    return std::vector<Tensor>{ops::argsort(in[0], intOr(attrs, "dim", -1),
                                            flag(attrs, "descending"), flag(attrs, "stable"))};
  });
  // Reserves the counters a compiled dropout or rand draws (from the default generator, as the
  // eager op would at this point of the program) and hands the kernel (seed, offset).
  t.emplace("philox_state", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("philox_state", in, 0, 0);
    PhiloxStream s =
        Generator::defaultGenerator()->reserve(static_cast<uint64_t>(attrs.at("count").toInt()));
    Tensor state = Tensor::empty({2}, DType::Int64);
    state.data<int64_t>()[0] = static_cast<int64_t>(s.seed);
    state.data<int64_t>()[1] = static_cast<int64_t>(s.offset);
    return std::vector<Tensor>{state};
  });
  // randperm's permutation from the counters a philox_state reserved for it.
  t.emplace("randperm", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("randperm", in, 1, 1);
    Tensor state = in[0].contiguous();
    PhiloxStream s{static_cast<uint64_t>(state.data<int64_t>()[0]),
                   static_cast<uint64_t>(state.data<int64_t>()[1])};
    return std::vector<Tensor>{
        ops::randpermFrom(s, attrs.at("n").toInt(), attrs.at("dtype").toDType())};
  });
  t.emplace("logcumsumexp", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("logcumsumexp", in, 1, 1);
    return std::vector<Tensor>{ops::logcumsumexp(in[0], intOr(attrs, "dim", 0))};
  });
  t.emplace("selection_indices", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("selection_indices", in, 1, 1);
    std::string kind = stringOr(attrs, "kind");
    int64_t dim = intOr(attrs, "dim", 0);
    bool keep = flag(attrs, "keepdim");
    if (kind == "cummax")
      return std::vector<Tensor>{ops::cummax(in[0], dim).second};
    if (kind == "cummin")
      return std::vector<Tensor>{ops::cummin(in[0], dim).second};
    if (kind == "kthvalue")
      return std::vector<Tensor>{ops::kthvalue(in[0], intOr(attrs, "k", 1), dim, keep).second};
    if (kind == "median")
      return std::vector<Tensor>{ops::medianDim(in[0], dim, keep).second};
    if (kind == "nanmedian")
      return std::vector<Tensor>{ops::nanmedianDim(in[0], dim, keep).second};
    KILN_CHECK_KIND(Value, kind == "mode", "extern selection_indices: unknown kind {}", kind);
    return std::vector<Tensor>{ops::mode(in[0], dim, keep).second};
  });
  t.emplace("topk_indices", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("topk_indices", in, 1, 1);
    return std::vector<Tensor>{ops::topk(in[0], intOr(attrs, "k", 1), intOr(attrs, "dim", -1),
                                         flagOrTrue(attrs, "largest"), flagOrTrue(attrs, "sorted"))
                                   .second};
  });
}

/// The scatters write into a copy of their input (the graph op is out of place).
void addScatters(ExternTable &t) {
  t.emplace("scatter", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("scatter", in, 3, 3);
    Tensor out = in[0].clone();
    ops::scatter_(out, intOr(attrs, "dim", 0), in[1], in[2], stringOr(attrs, "reduce"));
    return std::vector<Tensor>{out};
  });
  t.emplace("scatter_add", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("scatter_add", in, 3, 3);
    Tensor out = in[0].clone();
    ops::scatterAdd_(out, intOr(attrs, "dim", 0), in[1], in[2]);
    return std::vector<Tensor>{out};
  });
  t.emplace("scatter_reduce", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("scatter_reduce", in, 3, 3);
    Tensor out = in[0].clone();
    ops::scatterReduce_(out, intOr(attrs, "dim", 0), in[1], in[2], stringOr(attrs, "reduce"),
                        flagOrTrue(attrs, "include_self"));
    return std::vector<Tensor>{out};
  });
  t.emplace("index_add", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("index_add", in, 3, 3);
    Tensor out = in[0].clone();
    auto alpha = attrs.find("alpha");
    Scalar a = alpha == attrs.end()                          ? Scalar(int64_t{1})
               : alpha->second.kind() == ir::AttrKind::Float ? Scalar(alpha->second.toDouble())
                                                             : Scalar(alpha->second.toInt());
    ops::indexAdd_(out, intOr(attrs, "dim", 0), in[1], in[2], a);
    return std::vector<Tensor>{out};
  });
  t.emplace("index_put", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("index_put", in, 3, 3);
    int64_t dim = intOr(attrs, "dim", 0);
    dim = dim < 0 ? dim + std::max<int64_t>(1, in[0].dim()) : dim;
    std::vector<Tensor> indices(static_cast<size_t>(dim) + 1); // undefined: the whole dim
    indices.back() = in[1];
    return std::vector<Tensor>{ops::indexPut(in[0], indices, in[2], flag(attrs, "accumulate"))};
  });
}

void addUpsamples(ExternTable &t) {
  for (int spatial = 1; spatial <= 3; ++spatial) {
    std::string name = fmt::format("conv_transpose{}d", spatial);
    t.emplace(name, [spatial, name](Inputs in, const ir::Attributes &attrs) {
      expectInputs(name.c_str(), in, 2, 3);
      ops::ConvTransposeOptions o;
      o.stride = ints(attrs, "stride", {1});
      o.padding = ints(attrs, "padding", {0});
      o.outputPadding = ints(attrs, "output_padding", {0});
      o.dilation = ints(attrs, "dilation", {1});
      o.groups = intOr(attrs, "groups", 1);
      std::optional<Tensor> bias;
      if (in.size() == 3)
        bias = in[2];
      return std::vector<Tensor>{ops::convTranspose(spatial, in[0], in[1], bias, o)};
    });
  }
  t.emplace("unfold", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("unfold", in, 1, 1);
    return std::vector<Tensor>{
        ops::unfold(in[0], ints(attrs, "kernel_size", {}), ints(attrs, "dilation", {1}),
                    ints(attrs, "padding", {0}), ints(attrs, "stride", {1}))};
  });
  t.emplace("fold", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("fold", in, 1, 1);
    return std::vector<Tensor>{ops::fold(
        in[0], ints(attrs, "output_size", {}), ints(attrs, "kernel_size", {}),
        ints(attrs, "dilation", {1}), ints(attrs, "padding", {0}), ints(attrs, "stride", {1}))};
  });
  t.emplace("upsample_nearest", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("upsample_nearest", in, 1, 1);
    return std::vector<Tensor>{
        ops::upsampleNearest(in[0], ints(attrs, "output_size", {}), {}, flag(attrs, "exact"))};
  });
  t.emplace("upsample_linear", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("upsample_linear", in, 1, 1);
    return std::vector<Tensor>{ops::upsampleLinear(in[0], ints(attrs, "output_size", {}),
                                                   flag(attrs, "align_corners"), {})};
  });
}

ExternTable buildTable() {
  ExternTable t;
  t.emplace("matmul", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("matmul", in, 2, 2);
    // An operand buffer is read as `a_view`/`b_view` (a reshape of the contiguous buffer), then
    // transposed when asked (passes/lower/lower_nn.cc: the layouts BLAS reads in place).
    // Or as `a_strided`/`b_strided`: [sizes..., strides..., offset] of a view of the buffer.
    auto operand = [&](const Tensor &t, const char *view, const char *transpose,
                       const char *strided) {
      if (attrs.count(strided)) {
        Shape layout = ints(attrs, strided, {});
        size_t rank = (layout.size() - 1) / 2;
        Shape sizes(layout.begin(), layout.begin() + rank);
        Shape strides(layout.begin() + rank, layout.begin() + 2 * rank);
        return t.asStrided(sizes, strides, t.storageOffset() + layout.back());
      }
      Tensor v = attrs.count(view) ? t.view(ints(attrs, view, {})) : t;
      return flag(attrs, transpose) ? v.mT() : v;
    };
    Tensor a = operand(in[0], "a_view", "transpose_a", "a_strided");
    Tensor b = operand(in[1], "b_view", "transpose_b", "b_strided");
    return std::vector<Tensor>{ops::matmul(a, b)};
  });
  t.emplace("linear", [](Inputs in, const ir::Attributes &) {
    expectInputs("linear", in, 2, 3);
    std::optional<Tensor> bias;
    if (in.size() == 3)
      bias = in[2];
    return std::vector<Tensor>{ops::linear(in[0], in[1], bias)};
  });
  t.emplace("conv2d", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("conv2d", in, 2, 3);
    std::optional<Tensor> bias;
    if (in.size() == 3)
      bias = in[2];
    return std::vector<Tensor>{ops::convolution(2, in[0], in[1], bias, convOptions(attrs))};
  });
  t.emplace("conv3d", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("conv3d", in, 2, 3);
    std::optional<Tensor> bias;
    if (in.size() == 3)
      bias = in[2];
    return std::vector<Tensor>{ops::convolution(3, in[0], in[1], bias, convOptions(attrs))};
  });
  t.emplace("convolution_weight_grad", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("convolution_weight_grad", in, 2, 2);
    std::vector<int64_t> weightSize = ints(attrs, "weight_size", {});
    const int64_t spatial = static_cast<int64_t>(weightSize.size()) - 2;
    return std::vector<Tensor>{
        ops::convolutionWeightGrad(spatial, in[1], in[0], weightSize, convOptions(attrs))};
  });
  t.emplace("scaled_dot_product_attention", [](Inputs in, const ir::Attributes &attrs) {
    expectInputs("scaled_dot_product_attention", in, 3, 4);
    std::optional<double> scale;
    if (auto it = attrs.find("scale"); it != attrs.end())
      scale = it->second.toDouble();
    Tensor mask = in.size() == 4 ? in[3] : Tensor();
    return std::vector<Tensor>{ops::scaledDotProductAttention(
        in[0], in[1], in[2], mask, 0.0, flag(attrs, "is_causal"), scale, false)};
  });
  t.emplace("mm", [](Inputs in, const ir::Attributes &) {
    expectInputs("mm", in, 2, 2);
    return std::vector<Tensor>{ops::mm(in[0], in[1])};
  });
  t.emplace("bmm", [](Inputs in, const ir::Attributes &) {
    expectInputs("bmm", in, 2, 2);
    return std::vector<Tensor>{ops::bmm(in[0], in[1])};
  });
  addPools(t);
  addScansAndSorts(t);
  addScatters(t);
  addUpsamples(t);
  t["attention"] = t.at("scaled_dot_product_attention");
  return t;
}

} // namespace

const ExternTable &eagerExterns() {
  static const ExternTable table = buildTable();
  return table;
}

void registerEagerExterns(ir::loop::Interpreter &interp) {
  for (const auto &[name, fn] : eagerExterns())
    interp.registerExtern(name, fn);
}

} // namespace kiln::codegen
