// Sparse COO tensors on tpu (dispatch key SparsePrivateUse1): a SparseTensorImpl whose indices
// (sparse_dim, nnz) int64 and values (nnz, *dense_sizes) are ordinary tpu tensors. This is what
// nn.Embedding/nn.EmbeddingBag(sparse=True) produce as gradients and what SGD, Adagrad and
// SparseAdam consume. Two kinds of kernels:
// - PyTorch's own device-generic kernels (metadata, aliasing, construction, clone, resize, zero_,
//   copies between devices), which only rearrange the indices and values tensors;
// - kernels below for everything that computes, composed of dense tpu ops (sort/unique,
//   index_add_, index_put_ with accumulation, gathers), so nothing runs on the CPU.
// Any other op on a sparse COO tpu tensor raises the NotImplementedError of sparse_kernels.cc.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_to_dense_native.h>
#include <ATen/ops/_to_sparse_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>
#include <torch/library.h>

#include <vector>

namespace torch_tpu::aten {
namespace {

using at::sparse::get_sparse_impl;

// A new sparse tensor of `like`'s sizes on `values`' device and dtype.
at::Tensor MakeSparse(const at::Tensor& like, const at::Tensor& indices, const at::Tensor& values,
                      bool coalesced) {
  return at::_sparse_coo_tensor_with_dims_and_tensors(
      like.sparse_dim(), like.dense_dim(), like.sizes(), indices, values,
      values.options().layout(at::kSparse), coalesced);
}

// Makes `out` (a sparse tensor) hold `indices` and `values` with `like`'s sizes.
void AssignSparse(at::Tensor& out, const at::Tensor& like, const at::Tensor& indices,
                  const at::Tensor& values, bool coalesced) {
  get_sparse_impl(out)->resize_(like.sparse_dim(), like.dense_dim(), like.sizes());
  at::sparse::alias_into_sparse(out, indices, values);
  out._coalesced_(coalesced);
}

// Row-major linear position of each nonzero over the sparse dims: (nnz) int64.
at::Tensor FlatIndices(const at::Tensor& indices, at::IntArrayRef sizes) {
  const int64_t sparse_dim = indices.size(0);
  if (sparse_dim == 0) return at::zeros({indices.size(1)}, indices.options());
  at::Tensor flat = indices.select(0, 0);
  for (int64_t d = 1; d < sparse_dim; ++d) flat = flat.mul(sizes[d]).add(indices.select(0, d));
  return flat;
}

// The inverse of FlatIndices: (sparse_dim, n) indices of linear positions `flat` (n).
at::Tensor UnflattenIndices(const at::Tensor& flat, at::IntArrayRef sizes, int64_t sparse_dim) {
  if (sparse_dim == 0) return at::empty({0, flat.size(0)}, flat.options());
  std::vector<at::Tensor> rows(sparse_dim);
  at::Tensor rest = flat;
  for (int64_t d = sparse_dim - 1; d > 0; --d) {
    rows[d] = rest.remainder(sizes[d]);
    rest = rest.div(sizes[d], "floor");
  }
  rows[0] = rest;
  return at::stack(rows, 0);
}

// _coalesce: one entry per distinct index, in increasing row-major order, values of duplicates
// summed. unique (sorted) gives the distinct positions and each entry's group; index_add_ sums
// the groups on the device. The number of groups is read on the host, as every backend must to
// size the result.
at::Tensor Coalesce(const at::Tensor& self) {
  if (self._nnz() < 2) {
    at::Tensor result = self.clone();
    result._coalesced_(true);
    return result;
  }
  const int64_t sparse_dim = self.sparse_dim();
  const at::Tensor values = self._values();
  at::Tensor flat = FlatIndices(self._indices(), self.sizes());
  auto [unique, group, counts] = at::_unique2(flat, /*sorted=*/true, /*return_inverse=*/true,
                                              /*return_counts=*/false);
  std::vector<int64_t> value_sizes = values.sizes().vec();
  value_sizes[0] = unique.size(0);
  at::Tensor summed = at::zeros(value_sizes, values.options()).index_add_(0, group, values);
  return MakeSparse(self, UnflattenIndices(unique, self.sizes(), sparse_dim), summed, true);
}

// dense += alpha * sparse, on the device: an index_put_ with accumulation at the nonzeros.
void AddSparseIntoDense(at::Tensor& dense, const at::Tensor& sparse, const at::Scalar& alpha) {
  at::Tensor values = sparse._values();
  const at::ScalarType common = at::promoteTypes(dense.scalar_type(), sparse.scalar_type());
  TORCH_CHECK(at::canCast(common, dense.scalar_type()), "Can't convert result type ", common,
              " to output ", dense.scalar_type(), " in add operation");
  values = values.to(common);
  if (!(alpha.isIntegral(true) && alpha.to<int64_t>() == 1)) values = values.mul(alpha);
  values = values.to(dense.scalar_type());
  if (sparse._nnz() == 0) return;
  if (sparse.sparse_dim() == 0) {
    dense.add_(values.sum(0));
    return;
  }
  c10::List<std::optional<at::Tensor>> index;
  for (const at::Tensor& row : sparse._indices().unbind(0)) index.push_back(row);
  dense.index_put_(index, values, /*accumulate=*/true);
}

void CheckSameSize(const at::Tensor& dense, const at::Tensor& sparse) {
  TORCH_CHECK(dense.sizes().equals(sparse.sizes()),
              "add: expected 'self' and 'other' to have same size, but self has size ",
              dense.sizes(), " while other has size ", sparse.sizes(),
              " (FYI: dense-sparse addition does not currently support broadcasting)");
}

// add.out with a sparse operand. dense + sparse -> dense; sparse + sparse -> sparse whose
// indices and values are the two concatenated (uncoalesced, as on CUDA: coalesce() sums them).
at::Tensor& AddOut(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                   at::Tensor& out) {
  TORCH_CHECK(other.is_sparse() || !self.is_sparse(),
              "add(sparse, dense) is not supported. Use add(dense, sparse) instead.");
  TORCH_CHECK(self.device() == other.device() && self.device() == out.device(),
              "add: expected 'self', 'other' and 'out' on one device, got ", self.device(), ", ",
              other.device(), " and ", out.device());
  if (!self.is_sparse()) {
    CheckSameSize(self, other);
    TORCH_CHECK(!out.is_sparse(), "add: dense + sparse gives a dense result; got a sparse out=");
    if (!out.is_same(self)) {
      at::native::resize_output(out, self.sizes());
      out.copy_(self);
    }
    AddSparseIntoDense(out, other, alpha);
    return out;
  }
  TORCH_CHECK(out.is_sparse(), "add: sparse + sparse gives a sparse result; got a dense out=");
  TORCH_CHECK(self.sizes().equals(other.sizes()), "add: expected sizes of 'self' and 'other' to ",
              "match, but ", self.sizes(), " != ", other.sizes());
  const at::ScalarType common = at::promoteTypes(self.scalar_type(), other.scalar_type());
  TORCH_CHECK(at::canCast(common, out.scalar_type()), "Can't convert result type ", common,
              " to output ", out.scalar_type(), " in add operation");
  at::Tensor other_values = other._values().to(common);
  if (!(alpha.isIntegral(true) && alpha.to<int64_t>() == 1)) {
    other_values = other_values.mul(alpha);
  }
  other_values = other_values.to(out.scalar_type());
  at::Tensor self_values = self._values().to(out.scalar_type());
  // The result owns its indices and values (later in-place ops on it must not reach an
  // operand), except an in-place add that leaves self's own.
  const bool in_place = out.is_same(self);
  at::Tensor indices, values;
  bool coalesced = false;
  const at::Tensor* like = &self;  // whose sparse and dense dims the result has
  if (other._nnz() == 0) {
    indices = in_place ? self._indices() : self._indices().clone();
    values = in_place || !self_values.is_same(self._values()) ? self_values : self_values.clone();
    coalesced = self.is_coalesced();
  } else if (self._nnz() == 0) {
    indices = other._indices().clone();
    values = other_values.is_same(other._values()) ? other_values.clone() : other_values;
    coalesced = other.is_coalesced();
    like = &other;
  } else {
    // An empty operand may have other dims (as on CPU); two nonempty ones must agree.
    TORCH_CHECK(self.sparse_dim() == other.sparse_dim(),
                "add: expected 'self' and 'other' to have same density, but 'self' has ",
                self.sparse_dim(), " sparse dimensions while 'other' has ", other.sparse_dim(),
                " sparse dimensions");
    indices = at::cat({self._indices(), other._indices()}, 1);
    values = at::cat({self_values, other_values}, 0);
  }
  AssignSparse(out, *like, indices, values, coalesced);
  return out;
}

at::Tensor Add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  const at::ScalarType common = at::promoteTypes(self.scalar_type(), other.scalar_type());
  at::Tensor out = self.is_sparse()
                       ? at::empty({0}, self.options().dtype(common))
                       : at::empty({0}, self.options().dtype(common).layout(at::kStrided));
  return AddOut(self, other, alpha, out);
}

at::Tensor& AddInPlace(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  return AddOut(self, other, alpha, self);
}

// mul/div of a sparse tensor by a scalar (a Python number, or a 0-dim tensor on the CPU or tpu):
// the values are scaled, the indices kept. In place, the values tensor itself is scaled, as on
// CPU, so tensors sharing it see the change.
enum class Scale { kMul, kDiv };

at::Tensor ScaleValues(const at::Tensor& values, const at::Tensor& factor, Scale scale) {
  return scale == Scale::kMul ? values.mul(factor) : values.div(factor);
}

at::Tensor& ScaleInto(const at::Tensor& sparse, const at::Tensor& factor, Scale scale,
                      at::Tensor& out) {
  if (out.is_same(sparse)) {
    at::Tensor values = sparse._values();
    scale == Scale::kMul ? values.mul_(factor) : values.div_(factor);
    return out;
  }
  at::Tensor values = ScaleValues(sparse._values(), factor, scale).to(out.scalar_type());
  AssignSparse(out, sparse, sparse._indices().clone(), values, sparse.is_coalesced());
  return out;
}

at::Tensor Scaled(const at::Tensor& sparse, const at::Tensor& factor, Scale scale) {
  return MakeSparse(sparse, sparse._indices().clone(), ScaleValues(sparse._values(), factor, scale),
                    sparse.is_coalesced());
}

// neg of a sparse tensor, as CPU's: the values negated, the indices (and coalesced flag) kept;
// in place, the values tensor itself is negated. Optimizers with maximize=True negate sparse
// gradients (SGD, Adagrad, SparseAdam).
at::Tensor& NegOut(const at::Tensor& self, at::Tensor& out) {
  if (out.is_same(self)) {
    self._values().neg_();
    return out;
  }
  AssignSparse(out, self, self._indices().clone(), self._values().neg().to(out.scalar_type()),
               self.is_coalesced());
  return out;
}

at::Tensor Neg(const at::Tensor& self) {
  return MakeSparse(self, self._indices().clone(), self._values().neg(), self.is_coalesced());
}

at::Tensor& NegInPlace(at::Tensor& self) { return NegOut(self, self); }

// Which of (self, other) is the sparse tensor and which the 0-dim factor; raises otherwise.
std::pair<at::Tensor, at::Tensor> SparseAndScalar(const char* op, const at::Tensor& self,
                                                  const at::Tensor& other) {
  const bool swap = !self.is_sparse();
  const at::Tensor& sparse = swap ? other : self;
  const at::Tensor& factor = swap ? self : other;
  TORCH_CHECK_NOT_IMPLEMENTED(!factor.is_sparse() && factor.dim() == 0, op,
                              ": sparse COO tensors on tpu are multiplied only by a scalar or a "
                              "0-dim dense tensor; got a ",
                              factor.is_sparse() ? "sparse" : "dense", " factor of size ",
                              factor.sizes(), ". Use to_dense() first.");
  return {sparse, factor};
}

at::Tensor& MulOut(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  auto [sparse, factor] = SparseAndScalar("aten::mul.out", self, other);
  return ScaleInto(sparse, factor, Scale::kMul, out);
}

at::Tensor Mul(const at::Tensor& self, const at::Tensor& other) {
  auto [sparse, factor] = SparseAndScalar("aten::mul.Tensor", self, other);
  return Scaled(sparse, factor, Scale::kMul);
}

at::Tensor& MulInPlace(at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK_NOT_IMPLEMENTED(self.is_sparse(), "aten::mul_.Tensor: multiplying a dense tpu ",
                              "tensor in place by a sparse COO one is not supported; use ",
                              "to_dense() first.");
  return MulOut(self, other, self);
}

// CPU's checks for sparse / divisor.
void CheckDivision(const char* op, const at::Tensor& self, const at::Tensor& divisor) {
  TORCH_CHECK_NOT_IMPLEMENTED(self.is_sparse(), op, ": dividing by a sparse COO tpu tensor is ",
                              "not supported");
  TORCH_CHECK(divisor.dim() == 0, "Sparse division requires a scalar or zero-dim dense tensor ",
              "divisor (got shape ", divisor.sizes(), " for divisor)");
  TORCH_CHECK(!divisor.is_sparse(), "Sparse division requires a scalar or zero-dim dense tensor ",
              "divisor (got a sparse divisor)");
}

at::Tensor& DivOut(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  CheckDivision("aten::div.out", self, other);
  return ScaleInto(self, other, Scale::kDiv, out);
}

at::Tensor Div(const at::Tensor& self, const at::Tensor& other) {
  CheckDivision("aten::div.Tensor", self, other);
  return Scaled(self, other, Scale::kDiv);
}

at::Tensor& DivInPlace(at::Tensor& self, const at::Tensor& other) {
  return DivOut(self, other, self);
}

// sparse_mask(dense, mask): the dense values at the mask's nonzeros, with the mask's indices.
at::Tensor SparseMask(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.sizes().equals(self.sizes()), "sparse_mask(): operands have incompatible ",
              "sizes; self has size ", self.sizes(), " but mask has size ", mask.sizes());
  TORCH_CHECK_NOT_IMPLEMENTED(!self.is_sparse(), "aten::sparse_mask: masking a sparse COO tpu ",
                              "tensor is not supported; use to_dense() first.");
  TORCH_CHECK(mask.is_sparse(), "sparse_mask(): expected a sparse COO mask, got ",
              mask.layout());
  TORCH_CHECK(self.device() == mask.device(), "sparse_mask(): expected self and mask on one ",
              "device, got ", self.device(), " and ", mask.device());
  const at::Tensor indices = mask._indices();
  at::Tensor values;
  if (mask.sparse_dim() == 0) {
    std::vector<int64_t> sizes{mask._nnz()};
    for (int64_t size : self.sizes()) sizes.push_back(size);
    values = self.unsqueeze(0).expand(sizes).clone();
  } else {
    c10::List<std::optional<at::Tensor>> index;
    for (const at::Tensor& row : indices.unbind(0)) index.push_back(row);
    values = self.index(index);
  }
  return at::_sparse_coo_tensor_with_dims_and_tensors(
      mask.sparse_dim(), mask.dense_dim(), mask.sizes(), indices.clone(), values,
      self.options().layout(at::kSparse), mask.is_coalesced());
}

