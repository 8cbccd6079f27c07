"""Sparse COO tensors on tpu, as sparse embedding gradients use them: nn.Embedding and
nn.EmbeddingBag with sparse=True, gradient accumulation, and the optimizers that take sparse
gradients (SGD, Adagrad, SparseAdam), each compared with PyTorch on the CPU. Nothing may run on
the CPU fallback."""

import copy

import pytest
import torch
import torch.nn as nn

import torch_tpu
from conftest import assert_like_cpu, assert_raises_exactly


@pytest.fixture(autouse=True)
def no_fallback():
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    yield
    assert torch_tpu.metrics()["fallback_ops"] == {}


def assert_same_sparse(tpu_tensor, cpu_tensor, **tolerances):
    """Same sparse tensor: layout, device, dtype, sizes, and coalesced, indices and values."""
    assert tpu_tensor.layout == torch.sparse_coo and tpu_tensor.device.type == "tpu"
    assert tpu_tensor.dtype == cpu_tensor.dtype and tpu_tensor.shape == cpu_tensor.shape
    assert tpu_tensor.sparse_dim() == cpu_tensor.sparse_dim()
    assert tpu_tensor.dense_dim() == cpu_tensor.dense_dim()
    tpu_tensor, cpu_tensor = tpu_tensor.coalesce(), cpu_tensor.coalesce()
    assert tpu_tensor._indices().device.type == "tpu"
    assert torch.equal(tpu_tensor._indices().cpu(), cpu_tensor._indices())
    torch.testing.assert_close(tpu_tensor._values().cpu(), cpu_tensor._values(), **tolerances)


def duplicated(device, dtype=torch.float32):
    """(4, 3, 2) with 2 sparse dims, one dense dim, and duplicate indices out of order."""
    indices = torch.tensor([[3, 0, 1, 3, 0, 2], [2, 1, 0, 2, 1, 2]])
    values = torch.arange(12, dtype=dtype).reshape(6, 2) - 4
    return torch.sparse_coo_tensor(indices, values, (4, 3, 2), device=device)


def test_construction_metadata_and_moves():
    cpu = duplicated("cpu")
    for tpu in (duplicated("tpu"), cpu.to("tpu"), cpu.tpu()):
        assert tpu.device == torch.device("tpu", 0) and tpu.is_sparse
        metadata = (tpu.sparse_dim(), tpu.dense_dim(), tpu._nnz(), tpu.is_coalesced())
        assert metadata == (2, 1, 6, False)
        assert tpu._indices().device.type == "tpu" and tpu._values().device.type == "tpu"
        assert torch.equal(tpu._indices().cpu(), cpu._indices())
        assert torch.equal(tpu._values().cpu(), cpu._values())
        back = tpu.to("cpu")
        assert back.is_sparse and back.device.type == "cpu" and not back.is_coalesced()
        assert torch.equal(back.to_dense(), cpu.to_dense())
    assert_like_cpu(lambda d: duplicated(d).indices())
    assert_like_cpu(lambda d: duplicated(d).values())
    coalesced = duplicated("tpu").coalesce()
    assert coalesced.is_coalesced() and coalesced.indices().device.type == "tpu"
    assert_like_cpu(lambda d: duplicated(d).coalesce().values())
    assert_like_cpu(lambda d: duplicated(d).coalesce().indices())
    dense = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    for sparse_dim in (1, 2):
        tpu, cpu = dense.to("tpu").to_sparse(sparse_dim), dense.to_sparse(sparse_dim)
        assert tpu.is_coalesced() == cpu.is_coalesced()
        assert_same_sparse(tpu, cpu)


