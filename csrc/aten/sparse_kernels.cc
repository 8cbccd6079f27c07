// Sparse compressed layouts (CSR/CSC/BSR/BSC) are not supported on tpu, and sparse COO tensors only
// for the ops of sparse_coo_kernels.cc (what sparse embedding gradients and the optimizers taking
// them need). Every other op that would make or use one raises a single short
// NotImplementedError that names the op and what to do instead, rather than the dispatcher's list
// of every backend the op has no kernel for.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <string>

namespace torch_tpu::aten {
namespace {

std::string FullName(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

[[noreturn]] void RaiseUnsupported(const c10::OperatorHandle& op, const char* layout) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, FullName(op), ": ", layout,
                              " tensors are not supported on tpu. Use dense tensors there "
                              "(tensor.to_dense()) or keep the sparse tensor on the CPU.");
}

void SparseCoo(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, FullName(op),
                              " is not supported for sparse COO tensors on tpu (they support "
                              "construction, coalesce, to_dense, add, neg, mul/div by a "
                              "scalar, sparse_mask and moving between devices). Use "
                              "tensor.to_dense() "
                              "there or keep the sparse tensor on the CPU.");
}

void SparseCompressed(const c10::OperatorHandle& op, torch::jit::Stack*) {
  RaiseUnsupported(op, "sparse compressed (CSR/CSC/BSR/BSC)");
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&SparseCoo>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&SparseCompressed>());
}

// Compressed tensors are assembled from dense index and value tensors by composite constructors
// that the dispatcher would run for tpu as for any backend (a CPU CSR tensor's .to("tpu") builds
// one from tpu parts), so the constructors are overridden for the keys they reach: the dense
// arguments' PrivateUse1 and, through BackendSelect, SparseCsrPrivateUse1.
constexpr const char* kCompressedConstructors[] = {"_sparse_compressed_tensor_unsafe",
                                                   "_sparse_csr_tensor_unsafe",
                                                   "_sparse_csc_tensor_unsafe",
                                                   "_sparse_bsr_tensor_unsafe",
                                                   "_sparse_bsc_tensor_unsafe",
                                                   "sparse_compressed_tensor.comp_plain_value_size",
                                                   "sparse_compressed_tensor.comp_plain_value",
                                                   "sparse_csr_tensor.crow_col_value_size",
                                                   "sparse_csr_tensor.crow_col_value",
                                                   "sparse_csc_tensor.ccol_row_value_size",
                                                   "sparse_csc_tensor.ccol_row_value",
                                                   "sparse_bsr_tensor.crow_col_value_size",
                                                   "sparse_bsr_tensor.crow_col_value",
                                                   "sparse_bsc_tensor.ccol_row_value_size",
                                                   "sparse_bsc_tensor.ccol_row_value"};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : kCompressedConstructors) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&SparseCompressed>());
  }
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  for (const char* name : kCompressedConstructors) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&SparseCompressed>());
  }
}

}  // namespace
}  // namespace torch_tpu::aten
