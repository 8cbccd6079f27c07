"""Bounded dynamism: a compiled inference graph with symbolic sizes runs one program per size
bucket, with padding kept out of every result; compared with PyTorch on CPU over many lengths."""

import warnings

import pytest
import torch
import torch._dynamo
from torch.nn import functional as F

import torch_tpu
from compile_helpers import buckets_of, smallest_bucket
from compile_helpers import fresh_dynamo  # noqa: F401  (autouse: a fresh Dynamo, metrics)
from conftest import sample




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


LENGTHS = [3, 5, 7, 9, 13, 17, 30]  # buckets 4, 8, 16, 32 (those below the smallest shared)


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


def sorted_along_the_padded_dim(x):
    # One NaN (torch sorts NaNs last, topk takes them as the largest); no ties, whose order is
    # unspecified.
    x = torch.where(x == x.amax(), float("nan"), x)
    values, order = x.sort(1)
    down, down_order = x.sort(dim=1, descending=True, stable=True)
    top, top_index = x.topk(3, dim=1)
    low, low_index = x.topk(2, dim=1, largest=False)
    return (values.nan_to_num(7.0), order, down.nan_to_num(7.0), down_order,
            top.nan_to_num(7.0), top_index, low, low_index, x.sort(2).values.nan_to_num(7.0))


@pytest.mark.parametrize("f", [attention_block, reductions, contraction_over_the_padded_dim,
                               merged_and_split_views, concatenated_along_the_padded_dim,
                               positions_from_arange, positions_from_the_end_and_scans,
                               sorted_along_the_padded_dim],
                         ids=lambda f: f.__name__)
def test_padding_never_reaches_a_result_and_each_bucket_is_one_program(tpu, f):
    run_lengths(tpu, f, tokens, LENGTHS, dynamic=True)
    assert exact_shape_reasons() == {}
    assert bucketed_programs() == buckets_of(LENGTHS, smallest_bucket(LENGTHS))


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


def small_bert_pair(transformers):
    """Two BertForSequenceClassification (hidden 32, one layer, no dropout) with one weights."""
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=512, num_labels=3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    cpu_model = transformers.BertForSequenceClassification(config)
    tpu_model = transformers.BertForSequenceClassification(config)
    tpu_model.load_state_dict(cpu_model.state_dict())
    return cpu_model, tpu_model


def test_bert_classifier_over_lengths_8_to_512(tpu):
    transformers = pytest.importorskip("transformers")
    cpu_model, tpu_model = small_bert_pair(transformers)
    cpu_model.eval()
    tpu_model.eval()
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


def run_training(tpu, f, make_inputs, lengths, weight):
    """Forward and backward of `f` compiled with symbolic sizes and on CPU for each length;
    compares the loss and the weight's gradient."""
    weight_tpu = weight.detach().to(tpu).requires_grad_()
    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for length in lengths:
        inputs = make_inputs(length)
        loss = compiled(*[t.to(tpu) for t in inputs], weight_tpu)
        loss.backward()
        expected = f(*inputs, weight)
        expected.backward()
        # Sums in another order: float32 rounding differs by a few ulps.
        torch.testing.assert_close(loss.cpu(), expected.detach(), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(weight_tpu.grad.cpu(), weight.grad, rtol=1e-4, atol=1e-5)


def projected_attention_loss(x, w):
    h = (x.reshape(-1, x.shape[-1]) @ w).relu().reshape(x.shape[0], x.shape[1], -1)
    return F.layer_norm(h.softmax(1), (h.shape[-1],)).mean() + (h[:, 1:] * h[:, 0:1]).sum()


def test_a_training_step_shares_programs_per_bucket_and_matches_cpu(tpu):
    weight = sample((8, 4), torch.float32, seed=1).requires_grad_()
    run_training(tpu, projected_attention_loss, tokens, LENGTHS, weight)
    assert exact_shape_reasons() == {}
    programs = torch_tpu.metrics()["dynamic_shape_programs"]
    buckets = buckets_of(LENGTHS, smallest_bucket(LENGTHS))
    assert sorted(programs.values()) == [buckets, buckets]  # the forward's and the backward's


def test_a_backward_without_padding_rules_runs_per_exact_shape(tpu):
    def f(x, w):
        return ((x @ w).cumsum(1) ** 2).sum()  # cumsum's backward flips

    weight = sample((8, 4), torch.float32, seed=1).requires_grad_()
    run_training(tpu, f, tokens, [5, 6, 7, 9], weight)
    assert exact_shape_reasons() == {
        "aten::flip on padded operands (no rule keeps its padding out)": 1}


def selected_rows(x):
    """A size known only at run time (nonzero's count) that the graph captures."""
    rows = torch.nonzero(x[:, 0] > 0).squeeze(1)
    return x[rows].sum(0), rows.sum() + x.shape[0]


def test_a_size_known_only_at_run_time_runs_the_graph_eagerly(tpu):
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        run_lengths(tpu, selected_rows, lambda n: (sample((n, 3), torch.float32, seed=n),),
                    [5, 9, 13, 20], dynamic=True)
    eager = torch_tpu.metrics().get("compiled_graphs_eager", {})
    assert list(eager.values()) == [1] and bucketed_programs() == 0, eager


def test_the_last_short_batch_of_an_epoch_compiles_once_per_bucket(tpu):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    reference = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(),
                                    torch.nn.Linear(16, 3))
    reference.load_state_dict(model.state_dict())
    model.to(tpu)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(sample((20, 6), torch.float32),
                                          torch.arange(20) % 3)
    loader = torch.utils.data.DataLoader(data, batch_size=8, drop_last=False)
    compiled = torch.compile(model, backend="tpu")
    compiles = []
    for _ in range(3):
        for x, y in loader:  # batches of 8, 8, 4
            loss = F.cross_entropy(compiled(x.to(tpu)), y.to(tpu))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            expected = F.cross_entropy(reference(x), y)
            expected.backward()
            reference_optimizer.step()
            reference_optimizer.zero_grad()
            torch.testing.assert_close(loss.detach().cpu(), expected.detach())
        torch.tpu.synchronize()
        compiles.append(torch_tpu.metrics()["compile_count"])
    assert compiles[1] == compiles[2]  # the second epoch on compiles nothing
    for parameter, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(parameter.detach().cpu(), want.detach())