def test_size_inferred_and_factories():
    indices, values = torch.tensor([[0, 4, 2]]), torch.tensor([1.0, 2.0, 3.0])
    tpu = torch.sparse_coo_tensor(indices.to("tpu"), values.to("tpu"))
    assert tpu.shape == (5,) and tpu.device.type == "tpu"
    zeros = torch.zeros(3, 2, layout=torch.sparse_coo, device="tpu")
    assert zeros.is_sparse and zeros._nnz() == 0 and zeros.device.type == "tpu"
    assert torch.equal(zeros.to_dense().cpu(), torch.zeros(3, 2))
    empty = torch.empty(3, layout=torch.sparse_coo, device="tpu")
    assert empty.is_sparse and empty._nnz() == 0


def test_printing_shows_indices_values_and_device():
    cpu = torch.sparse_coo_tensor(torch.tensor([[0, 2, 0]]), torch.tensor([1.0, 2.0, 3.0]), (3,))
    text = repr(cpu.to("tpu"))
    assert text == repr(cpu).replace("size=(3,)", "device='tpu:0', size=(3,)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_coalesce_sums_duplicates_in_index_order(dtype):
    cpu = duplicated("cpu", dtype).coalesce()
    tpu = duplicated("tpu", dtype).coalesce()
    assert tpu.is_coalesced() and tpu._nnz() == cpu._nnz() and tpu.dtype == dtype
    assert torch.equal(tpu._indices().cpu(), cpu._indices())
    assert torch.equal(tpu._values().cpu(), cpu._values())
    assert_like_cpu(lambda d: duplicated(d, dtype).to_dense())
    # Fewer than two entries, or none: already coalesced.
    single = torch.sparse_coo_tensor(torch.tensor([[1]]), torch.tensor([2.0]), (3,), device="tpu")
    assert single.coalesce().is_coalesced()
    assert torch.zeros(3, layout=torch.sparse_coo, device="tpu").coalesce()._nnz() == 0


def test_add_dense_and_sparse():
    def dense(device):
        return torch.arange(24, dtype=torch.float32, device=device).reshape(4, 3, 2)

    assert_like_cpu(lambda d: dense(d) + duplicated(d))
    assert_like_cpu(lambda d: dense(d).add_(duplicated(d), alpha=-0.5))
    assert_like_cpu(lambda d: torch.add(dense(d), duplicated(d), alpha=2))
    # A strided view is written through.
    assert_like_cpu(lambda d: dense(d).transpose(0, 2).contiguous().transpose(0, 2)
                    .add_(duplicated(d)).sum(0))
    assert_like_cpu(lambda d: dense(d).to(torch.int64).add_(duplicated(d)))
    assert_like_cpu(lambda d: dense(d).to(torch.int64) + duplicated(d, torch.int64))
    assert_like_cpu(lambda d: duplicated(d) + dense(d))
    assert_like_cpu(lambda d: torch.ones(4, 3, device=d) + duplicated(d))


def test_add_sparse_and_sparse_concatenates():
    other = torch.sparse_coo_tensor(torch.tensor([[1, 3], [1, 2]]),
                                    torch.tensor([[10.0, 20.0], [30.0, 40.0]]), (4, 3, 2))
    tpu = duplicated("tpu") + other.to("tpu")
    assert tpu._nnz() == 8 and not tpu.is_coalesced()
    assert_same_sparse(tpu, duplicated("cpu") + other)
    accumulated = duplicated("tpu")
    accumulated.add_(other.to("tpu"), alpha=3)
    assert_same_sparse(accumulated, duplicated("cpu").add_(other, alpha=3))
    empty = torch.zeros(4, 3, 2, layout=torch.sparse_coo, device="tpu")
    assert_same_sparse(empty + other.to("tpu"), other)
    assert_like_cpu(lambda d: duplicated(d) + torch.ones(4, 3).to_sparse().to(d))
    assert_like_cpu(lambda d: duplicated(d) + torch.ones(4, 3, 2).to_sparse(1).to(d))


def test_neg_keeps_indices_and_negates_values():
    for coalesce in (False, True):
        dense = torch.tensor([[0.0, 2.5, 0.0], [-1.0, 0.0, 4.0]])
        source = dense.to_sparse()
        source = source.coalesce() if coalesce else torch.sparse_coo_tensor(
            source._indices(), source._values(), source.shape)
        on_tpu = source.to("tpu")
        for result, expected in [(-on_tpu, -source), (torch.neg(on_tpu), torch.neg(source))]:
            assert result.is_sparse and result.is_coalesced() == expected.is_coalesced()
            torch.testing.assert_close(result.to_dense().cpu(), expected.to_dense())
        values = on_tpu._values()
        assert on_tpu.neg_() is on_tpu  # in place: the values tensor itself
        torch.testing.assert_close(values.cpu(), -source._values())


def test_mul_div_by_scalars():
    assert_same_sparse(duplicated("tpu") * 2.5, duplicated("cpu") * 2.5)
    assert_same_sparse(3 * duplicated("tpu"), 3 * duplicated("cpu"))
    assert_same_sparse(duplicated("tpu") * torch.tensor(0.5, device="tpu"), duplicated("cpu") * 0.5)
    assert_same_sparse(duplicated("tpu") / 4, duplicated("cpu") / 4)
    assert_same_sparse(duplicated("tpu", torch.int64) / 4, duplicated("cpu", torch.int64) / 4)
    tpu, cpu = duplicated("tpu"), duplicated("cpu")
    values = tpu._values()
    tpu.mul_(0.5).div_(torch.tensor(4.0, device="tpu"))
    cpu.mul_(0.5).div_(4.0)
    assert_same_sparse(tpu, cpu)
    assert torch.equal(values.cpu(), cpu._values())  # in place: the values tensor itself changed
    assert not tpu.is_coalesced()
    assert_like_cpu(lambda d: duplicated(d) / torch.ones(2, device=d))
    assert_raises_exactly(
        NotImplementedError,
        "aten::mul.Tensor: sparse COO tensors on tpu are multiplied only by a scalar or a 0-dim "
        "dense tensor; got a dense factor of size [4, 3, 2]. Use to_dense() first.",
        lambda: duplicated("tpu") * torch.ones(4, 3, 2, device="tpu"))


def test_zero_clone_and_sparse_mask():
    tpu = duplicated("tpu")
    copy_ = tpu.clone()
    tpu.zero_()
    assert tpu._nnz() == 0 and tpu.shape == (4, 3, 2)
    assert_same_sparse(copy_, duplicated("cpu"))
    dense = torch.arange(24, dtype=torch.float32).reshape(4, 3, 2)
    tpu_mask = dense.to("tpu").sparse_mask(duplicated("tpu").coalesce())
    cpu_mask = dense.sparse_mask(duplicated("cpu").coalesce())
    assert tpu_mask.is_coalesced()
    assert torch.equal(tpu_mask._indices().cpu(), cpu_mask._indices())
    assert torch.equal(tpu_mask._values().cpu(), cpu_mask._values())
    assert_like_cpu(lambda d: torch.ones(2, 2, device=d).sparse_mask(duplicated(d)))


# ---- gradients ---------------------------------------------------------------------------------

def embedding_grad(module, device, *inputs, **kwargs):
    module = copy.deepcopy(module).to(device)
    moved = [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]
    kwargs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    output = module(*moved, **kwargs)
    scale = torch.linspace(-1, 2, output.numel()).reshape(output.shape)
    (output * scale.to(device)).sum().backward()
    return module.weight.grad


@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_sparse_grad(padding_idx):
    torch.manual_seed(0)
    module = nn.Embedding(10, 3, sparse=True, padding_idx=padding_idx)
    indices = torch.tensor([[1, 2, 4], [2, 9, 1]])  # duplicates and the padding index
    tpu = embedding_grad(module, "tpu", indices)
    cpu = embedding_grad(module, "cpu", indices)
    assert tpu.is_sparse and tpu._nnz() == cpu._nnz()
    assert_same_sparse(tpu, cpu)


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("padding_idx", [None, 4])
def test_embedding_bag_sparse_grad(mode, include_last_offset, padding_idx):
    torch.manual_seed(0)
    module = nn.EmbeddingBag(10, 3, mode=mode, sparse=True, include_last_offset=include_last_offset,
                             padding_idx=padding_idx)
    indices, offsets = torch.tensor([1, 2, 4, 1, 7, 4, 4]), torch.tensor([0, 2, 2, 5])
    if include_last_offset:  # the last offset closes the last bag
        offsets = torch.tensor([0, 2, 2, 5, 7])
    tpu = embedding_grad(module, "tpu", indices, offsets)
    cpu = embedding_grad(module, "cpu", indices, offsets)
    assert_same_sparse(tpu, cpu)


def test_embedding_bag_per_sample_weights_and_2d_input():
    torch.manual_seed(0)
    module = nn.EmbeddingBag(10, 3, mode="sum", sparse=True)
    indices, offsets, weights = torch.tensor([1, 2, 4, 1, 7]), torch.tensor([0, 2]), torch.rand(5)
    assert_same_sparse(embedding_grad(module, "tpu", indices, offsets, per_sample_weights=weights),
                       embedding_grad(module, "cpu", indices, offsets, per_sample_weights=weights))
    bags = torch.tensor([[1, 2, 1], [3, 3, 0]])
    assert_same_sparse(embedding_grad(module, "tpu", bags), embedding_grad(module, "cpu", bags))


def test_sparse_grad_errors_match_cpu():
    def scale_by_freq(device):
        nn.Embedding(10, 3, sparse=True, scale_grad_by_freq=True).to(device)(
            torch.tensor([1, 1], device=device)).sum().backward()

    assert_like_cpu(scale_by_freq)
    assert_like_cpu(lambda d: nn.EmbeddingBag(10, 3, mode="max", sparse=True).to(d)(
        torch.tensor([1, 2], device=d), torch.tensor([0], device=d)))


def one_bag(model, indices, device):
    return model(torch.tensor(indices, device=device), torch.tensor([0], device=device))


def test_gradients_accumulate_into_grad():
    torch.manual_seed(0)
    module = nn.EmbeddingBag(10, 4, sparse=True)
    grads = {}
    for device in ("cpu", "tpu"):
        model = copy.deepcopy(module).to(device)
        for indices in ([1, 2, 3, 1], [3, 5, 5, 0]):
            model(torch.tensor(indices, device=device), torch.tensor([0, 2], device=device)
                  ).pow(2).sum().backward()
        grads[device] = model.weight.grad
    assert grads["tpu"].is_sparse
    assert_same_sparse(grads["tpu"], grads["cpu"])
    # A dense gradient on top of a sparse one makes it dense, and the other way round.
    for device in ("cpu", "tpu"):
        model = copy.deepcopy(module).to(device)
        one_bag(model, [1, 2], device).sum().backward()
        model.weight.sum().backward()
        one_bag(model, [2, 2], device).sum().backward()
        grads[device] = model.weight.grad
    assert not grads["tpu"].is_sparse
    torch.testing.assert_close(grads["tpu"].cpu(), grads["cpu"])
    # zero_grad(set_to_none=False) empties a sparse grad in place; the next backward adds to it.
    for device in ("cpu", "tpu"):
        model = copy.deepcopy(module).to(device)
        one_bag(model, [1, 2], device).sum().backward()
        torch.optim.SGD(model.parameters(), lr=0.1).zero_grad(set_to_none=False)
        assert model.weight.grad.is_sparse and model.weight.grad._nnz() == 0
        one_bag(model, [3, 3], device).sum().backward()
        grads[device] = model.weight.grad
    assert_same_sparse(grads["tpu"], grads["cpu"])


# ---- optimizers --------------------------------------------------------------------------------

OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    "sgd_single_tensor": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.5, foreach=False),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01),
    "adagrad_single_tensor": lambda p: torch.optim.Adagrad(p, lr=0.1, foreach=False),
    "sparse_adam": lambda p: torch.optim.SparseAdam(p, lr=0.01),
    # maximize=True negates the sparse gradient (aten::neg on a sparse COO tensor).
    "sgd_maximize": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, maximize=True),
    "adagrad_maximize": lambda p: torch.optim.Adagrad(p, lr=0.1, maximize=True),
    "sparse_adam_maximize": lambda p: torch.optim.SparseAdam(p, lr=0.01, maximize=True),
}

