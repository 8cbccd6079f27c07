"""Sparse compressed layouts are not supported on tpu, nor sparse COO tensors beyond what sparse
embedding gradients need (tests/python/test_sparse_gradients.py): one short NotImplementedError
naming the op and the alternative, never the dispatcher's dump of every backend."""

import warnings

import pytest
import torch
import torch.nn as nn

from conftest import assert_raises_exactly, assert_same

ADVICE = (" tensors are not supported on tpu. Use dense tensors there (tensor.to_dense()) or keep "
          "the sparse tensor on the CPU.")
COO = (" is not supported for sparse COO tensors on tpu (they support construction, coalesce, "
       "to_dense, add, neg, mul/div by a scalar, sparse_mask and moving between devices). Use "
       "tensor.to_dense() there or keep the sparse tensor on the CPU.")
COMPRESSED = "sparse compressed (CSR/CSC/BSR/BSC)" + ADVICE


def sparse_embedding_backward(module):
    model = module.to("tpu")
    indices = torch.tensor([1, 2, 4, 1], device="tpu")
    if isinstance(model, nn.EmbeddingBag):
        output = model(indices, torch.tensor([0, 2], device="tpu"))
    else:
        output = model(indices)
    output.sum().backward()


def coo():
    indices, values = torch.tensor([[0, 1, 1], [1, 0, 1]]), torch.tensor([1.0, 2.0, 3.0])
    return torch.sparse_coo_tensor(indices, values, (2, 2)).to("tpu")


# Paths that raised before sparse COO gradients were supported: each now runs and matches CPU.
NOW_SUPPORTED = {
    "coo_to_tpu": lambda d: torch.sparse_coo_tensor(torch.tensor([[0, 2]]),
                                                    torch.tensor([1.0, 2.0]), (3,)).to(d),
    "coo_on_tpu": lambda d: torch.sparse_coo_tensor(torch.tensor([[0, 2]]),
                                                    torch.tensor([1.0, 2.0]), (3,), device=d),
    "to_sparse": lambda d: torch.tensor([0.0, 1.0, 0.0, 2.0], device=d).to_sparse(),
    "zeros_coo": lambda d: torch.zeros(3, layout=torch.sparse_coo, device=d),
    "coo_neg": lambda d: -torch.sparse_coo_tensor(torch.tensor([[0, 2]]),
                                                  torch.tensor([1.0, 2.0]), (3,), device=d),
    "embedding_bag_sparse_grad": lambda d: sparse_grad(nn.EmbeddingBag(10, 3, sparse=True), d),
    "embedding_sparse_grad": lambda d: sparse_grad(nn.Embedding(10, 3, sparse=True), d),
}


def sparse_grad(module, device):
    torch.manual_seed(0)
    model = module.to(device)
    indices = torch.tensor([1, 2, 4, 1], device=device)
    if isinstance(model, nn.EmbeddingBag):
        output = model(indices, torch.tensor([0, 2], device=device))
    else:
        output = model(indices)
    output.sum().backward()
    return model.weight.grad


def sparse_grad_parameter():
    parameter = nn.Parameter(torch.ones(2, 2, device="tpu"))
    parameter.grad = coo()
    return parameter


@pytest.mark.parametrize("name", sorted(NOW_SUPPORTED))
def test_sparse_coo_paths_that_raised_before_now_match_cpu(name):
    cpu, tpu = NOW_SUPPORTED[name]("cpu"), NOW_SUPPORTED[name]("tpu")
    assert tpu.layout == torch.sparse_coo and tpu.device.type == "tpu"
    assert_same(tpu.to_dense(), cpu.to_dense())


CASES = {
    "coo_sum": (lambda: coo().sum(), "aten::sum.dim_IntList" + COO),
    "coo_abs": (lambda: coo().abs(), "aten::abs.out" + COO),
    "coo_sub": (lambda: torch.ones(2, 2, device="tpu") - coo(), "aten::sub.Tensor" + COO),
    "coo_matmul": (lambda: coo() @ torch.ones(2, 2, device="tpu"), "aten::mm" + COO),
    "coo_index_select": (lambda: coo().index_select(0, torch.tensor([0], device="tpu")),
                         "aten::index_select" + COO),
    "coo_div_rounding": (lambda: coo().div(2, rounding_mode="floor"),
                         "aten::div.Tensor_mode" + COO),
    "coo_times_dense": (lambda: coo() * torch.ones(2, 2, device="tpu"),
                        "aten::mul.Tensor: sparse COO tensors on tpu are multiplied only by a "
                        "scalar or a 0-dim dense tensor; got a dense factor of size [2, 2]. Use "
                        "to_dense() first."),
    "coo_to_csr": (lambda: coo().to_sparse_csr(), "aten::_to_sparse_csr" + COO),
    # CPU has no kernel for it either.
    "clip_sparse_grad": (lambda: nn.utils.clip_grad_norm_([sparse_grad_parameter()], 1.0),
                         "aten::linalg_vector_norm" + COO),
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
