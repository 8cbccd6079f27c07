"""Defer-and-fuse graphs whose sizes grow along one dimension (a generation loop's KV cache)
record each op of a growing family in its bucketed form (csrc/exec/growing_shapes.h), so the
graph of the next length has the same signature and runs the same program: fused programs grow
with log2 of the length, not one per step, and every step equals CPU."""

import json
import math
import os

import pytest
import torch

import torch_tpu
from conftest import run_python
from generation_helpers import divide_by_a_shrinking_divisor, hf_decoder_pair


def decode_steps(device, steps, first_length=5):
    """A toy decoder step per length: the keys grow by a row (torch.cat), attention reads them
    all, ids grow by the last id + 1 (a read at a moving offset); each step reads its output on
    the host, as generation reads each token."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 1, 8, generator=generator).to(device)
    keys = torch.randn(2, first_length, 8, generator=generator).to(device)
    ids = torch.arange(first_length).view(1, first_length).to(device)
    outputs, programs = [], []
    for _ in range(steps):
        row = torch.randn(2, 1, 8, generator=generator).to(device)
        keys = torch.cat([keys, row], 1)
        scores = torch.softmax(q @ keys.transpose(1, 2) * 0.5, -1)
        ids = torch.cat([ids, ids[:, -1:] + 1], 1)
        outputs.append(((scores @ keys).cpu(), ids[:, -3:].cpu()))
        programs.append(torch_tpu.metrics()["fused_programs"] if device != "cpu" else 0)
    return outputs, programs, keys, ids


def test_a_growing_cache_equals_cpu_at_every_length():
    steps = 40  # lengths 6..45
    expected, _, cpu_keys, cpu_ids = decode_steps("cpu", steps)
    torch_tpu.reset_metrics()
    with torch_tpu.eager_mode("defer_and_fuse"):
        outputs, _, keys, ids = decode_steps("tpu", steps)
    for step, ((out, last_ids), (cpu_out, cpu_last_ids)) in enumerate(zip(outputs, expected)):
        torch.testing.assert_close(out, cpu_out, msg=f"step {step}")
        assert torch.equal(last_ids, cpu_last_ids), step
    torch.testing.assert_close(keys.cpu(), cpu_keys)
    assert torch.equal(ids.cpu(), cpu_ids)
    assert keys.shape == cpu_keys.shape and keys.stride() == cpu_keys.stride()
    metrics = torch_tpu.metrics()
    assert metrics["fused_graphs"] >= steps and metrics["fused_bucketed_ops"] > 0


def test_programs_are_built_per_bucket_not_per_length():
    # A fresh process: lines of the same op families learnt by earlier tests would change
    # which steps build programs.
    code = f"""
import json, sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
import torch, torch_tpu
from test_defer_growing_shapes import decode_steps
with torch_tpu.eager_mode("defer_and_fuse"):
    _, programs, _, _ = decode_steps("tpu", 250)  # lengths 6..255
print(json.dumps(programs))
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    programs = json.loads(result.stdout.strip().splitlines()[-1])
    # The first steps record exact graphs while each family finds its line. Then a graph's
    # programs change only when its ops cross into the next bucket (the scores' line a step
    # before the cache's: lengths 17 and 18, 33 and 34, ...). The step after a crossing reads
    # storages of the new bucket's size, as full storages grow when read, and builds nothing;
    # neither does any step between crossings.
    for first, last in [(19, 32), (35, 64), (67, 128), (131, 255)]:
        assert programs[last - 6] == programs[first - 6], (first, last, programs)
    # Lengths 16..255 cross into buckets 32, 64, 128 and 256: three programs each (the two
    # graphs of the scores' crossing step, the larger graph of the cache's).
    built_after_warmup = programs[-1] - programs[10]
    assert built_after_warmup <= 3 * math.ceil(math.log2(255 / 16)), programs


def shrink_and_jump(device):
    """Lengths off any line: a cache that grows, then is cut back, then jumps ahead."""
    generator = torch.Generator().manual_seed(1)
    keys = torch.randn(3, 4, generator=generator).to(device)
    results = []
    for length in [5, 6, 7, 8, 9, 10, 4, 5, 6, 20, 21, 3]:
        if keys.shape[0] > length:
            keys = keys[:length].clone()
        while keys.shape[0] < length:
            keys = torch.cat([keys, torch.randn(1, 4, generator=generator).to(device)], 0)
        results.append((torch.softmax(keys.sum(1) * 0.3, 0) + keys[-1, 0]).cpu())
    return results


def test_lengths_off_the_line_equal_cpu():
    expected = shrink_and_jump("cpu")
    with torch_tpu.eager_mode("defer_and_fuse"):
        got = shrink_and_jump("tpu")
    assert len(got) == len(expected)
    for step, (value, cpu_value) in enumerate(zip(got, expected)):
        torch.testing.assert_close(value, cpu_value, msg=f"step {step}")


def test_a_device_error_names_the_bucketed_op_and_its_graph():
    expected, cpu_error = divide_by_a_shrinking_divisor("cpu")
    with torch_tpu.eager_mode("defer_and_fuse"):
        quotients, error = divide_by_a_shrinking_divisor("tpu")
    assert cpu_error == "ZeroDivisionError" and len(expected) == 8
    assert len(quotients) == len(expected)
    for quotient, cpu_quotient in zip(quotients, expected):
        assert torch.equal(quotient, cpu_quotient)
    # Padding holds copies of real divisors, so only the real zero (length 11) raises. The
    # division's symbol (the new length) is one past the graph's first cat's (the old length),
    # whose bucket is 64: its bucket is 65, so both cross into the next bucket together.
    assert error is not None and error.endswith(
        ", or the same op at another length of its growing sequence (one program up to bucket"
        " 65), in a fused graph of 5 ops (aten::add.Tensor, aten::cat, aten::sub.Tensor,"
        " aten::cat, aten::div.Tensor_mode): ZeroDivisionError (detected on the device; the op's"
        " result is undefined)"), error
    assert error.startswith("aten::div.Tensor_mode(Long["), error


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_hf_generate_builds_programs_per_bucket(kind):
    transformers = pytest.importorskip("transformers")
    cpu_model, model = hf_decoder_pair(transformers, kind)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 128, (2, 9), generator=generator)
    # Prompts of one length: a left-padded batch builds its padding mask per length with
    # ops that keep exact programs (docs/cache.md, "Growing sequences").
    mask = torch.ones(2, 9, dtype=torch.long)
    options = dict(max_new_tokens=40, min_new_tokens=40, do_sample=False)
    with torch.no_grad():
        expected = cpu_model.generate(ids, attention_mask=mask, **options)
    model.to("tpu")
    torch_tpu.reset_metrics()
    with torch.no_grad(), torch_tpu.eager_mode("defer_and_fuse"):
        generated = model.generate(ids.to("tpu"), attention_mask=mask.to("tpu"), **options)
    assert torch.equal(generated.cpu(), expected)
    metrics = torch_tpu.metrics()
    # A graph (GPT-2: two, cut by a host read) per token, 40 tokens: programs for the prompt,
    # the first exact lengths and buckets 16, 32 and 64 (GPT-2 22, Llama 11), not one per graph.
    assert metrics["fused_graphs"] >= 40 and metrics["fused_bucketed_ops"] > 0
    assert metrics["fused_programs"] <= 24, metrics
    assert metrics["fallback_ops"] == {}
