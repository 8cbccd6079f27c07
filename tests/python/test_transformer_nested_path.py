"""nn.TransformerEncoder's inference fast path with a src_key_padding_mask: PyTorch packs the batch
into a nested tensor (_nested_tensor_from_mask, checked by _nested_tensor_from_mask_left_aligned),
runs _transformer_encoder_layer_fwd on it and pads back with to_padded_tensor. On tpu these are
device kernels (csrc/aten/nested_transformer_kernels.cc): no CPU fallback, CPU's results."""

import copy
import warnings

import pytest
import torch

import torch_tpu
from test_transformer_fast_path import assert_close, error_of, on_tpu

LEFT_ALIGNED = torch.tensor([[False, False, False, True, True], [False] * 5,
                             [False, True, True, True, True]])
SHORTER_THAN_INPUT = torch.tensor([[False, False, True, True, True],
                                   [False, True, True, True, True],
                                   [False, False, False, True, True]])
WITH_GAPS = torch.tensor([[True, False, False, True, False], [False] * 5,
                          [False, True, False, True, True]])
EMPTY_SEQUENCE = torch.tensor([[False, False, True, True, True], [True] * 5,
                               [False, False, False, False, True]])
MASKS = {"left_aligned": LEFT_ALIGNED, "shorter_than_input": SHORTER_THAN_INPUT,
         "with_gaps": WITH_GAPS, "empty_sequence": EMPTY_SEQUENCE,
         "no_padding": torch.zeros(3, 5, dtype=torch.bool)}


@pytest.fixture(autouse=True)
def quiet_nested_prototype_warning():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
        yield


def assert_no_fallback():
    torch.tpu.synchronize()
    fallbacks = torch_tpu.metrics()["fallback_ops"]
    assert not fallbacks, fallbacks


def assert_same_nested(got, expected):
    assert got.is_nested and got.device.type == "tpu"
    assert torch.equal(got._nested_tensor_size(), expected._nested_tensor_size())
    moved = got.cpu()
    for got_component, expected_component in zip(moved.unbind(), expected.unbind()):
        assert torch.equal(got_component, expected_component)


@pytest.mark.parametrize("mask_check", [True, False])
@pytest.mark.parametrize("name", sorted(MASKS))
def test_nested_tensor_from_mask(name, mask_check):
    keep = MASKS[name].logical_not()
    x = torch.randn(3, 5, 4)
    aligned = torch._nested_tensor_from_mask_left_aligned(x, keep)
    torch_tpu.reset_metrics()
    assert torch._nested_tensor_from_mask_left_aligned(x.to("tpu"), keep.to("tpu")) == aligned
    if mask_check and not aligned:
        expected = error_of(lambda: torch._nested_tensor_from_mask(x, keep, mask_check=True))
        got = error_of(lambda: torch._nested_tensor_from_mask(x.to("tpu"), keep.to("tpu"),
                                                              mask_check=True))
        assert got == expected
    else:
        # Without the check CPU keeps each row's first count(row) positions, aligned or not.
        expected = torch._nested_tensor_from_mask(x, keep, mask_check=mask_check)
        got = torch._nested_tensor_from_mask(x.to("tpu"), keep.to("tpu"), mask_check=mask_check)
        assert_same_nested(got, expected)
    assert_no_fallback()


@pytest.mark.parametrize("case", ["float_mask", "mask_1d", "input_2d", "size_mismatch"])
@pytest.mark.parametrize("op", ["from_mask", "left_aligned"])
def test_nested_tensor_from_mask_errors_match_cpu(op, case):
    x, keep = torch.randn(3, 5, 4), LEFT_ALIGNED.logical_not()
    if case == "float_mask":
        keep = keep.float()
    elif case == "mask_1d":
        keep = keep[0]
    elif case == "input_2d":
        x = x[0]
    elif case == "size_mismatch":
        keep = keep[:, :4]
    function = (torch._nested_tensor_from_mask if op == "from_mask"
                else torch._nested_tensor_from_mask_left_aligned)
    expected = error_of(lambda: function(x, keep))
    got = error_of(lambda: function(x.to("tpu"), keep.to("tpu")))
    assert got == expected


def nested_pair(components):
    nested = torch.nested.nested_tensor(components)
    return nested, nested.to("tpu")


