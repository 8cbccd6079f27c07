"""The inference fast path of nn.MultiheadAttention / nn.TransformerEncoderLayer (eval, no grad,
batch_first) runs aten::_native_multi_head_attention and aten::_transformer_encoder_layer_fwd;
on tpu they are compositions of device ops (torch_tpu/_transformer_fast_path.py), never the CPU
fallback, and the same compositions make a compiled encoder layer one program. Each case runs the
same module (same weights) on CPU and on tpu."""

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

FAST_PATH_OPS = ("aten::_native_multi_head_attention", "aten::_transformer_encoder_layer_fwd",
                 "aten::_masked_softmax")


def run_on_both(module, *inputs, **kwargs):
    """(cpu result, tpu result) of `module` under no_grad, asserting no fallback on tpu."""
    module = module.eval()
    on_tpu = copy.deepcopy(module).to("tpu")
    moved = {}  # one tpu tensor per CPU tensor, so `query is key` holds on tpu too

    def move(value):
        if not isinstance(value, torch.Tensor):
            return value
        return moved.setdefault(id(value), value.to("tpu"))

    with torch.no_grad():
        expected = module(*inputs, **kwargs)
        torch_tpu.reset_metrics()
        got = on_tpu(*[move(x) for x in inputs], **{k: move(v) for k, v in kwargs.items()})
        torch.tpu.synchronize()
    fallbacks = torch_tpu.metrics()["fallback_ops"]
    assert not fallbacks, fallbacks
    return expected, got


def assert_close(got, expected, dtype=torch.float32):
    if expected is None:
        assert got is None
        return
    assert got.device.type == "tpu" and got.dtype == expected.dtype
    tolerance = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4,
                                                                             atol=1e-5)
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **tolerance)


def fast_path_taken(monkeypatch):
    """Records the fast-path ops the modules call (so a test fails if PyTorch stops taking it)."""
    called = []
    for name in ("_native_multi_head_attention", "_transformer_encoder_layer_fwd"):
        original = getattr(torch, name)

        def record(*args, _name=name, _original=original, **kwargs):
            called.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch, name, record)
    return called


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("average", [True, False])
def test_multihead_attention_without_mask(monkeypatch, need_weights, average):
    torch.manual_seed(0)
    called = fast_path_taken(monkeypatch)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(3, 5, 16)
    expected, got = run_on_both(mha, x, x, x, need_weights=need_weights,
                                average_attn_weights=average)
    assert called == ["_native_multi_head_attention"] * 2
    assert_close(got[0], expected[0])
    assert_close(got[1], expected[1])


KEY_PADDING = torch.tensor([[False, False, False, True, True], [False] * 5,
                            [False, True, True, True, True]])
CAUSAL = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)


def mask_arguments(masks, padding_name, attention_name):
    """The module's mask keyword arguments for "key_padding", "attn_2d" or "both"."""
    kwargs = {}
    if masks in ("key_padding", "both"):
        kwargs[padding_name] = KEY_PADDING
    if masks in ("attn_2d", "both"):
        kwargs[attention_name] = CAUSAL
    return kwargs


@pytest.mark.parametrize("masks", ["key_padding", "attn_2d", "attn_3d", "both", "float_both"])
def test_multihead_attention_masks(monkeypatch, masks):
    torch.manual_seed(1)
    called = fast_path_taken(monkeypatch)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(3, 5, 16)
    kwargs = mask_arguments(masks, "key_padding_mask", "attn_mask")
    if masks == "attn_3d":
        kwargs["attn_mask"] = torch.rand(3 * 4, 5, 5) < 0.3
    if masks == "float_both":
        # Float masks leave the fast path in nn.MultiheadAttention; the op itself takes them.
        kwargs["key_padding_mask"] = KEY_PADDING.float().masked_fill(KEY_PADDING, -1e9)
        kwargs["attn_mask"] = CAUSAL.float().masked_fill(CAUSAL, float("-inf"))
    expected, got = run_on_both(mha, x, x, x, average_attn_weights=False, **kwargs)
    assert called == ([] if masks == "float_both" else ["_native_multi_head_attention"] * 2)
    assert_close(got[0], expected[0])
    assert_close(got[1], expected[1])


def attention_arguments(query, key, value, dtype=torch.float32):
    torch.manual_seed(2)
    embed = query.shape[-1]
    return [query.to(dtype), key.to(dtype), value.to(dtype), embed, 2,
            torch.randn(3 * embed, embed, dtype=dtype) / 4, torch.randn(3 * embed, dtype=dtype),
            torch.randn(embed, embed, dtype=dtype) / 4, torch.randn(embed, dtype=dtype)]


def on_tpu(values):
    """The values with tensors on tpu; one tpu tensor per CPU tensor (identity matters)."""
    moved = {}
    return [moved.setdefault(id(v), v.to("tpu")) if isinstance(v, torch.Tensor) else v
            for v in values]


