"""Nested (strided) tensors on tpu: PyTorch makes them itself in nn.TransformerEncoder's inference
fast path when a src_key_padding_mask is given. Moving one between devices moves its buffer; the
fast path's nested ops run on the device (tests/python/test_transformer_nested_path.py), other ops
on nested tensors through the counted CPU fallback."""

import warnings

import torch
import torch_tpu

MASK = torch.tensor([[False, False, True, True], [False, False, False, False],
                     [False, True, True, True]])


def test_nested_tensor_moves_between_devices():
    x = torch.randn(3, 4, 8)
    nested = torch._nested_tensor_from_mask(x, MASK.logical_not(), mask_check=False)
    on_tpu = nested.to("tpu")
    assert on_tpu.is_nested and on_tpu.device.type == "tpu"
    back = on_tpu.to("cpu")
    assert back.is_nested
    for got, expected in zip(back.unbind(), nested.unbind()):
        assert torch.equal(got, expected)
    assert torch.equal(on_tpu.to(torch.float64).cpu().to_padded_tensor(0.0),
                       nested.to(torch.float64).to_padded_tensor(0.0))


def test_transformer_encoder_inference_with_padding_mask_matches_cpu():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2).eval()
    x = torch.randn(3, 4, 8)
    with torch.no_grad():
        expected = encoder(x, src_key_padding_mask=MASK)
        encoder.to("tpu")
        torch_tpu.reset_metrics()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = encoder(x.to("tpu"), src_key_padding_mask=MASK.to("tpu"))
    assert got.device.type == "tpu" and not got.is_nested
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-6)
    # The nested fast path runs on the device: no op of it is a fallback.
    assert not torch_tpu.metrics()["fallback_ops"]


def test_nested_layout_accessors_stay_on_the_host():
    nested = torch._nested_tensor_from_mask(torch.randn(3, 4, 8), MASK.logical_not(),
                                            mask_check=False)
    on_tpu = nested.to("tpu")
    torch_tpu.reset_metrics()
    for accessor in ("_nested_tensor_size", "_nested_tensor_strides",
                     "_nested_tensor_storage_offsets"):
        got, expected = getattr(on_tpu, accessor)(), getattr(nested, accessor)()
        assert got.device.type == "cpu" and torch.equal(got, expected)
    assert not torch_tpu.metrics()["fallback_ops"]


def test_other_ops_on_nested_tpu_tensors_fall_back():
    nested = torch._nested_tensor_from_mask(torch.randn(3, 4, 8), MASK.logical_not(),
                                            mask_check=False)
    torch_tpu.reset_metrics()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = nested.to("tpu").relu()
    assert got.is_nested and got.device.type == "tpu"
    for got_component, expected in zip(got.cpu().unbind(), nested.relu().unbind()):
        assert torch.equal(got_component, expected)
    assert "aten::relu" in torch_tpu.metrics()["fallback_ops"]


def test_writing_into_a_nested_tpu_tensor_is_refused():
    nested = torch._nested_tensor_from_mask(torch.randn(3, 4, 8), MASK.logical_not(),
                                            mask_check=False).to("tpu")
    try:
        nested.mul_(2.0)
    except NotImplementedError as error:
        assert "writing into a nested tensor on tpu is not supported" in str(error)
    else:
        raise AssertionError("mul_ on a nested tpu tensor did not raise")