@pytest.mark.parametrize("padding", [0.0, -1.5, float("nan")])
@pytest.mark.parametrize("output_size", [None, (3, 5, 4), (4, 7, 6)])
def test_to_padded_tensor(padding, output_size):
    expected_nested = torch._nested_tensor_from_mask(torch.randn(3, 5, 4),
                                                     EMPTY_SEQUENCE.logical_not())
    nested = expected_nested.to("tpu")
    expected = expected_nested.to_padded_tensor(padding, output_size)
    torch_tpu.reset_metrics()
    got = nested.to_padded_tensor(padding, output_size)
    assert_no_fallback()
    assert got.device.type == "tpu" and not got.is_nested
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("shapes", [[(2, 3), (4, 5), (0, 1)], [(3,), (1,), (5,)],
                                    [(2, 3, 2), (1, 3, 2)]])
def test_to_padded_tensor_of_other_shapes(shapes):
    torch.manual_seed(0)
    expected_nested, nested = nested_pair([torch.randn(shape) for shape in shapes])
    torch_tpu.reset_metrics()
    got = nested.to_padded_tensor(7.0)
    assert_no_fallback()
    assert torch.equal(got.cpu(), expected_nested.to_padded_tensor(7.0))


@pytest.mark.parametrize("case", ["output_size_length", "output_size_smaller", "all_empty",
                                  "non_contiguous"])
def test_to_padded_tensor_errors_match_cpu(case):
    keep, output_size = LEFT_ALIGNED.logical_not(), None
    if case == "output_size_length":
        output_size = (3, 5)
    elif case == "output_size_smaller":
        output_size = (3, 2, 4)
    elif case == "all_empty":
        keep = torch.zeros(3, 5, dtype=torch.bool)
    nested = torch._nested_tensor_from_mask(torch.randn(3, 5, 4), keep)
    if case == "non_contiguous":
        nested = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)]).transpose(1, 2)
    expected = error_of(lambda: nested.to_padded_tensor(0.0, output_size))
    on_tpu = nested.to("tpu")
    got = error_of(lambda: on_tpu.to_padded_tensor(0.0, output_size))
    assert got == expected


def encoder_layer(activation="relu", norm_first=False, dtype=torch.float32):
    return torch.nn.TransformerEncoderLayer(16, 4, 32, activation=activation, batch_first=True,
                                            norm_first=norm_first, dtype=dtype)


NESTED_LAYER = "_transformer_encoder_layer_fwd(nested)"


def path_taken(monkeypatch):
    """Names of the fast-path ops PyTorch calls (so a test sees which path it exercised)."""
    called = []
    for name in ("_nested_tensor_from_mask", "_transformer_encoder_layer_fwd"):
        original = getattr(torch, name)

        def record(*args, _name=name, _original=original, **kwargs):
            called.append(_name + ("(nested)" if args[0].is_nested else ""))
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch, name, record)
    return called


def run_encoder(encoder, x, mask, monkeypatch):
    """(cpu result, tpu result, ops the tpu run called), asserting no fallback on tpu."""
    encoder = encoder.eval()
    on_tpu = copy.deepcopy(encoder).to("tpu")
    with torch.no_grad():
        expected = encoder(x, src_key_padding_mask=mask)
        called = path_taken(monkeypatch)
        torch_tpu.reset_metrics()
        got = on_tpu(x.to("tpu"), src_key_padding_mask=mask.to("tpu"))
        assert_no_fallback()
    assert got.device.type == "tpu" and not got.is_nested and got.shape == expected.shape
    return expected, got, called


@pytest.mark.parametrize("mask_check", [True, False])
@pytest.mark.parametrize("name", sorted(MASKS))
def test_transformer_encoder_matches_cpu(monkeypatch, name, mask_check):
    torch.manual_seed(1)
    mask = MASKS[name]
    encoder = torch.nn.TransformerEncoder(encoder_layer(), 2, mask_check=mask_check)
    x = torch.randn(3, 5, 16)
    expected, got, called = run_encoder(encoder, x, mask, monkeypatch)
    nested = mask_check is False or torch._nested_tensor_from_mask_left_aligned(
        x, mask.logical_not())
    if nested:
        # The nested path: the layers see only each sequence's first count(row) positions and
        # the rest of the output is to_padded_tensor's padding, exactly 0.
        assert called == ["_nested_tensor_from_mask"] + [NESTED_LAYER] * 2
        lengths = mask.logical_not().sum(1)
        padding = torch.arange(5)[None, :] >= lengths[:, None]
        assert torch.equal(expected[padding], torch.zeros_like(expected[padding]))
        assert torch.equal(got.cpu()[padding], expected[padding])
    else:
        # A mask with gaps under mask_check: PyTorch leaves the nested path for the dense fast
        # path with a key padding mask, where padded positions carry computed values.
        assert called == ["_transformer_encoder_layer_fwd"] * 2
    assert_close(got, expected)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("layers", [1, 3])