def test_bert_classifier_training_over_lengths_8_to_512(tpu):
    transformers = pytest.importorskip("transformers")
    cpu_model, tpu_model = small_bert_pair(transformers)
    tpu_model.to(tpu)
    cpu_optimizer = torch.optim.AdamW(cpu_model.parameters(), lr=1e-3)
    tpu_optimizer = torch.optim.AdamW(tpu_model.parameters(), lr=1e-3)
    compiled = torch.compile(tpu_model, backend="tpu", dynamic=True)
    generator = torch.Generator().manual_seed(0)
    for length in (8, 11, 30, 64, 100, 37, 512, 300):
        ids = torch.randint(0, 100, (2, length), generator=generator)
        mask = torch.ones(2, length, dtype=torch.long)
        mask[1, length // 2:] = 0
        labels = torch.tensor([0, 2])
        loss = compiled(input_ids=ids.to(tpu), attention_mask=mask.to(tpu),
                        labels=labels.to(tpu)).loss
        loss.backward()
        tpu_optimizer.step()
        tpu_optimizer.zero_grad()
        expected = cpu_model(input_ids=ids, attention_mask=mask, labels=labels).loss
        expected.backward()
        cpu_optimizer.step()
        cpu_optimizer.zero_grad()
        torch.testing.assert_close(loss.detach().cpu(), expected.detach(), rtol=1e-4, atol=1e-5)
    for (name, parameter), want in zip(tpu_model.named_parameters(), cpu_model.parameters()):
        torch.testing.assert_close(parameter.detach().cpu(), want.detach(), rtol=1e-3,
                                   atol=1e-4, msg=name)
    assert exact_shape_reasons() == {}
    assert max(torch_tpu.metrics()["dynamic_shape_programs"].values()) <= 7
    assert torch_tpu.metrics()["fallback_ops"] == {}


# Found by a differential fuzzer: each gave a wrong answer or an error on the bucketed path.
@pytest.mark.parametrize("f", [
    # Real elements at different positions: a cat's result and an arange of its length, rows
    # merged with the batch and an arange of their count.
    lambda x: (torch.cat([x, x * 2], 1) * torch.arange(2 * x.shape[1], device=x.device)
               [None, :, None]).sum(1),
    lambda x: (x.reshape(-1, x.shape[-1]) *
               torch.arange(x.shape[0] * x.shape[1], device=x.device)[:, None]).sum(0),
    lambda x: (x.argmax(), x.argmin()),  # flat positions
    lambda x: (x.sum(1) / torch.full((x.shape[0], 1), x.shape[1], dtype=x.dtype,
                                     device=x.device), x.new_full((2,), x.shape[1])),
    lambda x: (x[:, : x.shape[1] // 2 + 1], x[:, : x.shape[1] - 1]),  # views of the input
    lambda x: x[:, : x.shape[1] // 2 + 1][:, 2:] * 2,  # a real length of 0 at length 3
], ids=["cat_and_positions", "merged_rows_and_positions", "flat_argmax", "length_as_fill",
        "input_views", "empty_real_part"])
def test_fuzzer_findings_match_cpu(tpu, f):
    run_lengths(tpu, f, tokens, [6, 3, 5, 7, 9], dynamic=True)


def test_a_symbolic_float_in_the_backward(tpu):
    def f(x, w):
        return (x @ w).var(1).sum() + ((x @ w) / x.shape[1] ** 0.5).sum()

    run_training(tpu, f, tokens, [3, 5, 6, 9], sample((8, 4), torch.float32, seed=1)
                 .requires_grad_())
