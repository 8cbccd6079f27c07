"""Sparse layouts are not supported on tpu: one short NotImplementedError naming the op and the
alternative, never the dispatcher's dump of every backend."""

import warnings

import pytest
import torch
import torch.nn as nn

from conftest import assert_raises_exactly, assert_same

ADVICE = (" tensors are not supported on tpu. Use dense tensors there (tensor.to_dense(); "
          "nn.Embedding/nn.EmbeddingBag with sparse=False) or keep the sparse tensor on the CPU.")
COO = "sparse COO" + ADVICE
COMPRESSED = "sparse compressed (CSR/CSC/BSR/BSC)" + ADVICE


def sparse_embedding_backward(module):
    model = module.to("tpu")
    indices = torch.tensor([1, 2, 4, 1], device="tpu")
    if isinstance(model, nn.EmbeddingBag):
        output = model(indices, torch.tensor([0, 2], device="tpu"))
    else:
        output = model(indices)
    output.sum().backward()


CASES = {
    "coo_to_tpu": (lambda: torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]),
                                                   (3,)).to("tpu"),
                   "aten::_sparse_coo_tensor_with_dims_and_tensors: " + COO),
    "coo_on_tpu": (lambda: torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]),
                                                   (3,), device="tpu"),
                   "aten::_sparse_coo_tensor_with_dims_and_tensors: " + COO),
    "to_sparse": (lambda: torch.ones(3, device="tpu").to_sparse(),
                  "aten::_sparse_coo_tensor_with_dims_and_tensors: " + COO),
    "zeros_coo": (lambda: torch.zeros(3, layout=torch.sparse_coo, device="tpu"),
                  "aten::empty.memory_format: " + COO),
    # EmbeddingBag's backward is lowered: its sparse mode stops there, before any COO tensor.
    "embedding_bag_sparse_grad": (lambda: sparse_embedding_backward(nn.EmbeddingBag(10, 3, sparse=True)),
                                  "aten::_embedding_bag_backward: sparse gradients "
                                  "(EmbeddingBag(sparse=True)) are not supported on tpu. Use "
                                  "nn.EmbeddingBag with sparse=False (dense gradients)."),
    "embedding_sparse_grad": (lambda: sparse_embedding_backward(nn.Embedding(10, 3, sparse=True)),
                              "aten::_sparse_coo_tensor_with_dims_and_tensors: " + COO),
    "csr_to_tpu": (lambda: torch.eye(3).to_sparse_csr().to("tpu"),
                   "aten::_sparse_compressed_tensor_unsafe: " + COMPRESSED),
    "to_sparse_csr": (lambda: torch.eye(3, device="tpu").to_sparse_csr(),
                      "aten::_sparse_compressed_tensor_unsafe: " + COMPRESSED),
    "csr_from_tpu_parts": (lambda: torch.sparse_csr_tensor(
        torch.tensor([0, 1, 2], device="tpu"), torch.tensor([0, 1], device="tpu"),
        torch.tensor([1.0, 2.0], device="tpu"), (2, 2)),
        "aten::sparse_compressed_tensor.comp_plain_value_size: " + COMPRESSED),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sparse_on_tpu_is_one_short_not_implemented_error(name):
    assert_raises_exactly(NotImplementedError, CASES[name][1], CASES[name][0])


def test_dense_embeddings_and_cpu_sparse_still_work():
    torch.manual_seed(0)
    cpu = nn.EmbeddingBag(10, 3, sparse=False)
    tpu = nn.EmbeddingBag(10, 3, sparse=False)
    tpu.load_state_dict(cpu.state_dict())
    tpu.to("tpu")
    indices, offsets = torch.tensor([1, 2, 4, 1]), torch.tensor([0, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # embedding_bag may run on the CPU fallback
        cpu(indices, offsets).sum().backward()
        tpu(indices.to("tpu"), offsets.to("tpu")).sum().backward()
    assert_same(tpu.weight.grad, cpu.weight.grad)
    sparse = torch.ones(3).to_sparse() * 2
    assert sparse.layout == torch.sparse_coo and torch.equal(sparse.to_dense(), torch.full((3,), 2.0))