BATCHES = [([1, 2, 4, 1], [0, 2]), ([3, 3, 9, 0, 1], [0, 1, 4]), ([5, 2], [0, 1])]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_steps_match_cpu(name):
    torch.manual_seed(0)
    module = nn.EmbeddingBag(10, 3, mode="mean", sparse=True)
    weights = {}
    for device in ("cpu", "tpu"):
        model = copy.deepcopy(module).to(device)
        optimizer = OPTIMIZERS[name](model.parameters())
        for indices, offsets in BATCHES:
            optimizer.zero_grad()
            output = model(torch.tensor(indices, device=device),
                           torch.tensor(offsets, device=device))
            output.pow(2).sum().backward()
            optimizer.step()
        weights[device] = model.weight.detach()
    torch.testing.assert_close(weights["tpu"].cpu(), weights["cpu"])


def test_sgd_weight_decay_with_sparse_grad_raises_like_cpu():
    def step(device):
        model = nn.Embedding(10, 3, sparse=True).to(device)
        model(torch.tensor([1, 2], device=device)).sum().backward()
        torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.1).step()

    assert_like_cpu(step)


class TinyDlrm(nn.Module):
    """Two sparse embedding tables and a dense tower, their outputs concatenated into a top MLP."""

    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList([nn.EmbeddingBag(20, 4, mode="sum", sparse=True),
                                     nn.EmbeddingBag(15, 4, mode="mean", sparse=True)])
        self.bottom = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, dense, sparse):
        features = [self.bottom(dense)]
        features += [table(*bags) for table, bags in zip(self.tables, sparse)]
        return self.top(torch.cat(features, dim=1)).squeeze(1)


