"""How eager kernels hold their arguments: the common ops' kernels are unboxed and borrow the
caller's tensors (no reference taken, so no PyObject incref under the GIL per operand); the
caller's tensors keep their reference counts, in-place ops return the tensor they were given, and
tensors are freed as soon as Python drops them, in every eager mode and after errors."""
import gc
import sys
import weakref

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

MODES = ["strict", "defer_and_fuse"]


def random_pair(*shapes):
    """Random CPU tensors of `shapes`, and their copies on tpu."""
    cpu = [torch.randn(*shape) for shape in shapes]
    return cpu, [tensor.to("tpu") for tensor in cpu]


def test_common_ops_have_unboxed_kernels():
    names = set(torch_tpu._C._unboxed_lowered_overload_names())
    for name in ["aten::add.Tensor", "aten::mul.Tensor", "aten::add_.Tensor", "aten::mm",
                 "aten::addmm", "aten::native_layer_norm", "aten::_softmax", "aten::gelu",
                 "aten::sum.dim_IntList", "aten::max.dim", "aten::relu", "aten::clone",
                 "aten::native_batch_norm_backward", "aten::embedding_dense_backward",
                 "aten::nll_loss_backward", "aten::max_pool2d_with_indices"]:
        assert name in names, name
    # Ops whose calls need the boxed kernel's handling keep it: out= variants, foreach lists,
    # index lists, and fill_ (which writes an expanded tensor's distinct elements).
    for name in ["aten::add.out", "aten::_foreach_add.List", "aten::index.Tensor",
                 "aten::fill_.Scalar"]:
        assert name not in names, name
    assert names <= set(torch_tpu._C._lowered_overload_names())


@pytest.mark.parametrize("mode", MODES)
def test_arguments_keep_their_reference_counts(mode):
    with torch_tpu.eager_mode(mode):
        (x_cpu, w_cpu), (x, w) = random_pair((8, 8), (8,))
        before = (sys.getrefcount(x), sys.getrefcount(w))
        results = [x + w, x * 2, torch.mm(x, x), torch.addmm(w, x, x), F.gelu(x),
                   torch.softmax(x, -1), x.sum(0), F.layer_norm(x, (8,), w, w),
                   torch.clamp(x, -0.5, 0.5)]
        values, indices = x.max(dim=1)
        assert (sys.getrefcount(x), sys.getrefcount(w)) == before
        expected = [x_cpu + w_cpu, x_cpu * 2, torch.mm(x_cpu, x_cpu),
                    torch.addmm(w_cpu, x_cpu, x_cpu), F.gelu(x_cpu), torch.softmax(x_cpu, -1),
                    x_cpu.sum(0), F.layer_norm(x_cpu, (8,), w_cpu, w_cpu),
                    torch.clamp(x_cpu, -0.5, 0.5)]
        for result, want in zip(results, expected):
            torch.testing.assert_close(result.cpu(), want)
        want_values, want_indices = x_cpu.max(dim=1)
        torch.testing.assert_close(values.cpu(), want_values)
        assert torch.equal(indices.cpu(), want_indices)
        # The arguments themselves are untouched and still readable.
        assert torch.equal(x.cpu(), x_cpu) and torch.equal(w.cpu(), w_cpu)


@pytest.mark.parametrize("mode", MODES)
def test_in_place_ops_return_the_tensor_given(mode):
    with torch_tpu.eager_mode(mode):
        (x_cpu, y_cpu), (x, y) = random_pair((4, 5), (4, 5))
        before = sys.getrefcount(x)
        assert x.add_(y, alpha=2) is x
        assert x.mul_(3) is x
        assert x.relu_() is x
        assert x.addcmul_(y, y, value=0.5) is x
        assert sys.getrefcount(x) == before
        want = (x_cpu.add_(y_cpu, alpha=2).mul_(3).relu_()).addcmul_(y_cpu, y_cpu, value=0.5)
        torch.testing.assert_close(x.cpu(), want)


@pytest.mark.parametrize("mode", MODES)
def test_tensors_are_freed_when_python_drops_them(mode):
    with torch_tpu.eager_mode(mode):
        gc.collect()  # earlier tests' garbage would be freed during this one
        torch.tpu.synchronize()
        baseline = torch.tpu.memory_allocated()
        a = torch.randn(64, 64, device="tpu")
        b = torch.randn(64, device="tpu")
        refs = [weakref.ref(a), weakref.ref(b)]
        c = a + b
        c.mul_(a)
        d = F.layer_norm(c, (64,), b, b).sum()
        refs.append(weakref.ref(c))
        assert d.item() == pytest.approx(d.cpu().item())
        del a, b, c, d
        gc.collect()
        assert [ref() for ref in refs] == [None, None, None]
        torch.tpu.synchronize()
        assert torch.tpu.memory_allocated() == baseline


@pytest.mark.parametrize("mode", MODES)
def test_a_failing_op_leaves_its_arguments_intact(mode):
    with torch_tpu.eager_mode(mode):
        (x_cpu, y_cpu), (x, y) = random_pair((3, 4), (5, 6))
        before = (sys.getrefcount(x), sys.getrefcount(y))
        with pytest.raises(RuntimeError, match="must match the size"):
            x + y
        with pytest.raises(RuntimeError):
            x.add_(y)
        with pytest.raises(RuntimeError):
            torch.mm(x, y)
        assert (sys.getrefcount(x), sys.getrefcount(y)) == before
        assert torch.equal(x.cpu(), x_cpu) and torch.equal(y.cpu(), y_cpu)
        torch.testing.assert_close((x * 2).cpu(), x_cpu * 2)


def test_boxed_calls_of_unboxed_kernels_agree():
    # torch.ops calls the kernel boxed (the dispatcher boxes into the unboxed kernel).
    (x_cpu, y_cpu), (x, y) = random_pair((6, 7), (6, 7))
    torch.testing.assert_close(torch.ops.aten.add.Tensor(x, y, alpha=3).cpu(),
                               torch.ops.aten.add.Tensor(x_cpu, y_cpu, alpha=3))
    out = torch.ops.aten.native_layer_norm.default(x, [7], None, None, 1e-5)
    want = torch.ops.aten.native_layer_norm.default(x_cpu, [7], None, None, 1e-5)
    for got, expected in zip(out, want):
        torch.testing.assert_close(got.cpu(), expected)
    z = x.clone()
    assert torch.ops.aten.mul_.Tensor(z, y) is z
    torch.testing.assert_close(z.cpu(), x_cpu * y_cpu)
