// nn.EmbeddingBag(sparse=True)'s weight gradient on tpu. _embedding_bag_backward has a lowering
// (dense gradient, aten::_embedding_bag_backward in lowering/indexing.cc), and a lowering cannot
// return a sparse COO tensor. So this kernel sits in front of it at the autograd key: with
// sparse=true it runs PyTorch's device-generic decomposition (index_select and mul on the bag
// gradients, then embedding_sparse_backward, which wraps the tpu indices and per-position rows
// into a SparsePrivateUse1 tensor; see sparse_coo_kernels.cc), with sparse=false it goes on to
// the lowering as before. nn.Embedding(sparse=True) needs nothing here: embedding_backward is
// composite in PyTorch and reaches embedding_sparse_backward by itself.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_embedding_bag_backward_native.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

namespace torch_tpu::aten {
namespace {

at::Tensor EmbeddingBagBackward(const at::Tensor& grad, const at::Tensor& indices,
                                const at::Tensor& offsets, const at::Tensor& offset2bag,
                                const at::Tensor& bag_size, const at::Tensor& maximum_indices,
                                c10::SymInt num_weights, bool scale_grad_by_freq, int64_t mode,
                                bool sparse, const std::optional<at::Tensor>& per_sample_weights,
                                int64_t padding_idx) {
  if (sparse) {
    return at::native::_embedding_bag_backward_symint(
        grad, indices, offsets, offset2bag, bag_size, maximum_indices, std::move(num_weights),
        scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx);
  }
  // The dense gradient: the lowered kernel, below autograd (the op has no derivative).
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return at::_embedding_bag_backward_symint(grad, indices, offsets, offset2bag, bag_size,
                                            maximum_indices, std::move(num_weights),
                                            scale_grad_by_freq, mode, sparse, per_sample_weights,
                                            padding_idx);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_embedding_bag_backward", TORCH_FN(EmbeddingBagBackward));
}

}  // namespace
}  // namespace torch_tpu::aten
