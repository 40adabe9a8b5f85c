// The GEMM externs on cuBLAS: each call becomes a `Gemm` (row-major C = A @ B with per-operand
// strides and broadcast batch dims), normalized, mapped to column-major cuBLAS calls (see
// [Note: GEMMs on cuBLAS] in device_externs.h).

#include "codegen/cuda/device_externs.h"

#include "codegen/cuda/cublas.h"
#include "codegen/cuda/driver.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

namespace kiln::codegen::cuda {
namespace {

using Inputs = std::span<const DeviceTensor>;

/// One operand of a product: a logical row-major [rows, cols] matrix per batch index, element
/// (b..., r, c) at address + sum(b * batch) + r * row + c * col (in elements).
struct Mat {
  uint64_t address = 0;
  int64_t row = 0, col = 0;
  std::vector<int64_t> batch; ///< one per Gemm::batch dim; 0 where the operand broadcasts
};

/// C[batch..., m, n] = A[batch..., m, k] @ B[batch..., k, n].
struct Gemm {
  DType dtype = DType::Float32;
  int64_t m = 0, n = 0, k = 0;
  std::vector<int64_t> batch;
  Mat a, b, c;
};

[[noreturn]] void decline(const std::string &why) { throw DeviceExternDeclined(why); }

bool flag(const ir::Attributes &attrs, const char *name) {
  auto it = attrs.find(name);
  return it != attrs.end() && it->second.toBool();
}

void expectCounts(std::string_view op, Inputs in, size_t lo, size_t hi, Inputs out) {
  KILN_CHECK_KIND(Value, in.size() >= lo && in.size() <= hi, "extern {}: {} inputs", op, in.size());
  KILN_CHECK_KIND(Value, out.size() == 1, "extern {}: {} outputs, expected 1", op, out.size());
  for (const DeviceTensor &t : in)
    KILN_CHECK_KIND(Value, t.sizes.size() == t.strides.size(),
                    "extern {}: an operand with {} sizes and {} strides", op, t.sizes.size(),
                    t.strides.size());
  KILN_CHECK_KIND(Value, out[0].sizes.size() == out[0].strides.size(),
                  "extern {}: an output with {} sizes and {} strides", op, out[0].sizes.size(),
                  out[0].strides.size());
}

/// The cuBLAS element type (cudaDataType_t) of `t`; declines dtypes cuBLAS has no GEMM for.
int cudaType(DType t) {
  switch (t) {
  case DType::Float32:
    return kCudaR32F;
  case DType::Float64:
    return kCudaR64F;
  case DType::Float16:
    return kCudaR16F;
  case DType::BFloat16:
    return kCudaR16BF;
  default:
    decline(fmt::format("cuBLAS has no {} GEMM", dtypeName(t)));
  }
}

/// A row-major view of `t` as torch.matmul reads it: [..., m, k] (`left`) or [..., k, n];
/// a 1-d operand is one row (left) or one column. `transposed` swaps the last two dims.
struct Operand {
  std::vector<int64_t> batchSizes, batchStrides;
  int64_t rows = 1, cols = 1, row = 0, col = 0;
};

Operand operand(std::string_view op, const DeviceTensor &t, bool left, bool transposed) {
  Operand o;
  size_t r = t.sizes.size();
  KILN_CHECK_KIND(Value, r >= 1, "extern {}: a 0-d operand", op);
  if (r == 1) {
    KILN_CHECK_KIND(Value, !transposed, "extern {}: a transposed 1-d operand", op);
    (left ? o.cols : o.rows) = t.sizes[0];
    (left ? o.col : o.row) = t.strides[0];
    return o;
  }
  o.rows = t.sizes[r - 2], o.cols = t.sizes[r - 1];
  o.row = t.strides[r - 2], o.col = t.strides[r - 1];
  if (transposed)
    std::swap(o.rows, o.cols), std::swap(o.row, o.col);
  o.batchSizes.assign(t.sizes.begin(), t.sizes.end() - 2);
  o.batchStrides.assign(t.strides.begin(), t.strides.end() - 2);
  return o;
}

/// The batch strides of `o` over the broadcast batch dims `batch` (right-aligned; a missing or
/// size-1 dim of `o` repeats its one matrix: stride 0).
std::vector<int64_t> broadcastStrides(const Operand &o, const std::vector<int64_t> &batch) {
  std::vector<int64_t> out(batch.size(), 0);
  size_t shift = batch.size() - o.batchSizes.size();
  for (size_t i = 0; i < o.batchSizes.size(); ++i)
    if (o.batchSizes[i] != 1)
      out[shift + i] = o.batchStrides[i];
  return out;
}

/// torch.matmul's product of `a` and `b` into `out` (shapes checked against each other).
/// A contiguous operand read as the sizes of attribute `view` (a reshape: new row-major
/// strides), or as it is when the attribute is absent.
/// Or, with attribute `strided` ([sizes..., strides..., offset]), as that view of the buffer.
DeviceTensor viewed(const DeviceTensor &t, const ir::Attributes &attrs, const char *view,
                    const char *strided) {
  if (auto layout = attrs.find(strided); layout != attrs.end()) {
    std::vector<int64_t> v = layout->second.toInts();
    size_t rank = (v.size() - 1) / 2;
    DeviceTensor out = t;
    out.sizes.assign(v.begin(), v.begin() + rank);
    out.strides.assign(v.begin() + rank, v.begin() + 2 * rank);
    out.address = t.address + static_cast<uint64_t>(v.back() * itemsize(t.dtype));
    return out;
  }
  auto it = attrs.find(view);
  if (it == attrs.end())
    return t;
  DeviceTensor v = t;
  v.sizes = it->second.toInts();
  v.strides.assign(v.sizes.size(), 1);
  for (size_t d = v.sizes.size(); d-- > 1;)
    v.strides[d - 1] = v.strides[d] * std::max<int64_t>(v.sizes[d], 1);
  return v;
}

Gemm matmulGemm(std::string_view op, const DeviceTensor &a, const DeviceTensor &b,
                const DeviceTensor &out, bool transposeA, bool transposeB) {
  Operand x = operand(op, a, /*left=*/true, transposeA);
  Operand y = operand(op, b, /*left=*/false, transposeB);
  KILN_CHECK_KIND(Value, x.cols == y.rows,
                  "extern {}: inner sizes differ ({} x {} and {} x {} matrices)", op, x.rows,
                  x.cols, y.rows, y.cols);
  std::vector<int64_t> batch(std::max(x.batchSizes.size(), y.batchSizes.size()), 1);
  for (const Operand *o : {&x, &y}) {
    size_t shift = batch.size() - o->batchSizes.size();
    for (size_t i = 0; i < o->batchSizes.size(); ++i) {
      int64_t s = o->batchSizes[i], &d = batch[shift + i];
      KILN_CHECK_KIND(Value, s == d || s == 1 || d == 1,
                      "extern {}: batch dims of sizes {} and {} do not broadcast", op, s, d);
      if (s != 1)
        d = s;
    }
  }
  std::vector<int64_t> want = batch;
  if (a.sizes.size() >= 2)
    want.push_back(x.rows);
  if (b.sizes.size() >= 2)
    want.push_back(y.cols);
  KILN_CHECK_KIND(Value, out.sizes == want, "extern {}: the output is [{}], the product [{}]", op,
                  fmt::join(out.sizes, ", "), fmt::join(want, ", "));
  if (a.dtype != out.dtype || b.dtype != out.dtype)
    decline(fmt::format("{} and {} operands for a {} output", dtypeName(a.dtype),
                        dtypeName(b.dtype), dtypeName(out.dtype)));
  Gemm g;
  g.dtype = out.dtype;
  g.m = x.rows, g.n = y.cols, g.k = x.cols;
  g.batch = batch;
  g.a = {a.address, x.row, x.col, broadcastStrides(x, batch)};
  g.b = {b.address, y.row, y.col, broadcastStrides(y, batch)};
  size_t r = out.sizes.size(), nb = batch.size();
  g.c.address = out.address;
  g.c.batch.assign(out.strides.begin(), out.strides.begin() + nb);
  if (a.sizes.size() >= 2)
    g.c.row = out.strides[nb];
  if (b.sizes.size() >= 2)
    g.c.col = out.strides[r - 1];
  return g;
}

/// How cuBLAS reads a logical row-major [rows, cols] matrix as its transpose (the swapped
/// operand order): `op` on a column-major matrix with leading dimension `ld`.
struct Layout {
  int op = kCublasOpN;
  int ld = 1;
};

bool fitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

std::optional<Layout> layoutOf(int64_t rows, int64_t cols, int64_t row, int64_t col) {
  // Unit column stride: the rows are columns of a column-major [cols, rows] matrix.
  if (col == 1 || cols == 1) {
    int64_t ld = rows == 1 ? std::max<int64_t>(1, cols) : row;
    if (ld >= std::max<int64_t>(1, cols) && fitsInt(ld))
      return Layout{kCublasOpN, static_cast<int>(ld)};
  }
  // Unit row stride: column-major [rows, cols] as stored, transposed by cuBLAS.
  if (row == 1 || rows == 1) {
    int64_t ld = cols == 1 ? std::max<int64_t>(1, rows) : col;
    if (ld >= std::max<int64_t>(1, rows) && fitsInt(ld))
      return Layout{kCublasOpT, static_cast<int>(ld)};
  }
  return std::nullopt;
}

/// Drops size-1 batch dims, folds batch dims into m where B repeats and A and C step by whole
/// matrices, and merges batch dims that step uniformly in all three operands.
void normalize(Gemm &g) {
  auto erase = [&](size_t i) {
    g.batch.erase(g.batch.begin() + i);
    for (Mat *m : {&g.a, &g.b, &g.c})
      m->batch.erase(m->batch.begin() + i);
  };
  for (size_t i = g.batch.size(); i-- > 0;)
    if (g.batch[i] == 1)
      erase(i);
  while (!g.batch.empty()) {
    size_t j = g.batch.size() - 1;
    // With one row the row stride is free: the batch stride becomes it.
    int64_t aRow = g.m == 1 ? g.a.batch[j] : g.a.row, cRow = g.m == 1 ? g.c.batch[j] : g.c.row;
    if (g.b.batch[j] != 0 || g.a.batch[j] != g.m * aRow || g.c.batch[j] != g.m * cRow)
      break;
    // Only when cuBLAS can still read the taller matrices (a transposed A cannot grow).
    int64_t rows = g.m * g.batch[j];
    std::optional<Layout> la = layoutOf(rows, g.k, aRow, g.a.col);
    std::optional<Layout> lc = layoutOf(rows, g.n, cRow, g.c.col);
    if (!la || !lc || lc->op != kCublasOpN)
      break;
    g.a.row = aRow, g.c.row = cRow;
    g.m *= g.batch[j];
    erase(j);
  }
  for (size_t i = g.batch.size(); i-- > 1;) {
    bool uniform = true;
    for (const Mat *m : {&g.a, &g.b, &g.c})
      uniform = uniform && m->batch[i - 1] == m->batch[i] * g.batch[i];
    if (!uniform)
      continue;
    g.batch[i - 1] *= g.batch[i];
    for (Mat *m : {&g.a, &g.b, &g.c})
      m->batch[i - 1] = m->batch[i];
    erase(i);
  }
}

/// The cuBLAS handle of device `ordinal` and the mutex its calls hold; created on first use on
/// the default stream.
struct DeviceHandle {
  std::mutex mu;
  CublasHandle handle = nullptr;
};

void makeContextCurrent(int ordinal) {
  if (ordinal < 0)
    return; // not a driver device: its addresses are host memory
  std::string reason;
  const Driver *driver = Driver::get(&reason);
  KILN_CHECK(driver, "kiln: CUDA is not available: {}", reason);
  driver->primaryContext(ordinal);
}

DeviceHandle &handleFor(const Cublas &cublas, int ordinal) {
  static std::mutex mu;
  // Never destroyed: a handle outlives every program, and destroying one after the driver has
  // shut down at exit would crash.
  static auto *handles = new std::map<std::pair<const Cublas *, int>, DeviceHandle>();
  std::lock_guard<std::mutex> lock(mu);
  DeviceHandle &h = (*handles)[{&cublas, ordinal}];
  if (!h.handle) {
    makeContextCurrent(ordinal);
    CublasHandle handle = nullptr;
    cublas.check(cublas.create(&handle), "cublasCreate");
    cublas.check(cublas.setStream(handle, nullptr), "cublasSetStream");
    h.handle = handle;
  }
  return h;
}

/// alpha and beta as cuBLAS reads them: double for f64, float otherwise (GemmEx computes in f32).
struct Scalar {
  float f;
  double d;
};

/// How cuBLAS reads the three matrices of a Gemm.
struct Plan {
  Layout a, b, c;
};

/// The plan of `g`, or a decline when cuBLAS cannot run it (checked before anything is queued).
Plan planGemm(const Gemm &g) {
  std::optional<Layout> la = layoutOf(g.m, g.k, g.a.row, g.a.col);
  std::optional<Layout> lb = layoutOf(g.k, g.n, g.b.row, g.b.col);
  if (!la || !lb)
    decline(fmt::format("an operand has no unit stride (A: strides {}, {}; B: strides {}, {})",
                        g.a.row, g.a.col, g.b.row, g.b.col));
  std::optional<Layout> lc = layoutOf(g.m, g.n, g.c.row, g.c.col);
  if (!lc || lc->op != kCublasOpN)
    decline(fmt::format("the output's rows are not contiguous (strides {}, {})", g.c.row, g.c.col));
  if (!fitsInt(g.m) || !fitsInt(g.n) || !fitsInt(g.k))
    decline(fmt::format("a {} x {} x {} product is past cuBLAS's 32-bit sizes", g.m, g.n, g.k));
  for (const Mat *m : {&g.a, &g.b, &g.c})
    for (int64_t s : m->batch)
      if (s < 0)
        decline("a negative batch stride");
  if (!g.batch.empty() && !fitsInt(g.batch.back()))
    decline(fmt::format("a batch of {} products", g.batch.back()));
  cudaType(g.dtype);
  return {*la, *lb, *lc};
}

/// One cuBLAS call per index of the outer batch dims, the innermost batch dim strided.
void runGemm(const Cublas &cublas, CudaDevice &device, const Gemm &g, const Plan &plan,
             double beta) {
  const Layout *la = &plan.a, *lb = &plan.b, *lc = &plan.c;
  int type = cudaType(g.dtype);
  int64_t item = itemsize(g.dtype);
  Scalar one{1.0f, 1.0}, b{static_cast<float>(beta), beta};
  int m = static_cast<int>(g.n), n = static_cast<int>(g.m), k = static_cast<int>(g.k);

  size_t outer = g.batch.empty() ? 0 : g.batch.size() - 1;
  int64_t count = 1;
  for (size_t i = 0; i < outer; ++i)
    count *= g.batch[i];
  int batchCount = g.batch.empty() ? 1 : static_cast<int>(g.batch.back());
  auto inner = [&](const Mat &mat) -> long long { return g.batch.empty() ? 0 : mat.batch.back(); };

  DeviceHandle &h = handleFor(cublas, device.ordinal());
  std::lock_guard<std::mutex> lock(h.mu);
  makeContextCurrent(device.ordinal());
  std::vector<int64_t> index(outer, 0);
  for (int64_t it = 0; it < count; ++it) {
    uint64_t addr[3] = {g.a.address, g.b.address, g.c.address};
    const Mat *mats[3] = {&g.a, &g.b, &g.c};
    for (size_t d = 0; d < outer; ++d)
      for (int o = 0; o < 3; ++o)
        addr[o] += static_cast<uint64_t>(index[d] * mats[o]->batch[d] * item);
    const void *pa = reinterpret_cast<const void *>(addr[0]);
    const void *pb = reinterpret_cast<const void *>(addr[1]);
    void *pc = reinterpret_cast<void *>(addr[2]);
    // Swapped operands: C^T = B^T @ A^T in cuBLAS's column-major terms.
    if (g.batch.empty()) {
      if (g.dtype == DType::Float32)
        cublas.check(cublas.sgemm(h.handle, lb->op, la->op, m, n, k, &one.f,
                                  static_cast<const float *>(pb), lb->ld,
                                  static_cast<const float *>(pa), la->ld, &b.f,
                                  static_cast<float *>(pc), lc->ld),
                     "cublasSgemm");
      else if (g.dtype == DType::Float64)
        cublas.check(cublas.dgemm(h.handle, lb->op, la->op, m, n, k, &one.d,
                                  static_cast<const double *>(pb), lb->ld,
                                  static_cast<const double *>(pa), la->ld, &b.d,
                                  static_cast<double *>(pc), lc->ld),
                     "cublasDgemm");
      else
        cublas.check(cublas.gemmEx(h.handle, lb->op, la->op, m, n, k, &one.f, pb, type, lb->ld, pa,
                                   type, la->ld, &b.f, pc, type, lc->ld, kCublasCompute32F,
                                   kCublasGemmDefault),
                     "cublasGemmEx");
    } else if (g.dtype == DType::Float32) {
      cublas.check(cublas.sgemmStridedBatched(
                       h.handle, lb->op, la->op, m, n, k, &one.f, static_cast<const float *>(pb),
                       lb->ld, inner(g.b), static_cast<const float *>(pa), la->ld, inner(g.a), &b.f,
                       static_cast<float *>(pc), lc->ld, inner(g.c), batchCount),
                   "cublasSgemmStridedBatched");
    } else if (g.dtype == DType::Float64) {
      cublas.check(cublas.dgemmStridedBatched(
                       h.handle, lb->op, la->op, m, n, k, &one.d, static_cast<const double *>(pb),
                       lb->ld, inner(g.b), static_cast<const double *>(pa), la->ld, inner(g.a),
                       &b.d, static_cast<double *>(pc), lc->ld, inner(g.c), batchCount),
                   "cublasDgemmStridedBatched");
    } else {
      cublas.check(cublas.gemmStridedBatchedEx(h.handle, lb->op, la->op, m, n, k, &one.f, pb, type,
                                               lb->ld, inner(g.b), pa, type, la->ld, inner(g.a),
                                               &b.f, pc, type, lc->ld, inner(g.c), batchCount,
                                               kCublasCompute32F, kCublasGemmDefault),
                   "cublasGemmStridedBatchedEx");
    }
    for (size_t d = outer; d-- > 0;) {
      if (++index[d] < g.batch[d])
        break;
      index[d] = 0;
    }
  }
}

bool isEmpty(const Gemm &g) {
  return g.m == 0 || g.n == 0 ||
         std::any_of(g.batch.begin(), g.batch.end(), [](int64_t s) { return s == 0; });
}

/// Zeros into `out` (a product over k = 0, which cuBLAS need not define); declines an output
/// that is not one dense block.
void writeZeros(CudaDevice &device, const DeviceTensor &out) {
  int64_t numel = 1, span = 1;
  for (size_t i = 0; i < out.sizes.size(); ++i) {
    numel *= out.sizes[i];
    if (out.strides[i] < 0)
      decline("an output with a negative stride");
    span += (out.sizes[i] - 1) * out.strides[i];
  }
  if (numel == 0)
    return;
  if (span != numel)
    decline("an empty product into an output with gaps");
  std::vector<unsigned char> zeros(static_cast<size_t>(numel * itemsize(out.dtype)), 0);
  device.copyToDevice(out.address, zeros.data(), zeros.size());
}

/// Runs `g` (normalized here) with an optional `bias` [n] added to every row.
void product(const Cublas &cublas, CudaDevice &device, Gemm g, const DeviceTensor &out,
             const DeviceTensor *bias) {
  if (bias && (bias->dtype != g.dtype || bias->sizes.size() != 1 || bias->sizes[0] != g.n))
    decline(fmt::format("a {} bias of shape [{}] for {} rows of {}", dtypeName(bias->dtype),
                        fmt::join(bias->sizes, ", "), dtypeName(g.dtype), g.n));
  cudaType(g.dtype); // declines before anything is written
  normalize(g);
  if (isEmpty(g))
    return;
  if (!bias) {
    if (g.k == 0)
      return writeZeros(device, out);
    return runGemm(cublas, device, g, planGemm(g), 0.0);
  }
  // C = ones[m, 1] @ bias[1, n], then C += A @ B: the bias rows cost one rank-1 GEMM. Both are
  // planned before the first one writes the output.
  Gemm rows = g;
  rows.k = 1;
  rows.a = {0, 1, 1, std::vector<int64_t>(g.batch.size(), 0)};
  rows.b = {bias->address, 0, bias->strides[0], std::vector<int64_t>(g.batch.size(), 0)};
  Plan rowsPlan = planGemm(rows);
  std::optional<Plan> mainPlan;
  if (g.k > 0)
    mainPlan = planGemm(g);
  int64_t item = itemsize(g.dtype);
  std::vector<unsigned char> host(static_cast<size_t>(g.m * item));
  for (int64_t i = 0; i < g.m; ++i) {
    unsigned char *p = host.data() + i * item;
    if (g.dtype == DType::Float32) {
      float v = 1.0f;
      std::memcpy(p, &v, sizeof v);
    } else if (g.dtype == DType::Float64) {
      double v = 1.0;
      std::memcpy(p, &v, sizeof v);
    } else {
      uint16_t v = g.dtype == DType::Float16 ? 0x3c00 : 0x3f80; // 1.0 in f16 / bf16
      std::memcpy(p, &v, sizeof v);
    }
  }
  rows.a.address = device.allocate(host.size());
  try {
    device.copyToDevice(rows.a.address, host.data(), host.size());
    runGemm(cublas, device, rows, rowsPlan, 0.0);
    if (mainPlan)
      runGemm(cublas, device, g, *mainPlan, 1.0);
  } catch (...) {
    device.release(rows.a.address);
    throw;
  }
  device.release(rows.a.address);
}

using Table = std::map<std::string, DeviceExternFn, std::less<>>;

Table buildTable(const Cublas &cublas) {
  Table t;
  t.emplace("mm", [&cublas](CudaDevice &device, Inputs in, Inputs out, const ir::Attributes &) {
    expectCounts("mm", in, 2, 2, out);
    KILN_CHECK_KIND(Value, in[0].sizes.size() == 2 && in[1].sizes.size() == 2,
                    "extern mm: operands of rank {} and {}, expected 2", in[0].sizes.size(),
                    in[1].sizes.size());
    product(cublas, device, matmulGemm("mm", in[0], in[1], out[0], false, false), out[0], nullptr);
  });
  t.emplace("bmm", [&cublas](CudaDevice &device, Inputs in, Inputs out, const ir::Attributes &) {
    expectCounts("bmm", in, 2, 2, out);
    KILN_CHECK_KIND(Value,
                    in[0].sizes.size() == 3 && in[1].sizes.size() == 3 &&
                        in[0].sizes[0] == in[1].sizes[0],
                    "extern bmm: operands [{}] and [{}], expected [b, m, k] and [b, k, n]",
                    fmt::join(in[0].sizes, ", "), fmt::join(in[1].sizes, ", "));
    product(cublas, device, matmulGemm("bmm", in[0], in[1], out[0], false, false), out[0], nullptr);
  });
  t.emplace("matmul",
            [&cublas](CudaDevice &device, Inputs in, Inputs out, const ir::Attributes &attrs) {
              expectCounts("matmul", in, 2, 2, out);
              Gemm g = matmulGemm("matmul", viewed(in[0], attrs, "a_view", "a_strided"),
                                  viewed(in[1], attrs, "b_view", "b_strided"), out[0],
                                  flag(attrs, "transpose_a"), flag(attrs, "transpose_b"));
              product(cublas, device, std::move(g), out[0], nullptr);
            });
  t.emplace("linear", [&cublas](CudaDevice &device, Inputs in, Inputs out, const ir::Attributes &) {
    expectCounts("linear", in, 2, 3, out);
    KILN_CHECK_KIND(Value, in[1].sizes.size() == 2, "extern linear: a weight of rank {}",
                    in[1].sizes.size());
    // x @ weight^T: the weight read transposed, as a matmul with transpose_b.
    Gemm g = matmulGemm("linear", in[0], in[1], out[0], false, /*transposeB=*/true);
    product(cublas, device, std::move(g), out[0], in.size() == 3 ? &in[2] : nullptr);
  });
  return t;
}

} // namespace

const DeviceExternFn *findDeviceExtern(std::string_view op, std::string *reason) {
  std::string why;
  const Cublas *cublas = Cublas::get(&why);
  if (!cublas) {
    if (reason)
      *reason = fmt::format("kiln: cuBLAS is not available: {}", why);
    return nullptr;
  }
  static const Table table = buildTable(*cublas);
  auto it = table.find(op);
  if (it == table.end()) {
    if (reason)
      *reason = fmt::format("extern {} has no device implementation", op);
    return nullptr;
  }
  return &it->second;
}

} // namespace kiln::codegen::cuda
