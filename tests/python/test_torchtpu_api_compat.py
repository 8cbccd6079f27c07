"""Entry points of earlier TorchTPU releases, called the way their users call them:
torch_tpu.api.tpu_device() and torch_tpu._internal.pallas.jax_op(name, fn, ...), a named form of
torch.tpu.pallas.jax_op. Kernels are compared with the same computation in PyTorch on CPU."""

import jax
import jax.numpy as jnp
import pytest
import torch

import torch_tpu
from torch_tpu._internal.pallas import jax_op
from torch_tpu.api import tpu_device


def test_tpu_device_is_the_tpu_device():
    device = tpu_device()
    assert device == torch.device("tpu")
    x = torch.arange(6.0).to(tpu_device())
    assert x.device == torch.device("tpu", torch.tpu.current_device())
    torch.testing.assert_close((x * 2).cpu(), torch.arange(6.0) * 2)


def _relu(x: jax.Array) -> jax.Array:
    return jnp.maximum(x, 0)


relu = jax_op("compat_test::relu", _relu)


def test_named_jax_op_matches_cpu_without_fallback():
    x = torch.randn(4, 5)
    torch_tpu.reset_metrics()
    got = relu(x.to(tpu_device()))
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), torch.relu(x))
    assert not torch_tpu.metrics()["fallback_ops"]


def _step(x: jax.Array, state: jax.Array, weight: jax.Array):
    new_state = state * 0.5 + x.sum(0)
    return new_state, jnp.tanh(x @ weight)


def test_tuple_results_and_donated_state_updated_in_place():
    # The pattern of kernels written for TorchTPU: the new state comes back as a result and the
    # caller copies it into the donated input.
    step = jax_op("compat_test::step", _step, donate_argnums=(1,))
    x, state, weight = torch.randn(3, 4), torch.randn(4), torch.randn(4, 2)
    state_tpu = state.to("tpu")
    new_state, out = step(x.to("tpu"), state_tpu, weight.to("tpu"))
    state_tpu.copy_(new_state)
    torch.testing.assert_close(state_tpu.cpu(), state * 0.5 + x.sum(0))
    torch.testing.assert_close(out.cpu(), torch.tanh(x @ weight))


def test_positional_and_keyword_statics():
    affine = jax_op("compat_test::affine", lambda x, scale, y, *, shift=0.0: x * scale + y + shift)
    x, y = torch.randn(5), torch.randn(5)
    got = affine(x.to("tpu"), 3.0, y.to("tpu"), shift=1.5)
    torch.testing.assert_close(got.cpu(), x * 3.0 + y + 1.5)
    # Another static value is another kernel, not the first one again.
    torch.testing.assert_close(affine(x.to("tpu"), -2.0, y.to("tpu")).cpu(), x * -2.0 + y)


def test_decorator_form_and_register_fake():
    @jax_op("compat_test::square_sum")
    def square_sum(x: jax.Array) -> jax.Array:
        return (x * x).sum(axis=-1)

    fake = lambda x: torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
    assert square_sum.register_fake(fake) is fake
    assert square_sum.name == "compat_test::square_sum" and square_sum.__name__ == "square_sum"
    x = torch.randn(3, 4)
    torch.testing.assert_close(square_sum(x.to("tpu")).cpu(), (x * x).sum(-1))


def test_backward_matches_cpu():
    x = torch.randn(6, requires_grad=True)
    x_tpu = x.detach().to("tpu").requires_grad_()
    (relu(x_tpu) * 3).sum().backward()
    (torch.relu(x) * 3).sum().backward()
    torch.testing.assert_close(x_tpu.grad.cpu(), x.grad)


def test_in_defer_and_fuse_and_compiled():
    x = torch.randn(8)
    with torch_tpu.eager_mode("defer_and_fuse"):
        fused = relu(x.to("tpu") - 0.5) + 1
    torch.testing.assert_close(fused.cpu(), torch.relu(x - 0.5) + 1)
    compiled = torch.compile(lambda t: relu(t * 2) - t, backend="tpu")
    torch.testing.assert_close(compiled(x.to("tpu")).cpu(), torch.relu(x * 2) - x)


@pytest.mark.parametrize("name", ["relu", "a::b::c", "::relu", 3])
def test_name_must_be_namespace_and_op(name):
    with pytest.raises(ValueError) as error:
        jax_op(name, _relu)
    assert str(error.value) == (f"jax_op: the name must be 'namespace::op_name' with one '::', "
                                f"got {name!r} (torch.tpu.pallas.jax_op(fn) takes a function "
                                f"alone)")


def test_function_alone_is_refused():
    with pytest.raises(ValueError, match=r"got <function _relu"):
        jax_op(_relu)


def test_mesh_is_not_supported_yet():
    with pytest.raises(NotImplementedError) as error:
        jax_op("compat_test::sharded", _relu, mesh=object())
    assert str(error.value) == "torch_tpu: Pallas kernels over a device mesh are not supported yet"


def test_donate_argnums_must_be_positions():
    with pytest.raises(TypeError) as error:
        jax_op("compat_test::bad", _relu, donate_argnums=("x",))
    assert str(error.value) == ("jax_op compat_test::bad: donate_argnums must be argument "
                                "positions, got ('x',)")


def test_helion_launcher_imports_still_resolve():
    from torch_tpu._internal.pallas import pallas, tpu_torch_pallas

    assert callable(pallas.JaxCallable) and callable(tpu_torch_pallas.call_custom_kernel)
