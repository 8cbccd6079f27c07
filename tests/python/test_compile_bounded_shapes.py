"""Bounded dynamism: a compiled inference graph with symbolic sizes runs one program per size
bucket, with padding kept out of every result; compared with PyTorch on CPU over many lengths."""

import warnings

import pytest
import torch
import torch._dynamo
from torch.nn import functional as F

import torch_tpu
from conftest import sample


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    torch_tpu.reset_metrics()
    yield
    torch._dynamo.reset()


def bucketed_programs():
    return sum(torch_tpu.metrics().get("dynamic_shape_programs", {}).values())


def exact_shape_reasons():
    return torch_tpu.metrics().get("compiled_graphs_exact_shapes", {})


def run_lengths(tpu, f, make_inputs, lengths, **compile_options):
    """Runs `f` compiled with symbolic sizes and on CPU for each length; compares every output
    (values, shape, dtype)."""
    compiled = torch.compile(f, backend="tpu", **compile_options)
    with torch.no_grad():
        for length in lengths:
            inputs = make_inputs(length)
            results = compiled(*[t.to(tpu) for t in inputs])
            expected = f(*inputs)
            results = results if isinstance(results, tuple) else (results,)
            expected = expected if isinstance(expected, tuple) else (expected,)
            for result, want in zip(results, expected, strict=True):
                assert result.shape == want.shape and result.dtype == want.dtype
                torch.testing.assert_close(result.cpu(), want, rtol=1e-5, atol=1e-5)


LENGTHS = [3, 5, 7, 9, 13, 17, 30]  # buckets 4, 8, 16, 32
BUCKETS = 4


def tokens(length):
    return (sample((2, length, 8), torch.float32, seed=length),)


def attention_block(x):
    scores = torch.softmax(x @ x.transpose(1, 2) / 8 ** 0.5, dim=-1)
    mixed = F.layer_norm(scores @ x + x, (x.shape[-1],))
    return mixed.sum(1), mixed


def reductions(x):
    return (x.sum(1), x.amax(1), x.amin(1), x.argmax(1), x.argmin(1), x.max(1).values,
            x.max(1).indices, (x > 1).any(1), (x > -3).all(1), x.logsumexp(1),
            x.prod(1), x.abs().amax())


def contraction_over_the_padded_dim(x):
    return x.transpose(1, 2) @ x, torch.einsum("bnh,bnk->hk", x, x.exp())


def merged_and_split_views(x):
    batch, length, hidden = x.shape
    rows = x.reshape(batch * length, hidden) @ torch.ones(hidden, 4, device=x.device)
    heads = rows.reshape(batch, length, 4).relu().reshape(batch, length, 2, 2).transpose(1, 2)
    return heads.sum(-2), heads.softmax(-1), x[:, 1:].sum(1), x[:, :-1].amax(1), x[:, 0]


def concatenated_along_the_padded_dim(x):
    both = torch.cat([x, x * 2], dim=1)
    return both.sum(1), both.softmax(1).transpose(1, 2) @ both


def positions_from_arange(x):
    positions = torch.arange(x.shape[1], device=x.device)
    table = torch.linspace(0, 1, 64, device=x.device).reshape(32, 2)
    return F.embedding(positions, table)[None] + x[..., :2], (positions * 2).sum()


def positions_from_the_end_and_scans(x):
    return (x[:, -1], x[:, -3:].sum(1), x.cumsum(1), x.cumprod(1).amax(1), x.logcumsumexp(1),
            x.mean(1), x.mean((1, 2), keepdim=True), x.half().mean(1))


@pytest.mark.parametrize("f", [attention_block, reductions, contraction_over_the_padded_dim,
                               merged_and_split_views, concatenated_along_the_padded_dim,
                               positions_from_arange, positions_from_the_end_and_scans],
                         ids=lambda f: f.__name__)
def test_padding_never_reaches_a_result_and_each_bucket_is_one_program(tpu, f):
    run_lengths(tpu, f, tokens, LENGTHS, dynamic=True)
    assert exact_shape_reasons() == {}
    assert bucketed_programs() == BUCKETS


def test_padded_outputs_come_back_dense_at_their_real_sizes(tpu):
    def f(x):
        return (x * 2).transpose(1, 2), x[:, 2:] + 1

    run_lengths(tpu, f, tokens, [5, 7], dynamic=True)
    with torch.no_grad():
        transposed, sliced = torch.compile(f, backend="tpu", dynamic=True)(
            tokens(6)[0].to(tpu))
    assert transposed.shape == (2, 8, 6) and transposed.is_contiguous()
    assert sliced.shape == (2, 4, 8) and sliced.is_contiguous()
    assert sliced.view(-1).shape == (64,)


