// Matrix products: rank dispatch and torch's shape/dtype checks over the batched GEMM core.
#include "runtime/ops/linalg.h"
#include "runtime/device_ops.h"

#include "runtime/ops/elementwise.h"
#include "runtime/ops/linalg_impl.h"

namespace kiln::ops {

using namespace detail;

namespace {

std::string matStr(const Tensor &t) {
  return t.dim() == 2 ? fmt::format("{}x{}", t.size(0), t.size(1)) : t.shapeStr();
}

void checkMatrixProduct(const char *op, const Tensor &a, const Tensor &b) {
  if (a.size(-1) != b.size(-2))
    fail(ErrorKind::Shape, "{}: mat1 and mat2 shapes cannot be multiplied ({} and {})", op,
         matStr(a), matStr(b));
}

/// torch's addmm/addmv/baddbmm rule: `self` shares the dtype and broadcasts to the result shape.
void checkSelf(const char *op, const Tensor &self, const Tensor &other, IntList outShape) {
  KILN_CHECK(self.dtype() == other.dtype(),
             "{}: self and mat2 must have the same dtype, but got {} and {}", op,
             dtypeName(self.dtype()), dtypeName(other.dtype()));
  bool ok = self.dim() <= static_cast<int64_t>(outShape.size());
  for (int64_t i = 1; ok && i <= self.dim(); ++i) {
    int64_t s = self.size(-i);
    ok = s == 1 || s == outShape[outShape.size() - i];
  }
  KILN_CHECK(ok, "{}: the tensor to add, of shape {}, cannot be expanded to the result shape {}",
             op, self.shapeStr(), shapeToString(outShape));
}

} // namespace

Tensor mm(const Tensor &a, const Tensor &b) {
  KILN_CHECK(a.dim() == 2, "mm: self must be a matrix, but got a {}-D tensor", a.dim());
  KILN_CHECK(b.dim() == 2, "mm: mat2 must be a matrix, but got a {}-D tensor", b.dim());
  checkGemmDTypes("mm", a, b, "m1 and m2");
  checkMatrixProduct("mm", a, b);
  return batchedGemm(a, b);
}

Tensor bmm(const Tensor &a, const Tensor &b) {
  KILN_CHECK(a.dim() == 3, "bmm: batch1 must be a 3D tensor, but got a {}-D tensor", a.dim());
  KILN_CHECK(b.dim() == 3, "bmm: batch2 must be a 3D tensor, but got a {}-D tensor", b.dim());
  checkGemmDTypes("bmm", a, b, "batch1 and batch2");
  KILN_CHECK(b.size(0) == a.size(0) && b.size(1) == a.size(2),
             "bmm: expected size for first two dimensions of batch2 tensor to be: [{}, {}] but "
             "got: [{}, {}] (batch1 is {}, batch2 is {})",
             a.size(0), a.size(2), b.size(0), b.size(1), a.shapeStr(), b.shapeStr());
  return batchedGemm(a, b);
}

Tensor mv(const Tensor &mat, const Tensor &vec) {
  KILN_CHECK(mat.dim() == 2 && vec.dim() == 1,
             "mv: expected a 2-D matrix and a 1-D vector, but got {}-D and {}-D tensors", mat.dim(),
             vec.dim());
  checkGemmDTypes("mv", mat, vec, "mat and vec");
  KILN_CHECK(mat.size(1) == vec.size(0), "mv: size mismatch, got mat ({}), vec ({})", matStr(mat),
             vec.size(0));
  return batchedGemm(mat, vec.unsqueeze(1)).squeeze({1});
}

Tensor dot(const Tensor &a, const Tensor &b, const char *op) {
  KILN_CHECK(a.dim() == 1 && b.dim() == 1, "{}: 1D tensors expected, but got {}D and {}D tensors",
             op, a.dim(), b.dim());
  KILN_CHECK(a.dtype() == b.dtype(),
             "{}: expected both vectors to have same dtype, but found {} and {}", op,
             dtypeName(a.dtype()), dtypeName(b.dtype()));
  if (a.dtype() == DType::Bool)
    notImplementedFor(op, a.dtype());
  KILN_CHECK(a.size(0) == b.size(0),
             "{}: inconsistent tensor size, expected tensor {} and src {} to have the same number "
             "of elements, but got {} and {} elements respectively",
             op, a.shapeStr(), b.shapeStr(), a.size(0), b.size(0));
  return batchedGemm(a.unsqueeze(0), b.unsqueeze(1)).view({});
}

Tensor outer(const Tensor &a, const Tensor &b) {
  KILN_CHECK(a.dim() == 1, "outer: Expected 1-D argument self, but got {}-D", a.dim());
  KILN_CHECK(b.dim() == 1, "outer: Expected 1-D argument vec2, but got {}-D", b.dim());
  return mul(a.unsqueeze(1), b.unsqueeze(0));
}

Tensor matmul(const Tensor &a, const Tensor &b) {
  if (onDevice({&a, &b}))
    return deviceOp("matmul", {a, b});
  int64_t da = a.dim(), db = b.dim();
  KILN_CHECK(da > 0 && db > 0,
             "matmul: both arguments to matmul need to be at least 1D, but they are {}D and {}D",
             da, db);
  checkGemmDTypes("matmul", a, b, "m1 and m2");
  if (da == 1 && db == 1)
    return dot(a, b, "matmul");
  if (da == 2 && db == 1)
    return mv(a, b);
  if (da >= 3 && db <= 2) {
    // Fold the batch into the rows: one large GEMM instead of many small ones.
    Tensor b2 = db == 1 ? b.unsqueeze(1) : b;
    checkMatrixProduct("matmul", a, b2);
    Shape outShape(a.sizes().begin(), a.sizes().end() - 1);
    // Explicit row count: reshape cannot infer -1 when the contracted size is 0.
    Tensor r = batchedGemm(a.reshape({numelOf(outShape), a.size(-1)}), b2);
    if (db == 2)
      outShape.push_back(b.size(1));
    return r.view(outShape);
  }
  Tensor a2 = da == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = db == 1 ? b.unsqueeze(1) : b;
  checkMatrixProduct("matmul", a2, b2);
  Tensor r = batchedGemm(a2, b2);
  if (da == 1)
    r = r.squeeze({-2});
  if (db == 1)
    r = r.squeeze({-1});
  return r;
}

Tensor addmm(const Tensor &self, const Tensor &mat1, const Tensor &mat2, const Scalar &beta,
             const Scalar &alpha) {
  KILN_CHECK(mat1.dim() == 2, "addmm: mat1 must be a matrix, got {}-D tensor", mat1.dim());
  KILN_CHECK(mat2.dim() == 2, "addmm: mat2 must be a matrix, got {}-D tensor", mat2.dim());
  checkGemmDTypes("addmm", mat1, mat2, "m1 and m2");
  checkMatrixProduct("addmm", mat1, mat2);
  checkSelf("addmm", self, mat2, {mat1.size(0), mat2.size(1)});
  return batchedGemm(mat1, mat2, &self, alpha, beta);
}

Tensor addmv(const Tensor &self, const Tensor &mat, const Tensor &vec, const Scalar &beta,
             const Scalar &alpha) {
  KILN_CHECK(mat.dim() == 2 && vec.dim() == 1,
             "addmv: expected a 2-D matrix and a 1-D vector, but got {}-D and {}-D tensors",
             mat.dim(), vec.dim());
  checkGemmDTypes("addmv", mat, vec, "mat and vec");
  KILN_CHECK(mat.size(1) == vec.size(0), "addmv: size mismatch, got mat ({}), vec ({})",
             matStr(mat), vec.size(0));
  checkSelf("addmv", self, vec, {mat.size(0)});
  Tensor s = self.dim() == 0 ? self : self.unsqueeze(-1);
  return batchedGemm(mat, vec.unsqueeze(1), &s, alpha, beta).squeeze({1});
}

Tensor baddbmm(const Tensor &self, const Tensor &batch1, const Tensor &batch2, const Scalar &beta,
               const Scalar &alpha) {
  KILN_CHECK(batch1.dim() == 3, "baddbmm: batch1 must be a 3D tensor, but got a {}-D tensor",
             batch1.dim());
  KILN_CHECK(batch2.dim() == 3, "baddbmm: batch2 must be a 3D tensor, but got a {}-D tensor",
             batch2.dim());
  checkGemmDTypes("baddbmm", batch1, batch2, "batch1 and batch2");
  KILN_CHECK(batch2.size(0) == batch1.size(0) && batch2.size(1) == batch1.size(2),
             "baddbmm: expected size for first two dimensions of batch2 tensor to be: [{}, {}] "
             "but got: [{}, {}]",
             batch1.size(0), batch1.size(2), batch2.size(0), batch2.size(1));
  checkSelf("baddbmm", self, batch2, {batch1.size(0), batch1.size(1), batch2.size(2)});
  return batchedGemm(batch1, batch2, &self, alpha, beta);
}

Tensor linear(const Tensor &input, const Tensor &weight, const std::optional<Tensor> &bias) {
  if (onDevice({&input, &weight, bias ? &*bias : nullptr}))
    return bias ? deviceOp("linear", {input, weight, *bias}) : deviceOp("linear", {input, weight});
  KILN_CHECK(weight.dim() == 1 || weight.dim() == 2,
             "linear: weight must be 1-D or 2-D, but got weight of shape {}", weight.shapeStr());
  KILN_CHECK(input.dim() > 0, "linear: input must be at least 1-D, but got a 0-D tensor");
  if (weight.dim() == 1) {
    KILN_CHECK(!bias.has_value(), "linear: mat2 must be a matrix, got 1-D tensor (a 1-D weight "
                                  "cannot take a bias)");
    return matmul(input, weight);
  }
  checkGemmDTypes("linear", input, weight, "m1 and m2");
  int64_t in = input.size(-1);
  KILN_CHECK(in == weight.size(1),
             "linear: mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{}): input {} has "
             "{} features but weight {} expects {}",
             input.numel() / std::max<int64_t>(1, in), in, weight.size(1), weight.size(0),
             input.shapeStr(), in, weight.shapeStr(), weight.size(1));
  Shape outShape(input.sizes().begin(), input.sizes().end() - 1);
  outShape.push_back(weight.size(0));
  Tensor x = input.reshape({numelOf(IntList(outShape).subspan(0, outShape.size() - 1)), in});
  Tensor r = bias ? addmm(*bias, x, weight.t()) : batchedGemm(x, weight.t());
  return r.view(outShape);
}

Tensor bilinear(const Tensor &input1, const Tensor &input2, const Tensor &weight,
                const std::optional<Tensor> &bias) {
  KILN_CHECK(input1.dim() == input2.dim(),
             "bilinear(): input dimensions do not match: got {} and {}", input1.dim(),
             input2.dim());
  KILN_CHECK(input1.dim() > 0, "bilinear(): inputs must be at least 1-D");
  for (int64_t i = 0; i + 1 < input1.dim(); ++i)
    KILN_CHECK(input1.size(i) == input2.size(i),
               "bilinear(): input batch dimensions do not match at dim {}: got {} and {}", i,
               input1.size(i), input2.size(i));
  KILN_CHECK(weight.dim() == 3, "bilinear(): weight must be 3-D, but got shape {}",
             weight.shapeStr());
  int64_t o = weight.size(0), i1 = weight.size(1), i2 = weight.size(2);
  KILN_CHECK(input1.size(-1) == i1,
             "bilinear(): input1 size does not match weight size: got {} but expected {}",
             input1.size(-1), i1);
  KILN_CHECK(input2.size(-1) == i2,
             "bilinear(): input2 size does not match weight size: got {} but expected {}",
             input2.size(-1), i2);
  if (bias)
    KILN_CHECK(bias->dim() == 1 && bias->size(0) == o,
               "bilinear(): bias size does not match weight size: got {} but expected [{}]",
               bias->shapeStr(), o);
  checkGemmDTypes("bilinear", input1, weight, "input1 and weight");
  checkGemmDTypes("bilinear", input2, weight, "input2 and weight");
  Tensor x1 = input1.reshape({-1, i1}), x2 = input2.reshape({-1, i2});
  // x1 @ W viewed [i1, o * i2] gives, per row, the o x i2 matrix to contract with x2.
  Tensor w = weight.permute({1, 0, 2}).reshape({i1, o * i2});
  Tensor t = batchedGemm(x1, w).view({x1.size(0), o, i2});
  Tensor r = batchedGemm(t, x2.unsqueeze(2)).view({x1.size(0), o});
  if (bias)
    r = add(r, *bias);
  Shape outShape(input1.sizes().begin(), input1.sizes().end() - 1);
  outShape.push_back(o);
  return r.view(outShape);
}

} // namespace kiln::ops