def native_attention_on_both(arguments, *rest):
    expected = torch._native_multi_head_attention(*arguments, *rest)
    torch_tpu.reset_metrics()
    got = torch._native_multi_head_attention(*on_tpu(arguments), *on_tpu(rest))
    assert not torch_tpu.metrics()["fallback_ops"]
    return expected, got


@pytest.mark.parametrize("sharing", ["separate", "key_is_value"])
def test_native_attention_with_distinct_query_key_value(sharing):
    query, key = torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    value = key if sharing == "key_is_value" else torch.randn(2, 4, 8)
    expected, got = native_attention_on_both(attention_arguments(query, key, value))
    assert_close(got[0], expected[0])
    assert_close(got[1], expected[1])


# (mask, mask_type) as the op takes them: bool or float (non-zero means masked on CPU).
MASKS = {
    "type0_attn": (torch.triu(torch.ones(4, 4, dtype=torch.bool), 1), 0),
    "type1_padding": (torch.tensor([[False, False, True, True], [False] * 4]), 1),
    "type2_full": (torch.rand(2, 2, 4, 4) < 0.4, 2),
    "type_none_4d": (torch.rand(2, 2, 4, 4) < 0.4, None),
    "float_type1": (torch.tensor([[0.0, 0.0, -1.0, 5.0], [0.0, 0.0, 0.0, 0.0]]), 1),
    "fully_masked_row": (torch.tensor([[False, True, True, True], [True] * 4]), 1),
}


@pytest.mark.parametrize("name", sorted(MASKS))
def test_native_attention_masks(name):
    mask, mask_type = MASKS[name]
    x = torch.randn(2, 4, 8)
    expected, got = native_attention_on_both(attention_arguments(x, x, x), mask, True, False,
                                             mask_type)
    assert_close(got[0], expected[0])
    assert_close(got[1], expected[1])


def test_native_attention_bfloat16():
    x = torch.randn(2, 4, 8)
    arguments = attention_arguments(x, x, x, torch.bfloat16)
    arguments[1] = arguments[2] = arguments[0]
    expected, got = native_attention_on_both(arguments, MASKS["type1_padding"][0], True, True, 1)
    assert_close(got[0], expected[0], torch.bfloat16)
    assert_close(got[1], expected[1], torch.bfloat16)


def test_native_attention_empty_batch():
    x = torch.randn(0, 4, 8)
    expected, got = native_attention_on_both(attention_arguments(x, x, x))
    assert got[0].shape == expected[0].shape and got[0].device.type == "tpu"
    assert got[1] is None and expected[1] is None


def test_native_attention_out_variant():
    x = torch.randn(2, 4, 8)
    arguments = attention_arguments(x, x, x)
    expected = torch._native_multi_head_attention(*arguments)
    out0, out1 = torch.empty(0, device="tpu"), torch.empty(0, device="tpu")
    torch_tpu.reset_metrics()
    torch.ops.aten._native_multi_head_attention.out(*on_tpu(arguments), out0=out0, out1=out1)
    assert not torch_tpu.metrics()["fallback_ops"]
    assert_close(out0, expected[0])
    assert_close(out1, expected[1])


def error_of(function):
    try:
        function()
    except Exception as error:  # noqa: BLE001 (the type is compared below)
        return type(error), str(error)
    raise AssertionError("no error raised")


@pytest.mark.parametrize("case", ["embed_dim", "key_shape", "heads", "mask_type", "mask_shape",
                                  "undefined_type", "bias_shape"])
def test_native_attention_errors_match_cpu(case):
    x = torch.randn(2, 4, 8)
    arguments = attention_arguments(x, x, x)
    rest = []
    if case == "embed_dim":
        arguments[3] = 6
    elif case == "key_shape":
        arguments[1] = torch.randn(2, 3, 8)
    elif case == "heads":
        arguments[4] = 3
    elif case == "mask_type":
        rest = [MASKS["type0_attn"][0], True, True, 5]
    elif case == "mask_shape":
        rest = [torch.zeros(1, 2, 4, 4, dtype=torch.bool), True, True, 2]
    elif case == "undefined_type":
        rest = [MASKS["type0_attn"][0], True, True, None]
    elif case == "bias_shape":
        arguments[6] = torch.randn(23)
    expected = error_of(lambda: torch._native_multi_head_attention(*arguments, *rest))
    got = error_of(lambda: torch._native_multi_head_attention(*on_tpu(arguments), *on_tpu(rest)))
    assert got == expected


@pytest.mark.parametrize("dim", [3, 1, -2])
@pytest.mark.parametrize("name", ["type0_attn", "type1_padding", "type2_full"])
def test_masked_softmax_matches_cpu(name, dim):
    mask, mask_type = MASKS[name]
    scores = torch.randn(2, 2, 4, 4)
    expected = torch._masked_softmax(scores, mask, dim, mask_type)
    torch_tpu.reset_metrics()
    got = torch._masked_softmax(scores.to("tpu"), mask.to("tpu"), dim, mask_type)
    assert not torch_tpu.metrics()["fallback_ops"]
    assert_close(got, expected)