// The overloads of PyTorch's to_sparse kernels, one per schema.
using ToSparse = at::Tensor (*)(const at::Tensor&, std::optional<at::Layout>,
                                at::OptionalIntArrayRef, std::optional<int64_t>);
using ToSparseDim = at::Tensor (*)(const at::Tensor&, int64_t);

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  // PyTorch's device-generic kernels: they arrange tensors and call other ops, never compute.
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(at::native::new_with_dims_sparse));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors",
         TORCH_FN(at::native::new_with_dims_and_tensor_sparse_symint));
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse_symint));
  m.impl("empty_like", TORCH_FN(at::native::empty_like_sparse_coo));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("clone", TORCH_FN(at::native::clone_sparse));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_wrapper_));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
  m.impl("_to_sparse", TORCH_FN(static_cast<ToSparse>(at::native::sparse_coo_to_sparse)));
  m.impl("_to_sparse.sparse_dim",
         TORCH_FN(static_cast<ToSparseDim>(at::native::sparse_coo_to_sparse)));
  m.impl("zero_", TORCH_FN(at::native::zero_sparse_));
  m.impl("sparse_resize_", TORCH_FN(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(at::native::sparse_resize_and_clear_));
  m.impl("resize_as_sparse_", TORCH_FN(at::native::resize_as_sparse_));
  // zeros + add_(sparse): the add_ below.
  m.impl("_to_dense", TORCH_FN(at::native::sparse_to_dense));
  // Kernels of this file.
  m.impl("_coalesce", TORCH_FN(Coalesce));
  m.impl("add.out", TORCH_FN(AddOut));
  m.impl("add.Tensor", TORCH_FN(Add));
  m.impl("add_.Tensor", TORCH_FN(AddInPlace));
  m.impl("mul.out", TORCH_FN(MulOut));
  m.impl("mul.Tensor", TORCH_FN(Mul));
  m.impl("mul_.Tensor", TORCH_FN(MulInPlace));
  m.impl("div.out", TORCH_FN(DivOut));
  m.impl("div.Tensor", TORCH_FN(Div));
  m.impl("div_.Tensor", TORCH_FN(DivInPlace));
  m.impl("sparse_mask", TORCH_FN(SparseMask));
  m.impl("neg.out", TORCH_FN(NegOut));
  m.impl("neg", TORCH_FN(Neg));
  m.impl("neg_", TORCH_FN(NegInPlace));
}

// dense.to_sparse(): PyTorch's device-generic conversion (nonzero, then an index gather of the
// values), all of it tpu ops.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_to_sparse", TORCH_FN(static_cast<ToSparse>(at::native::dense_to_sparse)));
  m.impl("_to_sparse.sparse_dim",
         TORCH_FN(static_cast<ToSparseDim>(at::native::dense_to_sparse)));
}

}  // namespace
}  // namespace torch_tpu::aten