def test_transformer_encoder_layers(monkeypatch, activation, norm_first, layers):
    torch.manual_seed(2)
    encoder = torch.nn.TransformerEncoder(encoder_layer(activation, norm_first), layers,
                                          enable_nested_tensor=not norm_first)
    # nn.TransformerEncoder turns the nested path off for norm_first layers; force it on, as a
    # user calling the layers on a nested tensor would.
    encoder.use_nested_tensor = True
    expected, got, called = run_encoder(encoder, torch.randn(3, 5, 16), LEFT_ALIGNED,
                                        monkeypatch)
    assert called == ["_nested_tensor_from_mask"] + [NESTED_LAYER] * layers
    assert_close(got, expected)


def test_transformer_encoder_with_final_norm(monkeypatch):
    torch.manual_seed(3)
    encoder = torch.nn.TransformerEncoder(encoder_layer(), 2, norm=torch.nn.LayerNorm(16))
    expected, got, _ = run_encoder(encoder, torch.randn(3, 5, 16), SHORTER_THAN_INPUT,
                                   monkeypatch)
    assert_close(got, expected)


def test_transformer_encoder_bfloat16(monkeypatch):
    torch.manual_seed(4)
    encoder = torch.nn.TransformerEncoder(encoder_layer(dtype=torch.bfloat16), 2)
    expected, got, _ = run_encoder(encoder, torch.randn(3, 5, 16, dtype=torch.bfloat16),
                                   LEFT_ALIGNED, monkeypatch)
    assert got.dtype == torch.bfloat16
    assert_close(got, expected, torch.bfloat16)


def test_fully_padded_batch_error_matches_cpu():
    encoder = torch.nn.TransformerEncoder(encoder_layer(), 2).eval()
    x, mask = torch.randn(3, 5, 16), torch.ones(3, 5, dtype=torch.bool)
    on_tpu = copy.deepcopy(encoder).to("tpu")
    with torch.no_grad():
        expected = error_of(lambda: encoder(x, src_key_padding_mask=mask))
        got = error_of(lambda: on_tpu(x.to("tpu"), src_key_padding_mask=mask.to("tpu")))
    assert got == expected


def layer_arguments(layer):
    return [16, 4, layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias,
            layer.self_attn.out_proj.weight, layer.self_attn.out_proj.bias, False, False, 1e-5,
            layer.norm1.weight, layer.norm1.bias, layer.norm2.weight, layer.norm2.bias,
            layer.linear1.weight, layer.linear1.bias, layer.linear2.weight, layer.linear2.bias]


def test_nested_encoder_layer_op():
    torch.manual_seed(5)
    layer = encoder_layer().eval()
    nested = torch._nested_tensor_from_mask(torch.randn(3, 5, 16), EMPTY_SEQUENCE.logical_not())
    with torch.no_grad():
        expected = torch._transformer_encoder_layer_fwd(nested, *layer_arguments(layer))
        arguments = layer_arguments(copy.deepcopy(layer).to("tpu"))
        torch_tpu.reset_metrics()
        got = torch._transformer_encoder_layer_fwd(nested.to("tpu"), *arguments)
        assert_no_fallback()
    assert got.is_nested
    assert torch.equal(got._nested_tensor_size(), expected._nested_tensor_size())
    for got_component, expected_component in zip(got.cpu().unbind(), expected.unbind()):
        torch.testing.assert_close(got_component, expected_component, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["mask", "non_contiguous"])
def test_nested_encoder_layer_op_errors_match_cpu(case):
    layer = encoder_layer().eval()
    nested = torch._nested_tensor_from_mask(torch.randn(3, 5, 16), LEFT_ALIGNED.logical_not())
    rest = [torch.zeros(3, 5, dtype=torch.bool), 1]
    if case == "non_contiguous":
        components = [torch.randn(16, 2), torch.randn(16, 3)]
        nested = torch.nested.nested_tensor(components).transpose(1, 2)
        rest = []
    with torch.no_grad():
        expected = error_of(lambda: torch._transformer_encoder_layer_fwd(
            nested, *layer_arguments(layer), *rest))
        arguments = layer_arguments(copy.deepcopy(layer).to("tpu"))
        got = error_of(lambda: torch._transformer_encoder_layer_fwd(
            nested.to("tpu"), *arguments, *on_tpu(rest)))
    assert got == expected