def test_masked_softmax_backward_matches_cpu():
    mask = MASKS["type2_full"][0]
    scores = torch.randn(2, 2, 4, 4, requires_grad=True)
    scores_tpu = scores.detach().to("tpu").requires_grad_()
    grad = torch.randn(2, 2, 4, 4)
    torch._masked_softmax(scores, mask, 3, 2).backward(grad)
    torch_tpu.reset_metrics()
    torch._masked_softmax(scores_tpu, mask.to("tpu"), 3, 2).backward(grad.to("tpu"))
    assert not torch_tpu.metrics()["fallback_ops"]
    assert_close(scores_tpu.grad, scores.grad)


def test_masked_softmax_non_bool_mask_error_matches_cpu():
    scores, mask = torch.randn(2, 2, 4, 4), torch.zeros(2, 2, 4, 4)
    expected = error_of(lambda: torch._masked_softmax(scores, mask, 3, 2))
    got = error_of(lambda: torch._masked_softmax(scores.to("tpu"), mask.to("tpu"), 3, 2))
    assert got == expected


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu", F.gelu])
def test_transformer_encoder_layer(monkeypatch, norm_first, activation):
    torch.manual_seed(3)
    called = fast_path_taken(monkeypatch)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, activation=activation, batch_first=True,
                                             norm_first=norm_first)
    x = torch.randn(3, 5, 16)
    expected, got = run_on_both(layer, x)
    assert called == ["_transformer_encoder_layer_fwd"] * 2
    assert_close(got, expected)


@pytest.mark.parametrize("masks", ["attn_2d", "key_padding", "both"])
def test_transformer_encoder_layer_masks(monkeypatch, masks):
    torch.manual_seed(4)
    called = fast_path_taken(monkeypatch)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True)
    x = torch.randn(3, 5, 16)
    expected, got = run_on_both(layer, x,
                                **mask_arguments(masks, "src_key_padding_mask", "src_mask"))
    assert called == ["_transformer_encoder_layer_fwd"] * 2
    assert_close(got, expected)


def test_transformer_encoder_layer_bfloat16():
    torch.manual_seed(5)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True).to(torch.bfloat16)
    x = torch.randn(2, 5, 16, dtype=torch.bfloat16)
    expected, got = run_on_both(layer, x)
    assert_close(got, expected, torch.bfloat16)


def test_transformer_encoder_layer_empty_input():
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True)
    expected, got = run_on_both(layer, torch.randn(0, 5, 16))
    assert got.shape == expected.shape


def test_transformer_encoder_without_padding():
    torch.manual_seed(6)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    x = torch.randn(2, 5, 16)
    expected, got = run_on_both(encoder, x, mask=CAUSAL, is_causal=True)
    assert_close(got, expected)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_decoder_layer(norm_first):
    torch.manual_seed(7)
    layer = torch.nn.TransformerDecoderLayer(16, 4, 32, batch_first=True, norm_first=norm_first)
    target, memory = torch.randn(2, 4, 16), torch.randn(2, 6, 16)
    expected, got = run_on_both(layer, target, memory,
                                tgt_mask=torch.triu(torch.ones(4, 4, dtype=torch.bool), 1))
    assert_close(got, expected)


def test_transformer():
    torch.manual_seed(8)
    model = torch.nn.Transformer(16, 4, 2, 2, 32, batch_first=True)
    source, target = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(4)
    expected, got = run_on_both(model, source, target, tgt_mask=mask)
    assert_close(got, expected)


@pytest.mark.parametrize("masks", ["none", "attn_2d", "key_padding"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_compiled_transformer_encoder_is_one_program(norm_first, masks):
    import torch._dynamo

    torch.manual_seed(7)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, norm_first=norm_first,
                                             activation="gelu")
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    on_tpu = copy.deepcopy(encoder).to("tpu")
    x = torch.randn(3, 5, 16)
    arguments = {"none": {}, "attn_2d": {"mask": CAUSAL},
                 "key_padding": {"src_key_padding_mask": torch.tensor(
                     [[False] * 5, [False, False, False, True, True], [False] * 4 + [True]])}}
    kwargs = arguments[masks]
    torch._dynamo.reset()
    compiled = torch.compile(on_tpu, backend="tpu")
    with torch.no_grad():
        expected = encoder(x, **kwargs)
        torch_tpu.reset_metrics()
        got = compiled(x.to("tpu"), **{k: v.to("tpu") for k, v in kwargs.items()})
        torch.tpu.synchronize()
    metrics = torch_tpu.metrics()
    assert metrics.get("compiled_graphs_eager", {}) == {}
    assert metrics["fallback_ops"] == {}
    assert_close(got, expected)
    torch._dynamo.reset()