def test_tiny_dlrm_trains_like_cpu():
    torch.manual_seed(0)
    model = TinyDlrm()
    generator = torch.Generator().manual_seed(1)
    steps = []
    for _ in range(3):
        dense = torch.randn(4, 3, generator=generator)
        sparse = [(torch.randint(0, 20, (9,), generator=generator), torch.tensor([0, 2, 5, 6])),
                  (torch.randint(0, 15, (6,), generator=generator), torch.tensor([0, 1, 3, 3]))]
        steps.append((dense, sparse, torch.rand(4, generator=generator)))
    results = {}
    for device in ("cpu", "tpu"):
        trained = copy.deepcopy(model).to(device)
        sparse_params = [p for t in trained.tables for p in t.parameters()]
        dense_params = list(trained.bottom.parameters()) + list(trained.top.parameters())
        optimizers = [torch.optim.SparseAdam(sparse_params, lr=0.05),
                      torch.optim.Adam(dense_params, lr=0.01)]
        losses = []
        for dense, sparse, target in steps:
            for optimizer in optimizers:
                optimizer.zero_grad()
            moved = [(i.to(device), o.to(device)) for i, o in sparse]
            loss = nn.functional.binary_cross_entropy_with_logits(
                trained(dense.to(device), moved), target.to(device))
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
            losses.append(loss.item())
        results[device] = (losses, {k: v.cpu() for k, v in trained.state_dict().items()})
    torch.testing.assert_close(results["tpu"][0], results["cpu"][0])
    for key, value in results["cpu"][1].items():
        torch.testing.assert_close(results["tpu"][1][key], value, msg=key)