def test_a_new_length_within_a_bucket_compiles_nothing(tpu):
    def f(x):
        return x.softmax(1).sum(1), x @ x.transpose(1, 2)

    run_lengths(tpu, f, tokens, [9, 12], dynamic=True)
    torch.tpu.synchronize()
    before = torch_tpu.metrics()["compile_count"]
    run_lengths(tpu, f, tokens, [10, 11, 13, 16], dynamic=True)
    torch.tpu.synchronize()
    assert torch_tpu.metrics()["compile_count"] == before
    assert bucketed_programs() == 1


def test_inputs_are_padded_on_the_host_and_the_padding_is_counted(tpu):
    run_lengths(tpu, lambda x: x.sum(1), tokens, [5, 6], dynamic=True)
    elements = torch_tpu.metrics()["dynamic_shape_elements"]
    assert elements == {"real": 2 * 8 * (5 + 6), "padding": 2 * 8 * (3 + 2)}


def test_a_size_that_never_changes_is_not_padded(tpu):
    # dynamic=True makes the hidden size symbolic too; the layer norm over it cannot take
    # padding, so it stays a constant while only the length varies.
    run_lengths(tpu, attention_block, tokens, [5, 7, 9], dynamic=True)
    assert exact_shape_reasons() == {}
    assert bucketed_programs() == 3  # the first call's sizes, then buckets 8 and 16


def test_mark_dynamic_max_bounds_the_bucket(tpu):
    def f(x):
        return x.softmax(1).sum(1)

    compiled = torch.compile(f, backend="tpu")
    with torch.no_grad():
        for length in (33, 40, 47, 48):
            x = sample((2, length, 8), torch.float32, seed=length)
            x_tpu = x.to(tpu)
            torch._dynamo.mark_dynamic(x_tpu, 1, min=2, max=48)
            torch.testing.assert_close(compiled(x_tpu).cpu(), f(x))
    assert bucketed_programs() == 1  # 33..48 share the bucket of 48, not 64
    assert torch_tpu.metrics()["dynamic_shape_elements"]["padding"] == 2 * 8 * (15 + 8 + 1)


def test_a_loss_over_padded_rows_counts_the_real_rows_only(tpu):
    def f(x, target):
        logits = x.reshape(-1, x.shape[-1])
        return (F.cross_entropy(logits, target.reshape(-1)),
                F.cross_entropy(logits, target.reshape(-1), reduction="none"),
                F.cross_entropy(logits, target.reshape(-1).clamp(min=0), reduction="sum",
                                ignore_index=3))

    def inputs(length):
        target = torch.randint(0, 8, (2, length), generator=torch.Generator().manual_seed(length))
        target[0, 0] = -100
        return tokens(length)[0], target

    run_lengths(tpu, f, inputs, LENGTHS, dynamic=True)
    assert exact_shape_reasons() == {}


@pytest.mark.parametrize("f, reason", [
    (lambda x: x.flip(1).sum(1), "aten::flip on padded operands (no rule keeps its padding out)"),
    (lambda x: x.var(1), "aten::var.correction on padded operands (no rule keeps its padding "
     "out)"),
], ids=["flip", "var"])
def test_ops_without_a_padding_rule_run_per_exact_shape(tpu, f, reason):
    torch_tpu._dynamo._warned.clear()  # warned once per process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_lengths(tpu, f, tokens, [5, 6, 7], dynamic=True)
    assert exact_shape_reasons() == {reason: 1}
    assert [str(w.message) for w in caught if "per exact shape" in str(w.message)] == [
        'torch.compile(backend="tpu"): a graph with dynamic shapes compiles one program per '
        f"exact shape because {reason}"]


def test_bert_classifier_over_lengths_8_to_512(tpu):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=512, num_labels=3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    cpu_model = transformers.BertForSequenceClassification(config).eval()
    tpu_model = transformers.BertForSequenceClassification(config).eval()
    tpu_model.load_state_dict(cpu_model.state_dict())
    compiled = torch.compile(tpu_model.to(tpu), backend="tpu", dynamic=True)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for length in (8, 11, 30, 64, 100, 200, 300, 512, 37, 129, 400, 16):
            ids = torch.randint(0, 100, (2, length), generator=generator)
            mask = torch.ones(2, length, dtype=torch.long)
            mask[1, length // 2:] = 0
            logits = compiled(input_ids=ids.to(tpu), attention_mask=mask.to(tpu)).logits
            expected = cpu_model(input_ids=ids, attention_mask=mask).logits
            torch.testing.assert_close(logits.cpu(), expected, rtol=1e-4, atol=1e-5)
    assert exact_shape_reasons() == {}
    assert bucketed_programs() <= 7
    assert torch_tpu.metrics()["fallback_ops"] == {}
