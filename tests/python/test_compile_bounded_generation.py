"""Bounded dynamism for generation: a compiled decoder step whose KV cache grows by a token per
call runs programs that grow with log2(length), not with length, and its cache comes back into
the next call without a round trip through the host; compared with PyTorch on CPU."""

import pytest
import torch
import torch._dynamo
from torch import nn

import torch_tpu
from compile_helpers import buckets_of, smallest_bucket
from compile_helpers import fresh_dynamo  # noqa: F401  (autouse: a fresh Dynamo, metrics)
from conftest import sample
from generation_helpers import hf_decoder_pair


def bucketed_programs():
    return sum(torch_tpu.metrics().get("dynamic_shape_programs", {}).values())


def padded_input_elements():
    return sum(torch_tpu.metrics().get("dynamic_shape_elements", {}).values())


def buckets_touched(first, last, smallest=1):
    return buckets_of(range(first, last + 1), smallest)


class TinyDecoder(nn.Module):
    """One attention layer with a cache that `torch.cat` grows, as HF's dynamic cache does."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.qkv = nn.Linear(16, 48)
        self.head = nn.Linear(16, 50)

    def forward(self, token, past_keys, past_values):
        q, k, v = self.qkv(self.embed(token)).chunk(3, dim=-1)
        keys = torch.cat([past_keys, k], dim=1)
        values = torch.cat([past_values, v], dim=1)
        weights = torch.softmax(q @ keys.transpose(1, 2) / 4, dim=-1)
        return self.head(weights @ values), keys, values


def decode(model, token, keys, values, steps, programs_per_step=None):
    logits_per_step = []
    for _ in range(steps):
        before = torch_tpu.metrics()["compile_count"]
        logits, keys, values = model(token, keys, values)
        token = logits.argmax(-1)
        logits_per_step.append(logits)
        if programs_per_step is not None:
            programs_per_step.append(torch_tpu.metrics()["compile_count"] - before)
    return logits_per_step, keys, values


def decoder_pair(tpu, cls, length):
    """A decoder on CPU, the same one compiled on tpu with symbolic sizes, a batch of 2 tokens
    and a cache of `length`."""
    torch.manual_seed(0)
    cpu_model = cls()
    tpu_model = cls().to(tpu)
    tpu_model.load_state_dict(cpu_model.state_dict())
    compiled = torch.compile(tpu_model, backend="tpu", dynamic=True)
    keys = sample((2, length, 16), torch.float32, seed=1)
    return cpu_model, compiled, torch.tensor([[3], [7]]), keys, sample((2, length, 16),
                                                                       torch.float32, seed=2)


def test_a_growing_kv_cache_compiles_per_bucket_and_matches_cpu(tpu):
    cpu_model, compiled, token, keys, values = decoder_pair(tpu, TinyDecoder, 5)
    steps = 40  # cache lengths 5..44: buckets 8, 16, 32, 64
    with torch.no_grad():
        expected, want_keys, want_values = decode(cpu_model, token, keys, values, steps)
        first_logits, tpu_keys, tpu_values = compiled(token.to(tpu), keys.to(tpu),
                                                      values.to(tpu))
        padded_once = padded_input_elements()
        programs_per_step = []
        logits, tpu_keys, tpu_values = decode(compiled, first_logits.argmax(-1), tpu_keys,
                                              tpu_values, steps - 1, programs_per_step)
    for result, want in zip([first_logits] + logits, expected, strict=True):
        torch.testing.assert_close(result.cpu(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tpu_keys.cpu(), want_keys)
    torch.testing.assert_close(tpu_values.cpu(), want_values)
    assert tpu_keys.shape == (2, 5 + steps, 16) and tpu_keys.is_contiguous()
    # The cache a program returned is read from its storage by the next program: only the
    # first call's inputs went through the host to be padded.
    assert padded_input_elements() == padded_once
    # One program per bucket, whose cache storage comes from this bucket's program or, padded
    # on the device once, from the previous bucket's (or, at the first call, from the host: the
    # cache the graph will return grown, read from its storage as the later calls read theirs).
    # The cache is most of this decoder's work, so its buckets start at 8, the next power of two.
    assert smallest_bucket([5]) <= 8
    assert bucketed_programs() == buckets_touched(5, 5 + steps)
    # Nor does XLA build a program per storage size: a length after a bucket's first compiles
    # nothing, whether its cache storage came from the previous bucket's program (padded on the
    # device) or from this bucket's (longer by the token it grew).
    lengths = [5] + list(range(6, 5 + steps))  # the cache length each call is given
    crossed = [i for i in range(1, len(lengths))
               if buckets_touched(lengths[i - 1], lengths[i]) > 1]
    assert [i + 1 for i, count in enumerate(programs_per_step) if count] == crossed, \
        programs_per_step
    assert torch_tpu.metrics().get("compiled_graphs_exact_shapes", {}) == {}
    assert torch_tpu.metrics()["fallback_ops"] == {}


class WideHeadDecoder(TinyDecoder):
    """TinyDecoder with a vocabulary of 4096: its weights outweigh a cache of a hundred tokens."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(4096, 16)
        self.head = nn.Linear(16, 4096)


