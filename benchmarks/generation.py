"""Greedy generation with HF GPT-2 and Llama in every mode, side by side.

    .venv/bin/python benchmarks/generation.py [--models gpt2 llama] [--tokens 40] [--repeats 3]

Each (model, mode) runs in a fresh process with empty cache tiers (a private shared-memory
directory, no persistent tier), so `first s` is what a new user's first `generate` costs,
compiling included. Modes: `cpu` (PyTorch CPU eager), `strict` and `defer` (tpu eager, strict
and DeferAndFuse), `compiled` (`model.forward = torch.compile(model.forward, backend="tpu")`
with HF's default dynamic cache) and `compiled_static` (the same with
`cache_implementation="static"`, as HF documents for compiled generation); `defer_tiered` and
`compiled_tiered` are `defer` and `compiled` with TORCH_TPU_TIERED_COMPILATION=1 (quick builds
first, optimized ones in the background). Models are small
configs with random weights (2 layers, hidden 64, vocabulary 256), batch 1, a 7-token prompt,
`--tokens` new tokens (`min_new_tokens` too, so every run generates as many). `tok/s` is the
median of `--repeats` further generates of the same prompt, after a second generate and the
optimized builds it asked for (tiered compilation: the first runs use quick builds); `programs`
is the number of XLA compiles of the process (`metrics()["compile_count"]`: fresh caches, so
every program it ran; optimized rebuilds are not counted);
`same` says whether the tokens equal CPU's. Ratios are to CPU eager and to strict.
Prints a table and writes benchmarks/results/generation.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from common import machine, write_results

MODES = ["cpu", "strict", "defer", "defer_tiered", "compiled", "compiled_tiered",
         "compiled_static"]

CHILD = r'''
import json, statistics, sys, time, warnings
import torch
import torch._dynamo
import torch_tpu
import transformers
warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()
model_name, mode, tokens, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
special = dict(bos_token_id=0, eos_token_id=0, pad_token_id=0)
torch.manual_seed(0)
if model_name == "gpt2":
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=512, **special))
else:
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, max_position_embeddings=512, **special))
model.eval()
prompt = torch.randint(1, 256, (1, 7), generator=torch.Generator().manual_seed(1))
options = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
if mode == "compiled_static":
    options["cache_implementation"] = "static"
with torch.no_grad():
    expected = model.generate(prompt, **options)
device = torch.device("cpu" if mode == "cpu" else "tpu")
model.to(device)
if mode.startswith("compiled"):
    model.forward = torch.compile(model.forward, backend="tpu")
torch_tpu.reset_metrics()


def generate():
    start = time.perf_counter()
    with torch.no_grad():
        generated = model.generate(prompt.to(device), **options).cpu()
    return time.perf_counter() - start, generated


first, generated = generate()
generate()  # every program of a generate has run twice: their optimized builds are asked for
torch_tpu._C._wait_for_tier_ups()  # tiered compilation: steady state runs those
steady = statistics.median(generate()[0] for _ in range(repeats))
print(json.dumps({"first_s": first, "tokens_per_s": tokens / steady,
                  "programs": torch_tpu.metrics().get("compile_count", 0),
                  "same": bool(torch.equal(generated, expected))}))
'''


def run_child(model: str, mode: str, args) -> dict:
    with tempfile.TemporaryDirectory() as shared:
        env = {**os.environ, "TORCH_TPU_SHARED_CACHE_DIR": shared}
        env.pop("TORCH_TPU_CACHE_DIR", None)
        if mode.startswith("defer"):
            env["TORCH_TPU_DEFER_AND_FUSE"] = "1"
        if mode.endswith("_tiered"):
            env["TORCH_TPU_TIERED_COMPILATION"] = "1"
        result = subprocess.run([sys.executable, "-c", CHILD, model, mode, str(args.tokens),
                                 str(args.repeats)], env=env, capture_output=True, text=True,
                                timeout=1800)
    if result.returncode != 0:
        return {"error": result.stderr.strip().splitlines()[-1][:200]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["gpt2", "llama"])
    parser.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = {}
    print(f"{'model':7} {'mode':16} {'first s':>8} {'tok/s':>8} {'x cpu':>6} {'x strict':>8} "
          f"{'programs':>8} same")
    for model in args.models:
        rows[model] = {mode: run_child(model, mode, args) for mode in args.modes}
        cpu = rows[model].get("cpu", {}).get("tokens_per_s")
        strict = rows[model].get("strict", {}).get("tokens_per_s")
        for mode, row in rows[model].items():
            if "error" in row:
                print(f"{model:7} {mode:16} error: {row['error']}")
                continue
            row["x_cpu"] = row["tokens_per_s"] / cpu if cpu else None
            row["x_strict"] = row["tokens_per_s"] / strict if strict else None
            print(f"{model:7} {mode:16} {row['first_s']:8.2f} {row['tokens_per_s']:8.1f} "
                  f"{row['x_cpu'] or 0:6.2f} {row['x_strict'] or 0:8.2f} {row['programs']:8} "
                  f"{row['same']}")

    def plot(axes):
        width = 0.8 / max(len(args.modes), 1)
        for index, mode in enumerate(args.modes):
            values = [rows[m].get(mode, {}).get("tokens_per_s", 0) for m in args.models]
            axes.bar([i + index * width for i in range(len(args.models))], values, width,
                     label=mode)
        axes.set_xticks([i + 0.4 - width / 2 for i in range(len(args.models))], args.models)
        axes.set_ylabel("tokens / s (steady)")
        axes.set_title(f"greedy generate, {args.tokens} new tokens")
        axes.legend()

    paths = write_results("generation", {"machine": machine(), "tokens": args.tokens,
                                         "rows": rows}, plot)
    print("wrote", *[str(p) for p in paths if p])


if __name__ == "__main__":
    main()