def test_short_lengths_share_a_bucket_where_the_weights_outweigh_the_cache(tpu):
    """Padding a short cache costs this decoder almost nothing next to its head, while each
    bucket is a compile of the whole graph: lengths up to 64 share one program."""
    cpu_model, compiled, token, keys, values = decoder_pair(tpu, WideHeadDecoder, 3)
    steps = 70  # cache lengths 3..72
    with torch.no_grad():
        expected, want_keys, _ = decode(cpu_model, token, keys, values, steps)
        programs_per_step = []
        logits, tpu_keys, _ = decode(compiled, token.to(tpu), keys.to(tpu), values.to(tpu),
                                     steps, programs_per_step)
    for result, want in zip(logits, expected, strict=True):
        torch.testing.assert_close(result.cpu(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tpu_keys.cpu(), want_keys)
    assert smallest_bucket([3]) >= 64
    assert bucketed_programs() == buckets_touched(3, 2 + steps, smallest_bucket([3]))
    # Lengths 3..64 compile nothing after the first: no program per power of two below 64.
    assert not any(programs_per_step[1:62]), programs_per_step
    assert torch_tpu.metrics().get("compiled_graphs_exact_shapes", {}) == {}


def test_cat_of_padded_values_lays_their_real_parts_end_to_end(tpu):
    def f(a, b):
        joined = torch.cat([a, b * 2, a[:, :1]], dim=1)
        return joined, joined.cumsum(1), joined[:, -1]

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    with torch.no_grad():
        for a_length, b_length in [(3, 5), (6, 2), (7, 7), (2, 13), (12, 9), (1, 1)]:
            a = sample((2, a_length, 3), torch.float32, seed=a_length)
            b = sample((2, b_length, 3), torch.float32, seed=b_length + 50)
            results = compiled(a.to(tpu), b.to(tpu))
            for result, want in zip(results, f(a, b), strict=True):
                assert result.shape == want.shape
                torch.testing.assert_close(result.cpu(), want)
    assert torch_tpu.metrics().get("compiled_graphs_exact_shapes", {}) == {}


def test_indices_bounded_by_another_symbol_are_checked_per_call(tpu):
    """An attention mask indexed at the KV cache's positions: Dynamo gives the two lengths two
    symbols; the program assumes the positions lie within the mask, and checks it per call."""

    def f(mask, keys):
        positions = torch.arange(keys.shape[1], device=keys.device)
        allowed = mask[:, positions]
        return keys.masked_fill(~allowed[..., None], 0).sum(1), allowed.sum(1)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    with torch.no_grad():
        for mask_length, key_length in [(5, 5), (9, 9), (12, 10), (16, 16), (7, 3)]:
            mask = sample((2, mask_length), torch.float32, seed=mask_length) > 0
            keys = sample((2, key_length, 4), torch.float32, seed=key_length)
            results = compiled(mask.to(tpu), keys.to(tpu))
            for result, want in zip(results, f(mask, keys), strict=True):
                torch.testing.assert_close(result.cpu(), want)
    assert torch_tpu.metrics().get("compiled_graphs_exact_shapes", {}) == {}


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_hf_generate_with_the_dynamic_cache_compiles_per_bucket(tpu, kind):
    transformers = pytest.importorskip("transformers")
    cpu_model, tpu_model = hf_decoder_pair(transformers, kind)
    tpu_model.to(tpu)
    tpu_model.forward = torch.compile(tpu_model.forward, backend="tpu")
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 128, (2, 9), generator=generator)
    mask = torch.ones(2, 9, dtype=torch.long)
    ids[0, :3], mask[0, :3] = 0, 0  # a left-padded batch, as batched generation pads it
    options = dict(max_new_tokens=40, min_new_tokens=40, do_sample=False)
    with torch.no_grad():
        expected = cpu_model.generate(ids, attention_mask=mask, **options)
        generated = tpu_model.generate(ids.to(tpu), attention_mask=mask.to(tpu), **options)
    assert torch.equal(generated.cpu(), expected)
    # Dynamo compiles the prompt and the first token exactly, then one graph with the cache's
    # length symbolic: lengths 10..48 run one program per bucket, not 39 programs, the first
    # call's too (the cache the static graph returned is read from its storage). The mask's
    # length is a second symbol, one ahead of the cache's; it shares the cache's bucket, so the
    # two cross together; both start at the smallest bucket the graph's work allows.
    assert torch_tpu.metrics().get("compiled_graphs_exact_shapes", {}) == {}
    assert bucketed_programs() == buckets_touched(10, 48, smallest_bucket([10]))
    assert torch_tpu.metrics()["fallback_ops"] == {}
