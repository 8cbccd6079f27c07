"""What compiling costs a new user, and what the compilation cache saves.

    .venv/bin/python benchmarks/compile_cost.py [--workloads mingpt resnet unet gpt2 gpt2_generate]

Each workload runs in three fresh processes: cold (empty shared and persistent tiers), warm tier 2
(the shared directory the cold run filled, no persistent tier) and warm tier 3 (an empty shared
directory, the persistent directory the cold run filled). PyTorch's own cache directory
(`TORCHINDUCTOR_CACHE_DIR`: AOTAutograd's cache of the "tpu" backend's traced graphs) is the cold
run's for warm tier 2, as on the host that ran it, and an empty one for warm tier 3, as on
another host. The warm runs repeat the cold run's
command, so they preload at import the programs it used (warm-start preloading, docs/cache.md),
as a user's second run of a script does. Training workloads time one
forward + backward + AdamW step from building the model to the synchronized end of the step
(examples' default sizes; gpt2 is HF GPT-2 from a 2-layer, 32-wide config with random weights);
imports a CPU run pays too (Dynamo, which optimizers import lazily; transformers) happen before.
`mingpt_compiled` and `resnet_compiled` run that step under `torch.compile(step, backend="tpu")`:
their warm rows are a warm process's first compiled step (Dynamo tracing; AOTAutograd's graphs
from its cache in warm tier 2, traced again in warm tier 3; the programs from the cache tiers;
issue 28's goal is 0.5 s). `mingpt_precompiled` and `resnet_precompiled` compile the step's loss
with torch.compile's precompile API (`torch.compile(loss, fullgraph=True).aot_compile(...)`, saved
in `TORCHINDUCTOR_CACHE_DIR`; a run that finds the file loads it with
`torch.compiler.load_compiled_function`), then run backward and AdamW eagerly: their warm tier 2
rows trace nothing.
`gpt2_generate` times greedy `generate(max_new_tokens=32)` (`gpt2_generate8`: 8 tokens, so the
two compile counts show the cost per token) and checks its tokens against CPU; its cold row also
lists the programs each new token compiled. `bert_lengths` runs 30 batches of lengths spread over
8..512 through an HF BERT classifier compiled with `dynamic=True` (one program per size bucket)
and checks its logits against CPU; `bert_lengths_exact` is the same with bucketing off
(`TORCH_TPU_BOUNDED_DYNAMISM=0`: one program per length).
`cpu s` is the process's CPU time over the same span (all its threads): on a shared machine the
wall time of a warm run is mostly waiting for a core, its CPU time is not. Also measured cold:
`print()` of a 100x100 tensor. Prints a table and writes benchmarks/results/compile_cost.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import machine, write_results

CHILD = r'''
import contextlib, io, json, os, sys, time, warnings
from pathlib import Path
import torch
from torch.nn import functional as F
import torch_tpu
sys.path.insert(0, str(Path(sys.argv[1]) / "examples"))
warnings.filterwarnings("ignore")
device = torch.device("tpu")
workload = sys.argv[2]
extra = {}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=64,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


# Imports a CPU run pays as well (optimizers import Dynamo lazily, ~1.5 s) stay out of the timing.
import torch._dynamo
from torch._dynamo.utils import counters
if workload.startswith("gpt2"):
    # transformers imports each model's module lazily, at first use (~2 s).
    from transformers import GPT2Config, GPT2LMHeadModel
if workload.startswith("bert_lengths"):
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    bert_config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                             num_attention_heads=4, intermediate_size=128,
                             max_position_embeddings=512, num_labels=3, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
    cpu_bert = BertForSequenceClassification(bert_config).eval()
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(8, 513, (30,), generator=generator).tolist()
    batches = [torch.randint(0, 1000, (2, n), generator=generator) for n in lengths]
    with torch.no_grad():
        bert_expected = [cpu_bert(input_ids=batch).logits for batch in batches]
start, start_cpu = time.perf_counter(), time.process_time()
if workload == "print":
    with contextlib.redirect_stdout(io.StringIO()):
        print(torch.randn(100, 100).to(device))
elif workload.startswith("bert_lengths"):
    # 30 batches of lengths spread over 8..512 through one compiled classifier, dynamic=True:
    # buckets ("bert_lengths") or one program per length ("bert_lengths_exact", bucketing off).
    model = BertForSequenceClassification(bert_config).eval()
    model.load_state_dict(cpu_bert.state_dict())
    compiled = torch.compile(model.to(device), backend="tpu", dynamic=True)
    with torch.no_grad():
        logits = [compiled(input_ids=batch.to(device)).logits.cpu() for batch in batches]
    extra["max_error_vs_cpu"] = max(float((a - b).abs().max())
                                    for a, b in zip(logits, bert_expected))
    extra["lengths"] = len(set(lengths))
    extra["padding_fraction"] = (lambda e: e.get("padding", 0) / max(
        e.get("padding", 0) + e.get("real", 0), 1))(
        torch_tpu.metrics().get("dynamic_shape_elements", {}))
elif workload.startswith("gpt2_generate"):
    new_tokens = int(workload.removeprefix("gpt2_generate") or 32)
    model = gpt2().eval()
    prompt = torch.randint(1, 128, (1, 5), generator=torch.Generator().manual_seed(0))
    expected = model.generate(prompt, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                              eos_token_id=None)
    counts = []

    class CompileCounter:
        """A streamer: generate() hands it each new token, after that token's step."""

        def put(self, value):
            counts.append(torch_tpu.metrics()["compile_count"])

        def end(self):
            pass

    start, start_cpu = time.perf_counter(), time.process_time()
    tokens = model.to(device).generate(prompt.to(device), max_new_tokens=new_tokens,
                                       do_sample=False, pad_token_id=0, eos_token_id=None,
                                       streamer=CompileCounter()).cpu()
    extra["tokens_match_cpu"] = bool(torch.equal(tokens, expected))
    # The first count is the prompt's (generate hands the streamer the prompt first).
    extra["compiles_per_token"] = [b - a for a, b in zip(counts, counts[1:])]
else:
    compiled = workload.endswith("_compiled")
    precompiled = workload.endswith("_precompiled")
    workload = workload.removesuffix("_compiled").removesuffix("_precompiled")
    # The loss as a function of the model and the batch (what the precompiled rows compile).
    if workload == "mingpt":
        import mingpt
        model = mingpt.build(0).to(device)
        batch = [t.to(device) for t in mingpt.make_batches(1, 8, 32, 0)[0]]
        loss_with = lambda model, x, y: model(x, y)[1]
    elif workload == "resnet":
        import resnet
        model = resnet.build(0, width=0.25, blocks=1).to(device)
        batch = [t.to(device) for t in resnet.make_batches(1, 8, 0)[0]]
        loss_with = lambda model, x, y: F.cross_entropy(model(x), y)
    elif workload == "unet":
        import unet
        model = unet.build(0).to(device)
        batch = [v.to(device) for v in unet.make_batches(1, 8, 0)[0]]
        loss_with = lambda model, noisy, t, noise: F.mse_loss(model(noisy, t), noise)
    else:
        model = gpt2().to(device)
        batch = [torch.randint(0, 128, (4, 32),
                               generator=torch.Generator().manual_seed(0)).to(device)]
        loss_with = lambda model, ids: model(ids, labels=ids).loss
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    if precompiled:
        # torch.compile's precompile API: the loss (forward) compiled ahead of time with Dynamo's
        # bytecode and guards, saved beside PyTorch's caches; a later run loads it and traces
        # nothing. Backward and AdamW run as eagerly (the step is fused in strict mode).
        artifact = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]) / f"{workload}.pt2"
        if artifact.exists():
            with open(artifact, "rb") as file:
                loss_with = torch.compiler.load_compiled_function(file)
        else:
            artifact.parent.mkdir(parents=True, exist_ok=True)
            loss_with = torch.compile(loss_with, fullgraph=True, backend="tpu").aot_compile(
                ((model, *batch), {}))
            loss_with.save_compiled_function(str(artifact))
    loss_of = lambda: loss_with(model, *batch)

    def step():
        loss = loss_of()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    (torch.compile(step, backend="tpu") if compiled else step)()
torch.tpu.synchronize()
seconds = time.perf_counter() - start
cpu_seconds = time.process_time() - start_cpu
metrics = torch_tpu.metrics()
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds,
                  "compiles": metrics["compile_count"],
                  "compile_seconds": metrics["compile_seconds"],
                  "hits_shared": metrics["cache_hits_shared"],
                  "hits_remote": metrics["cache_hits_remote"],
                  "aot_cache_hits": counters["aot_autograd"].get("autograd_cache_hit", 0),
                  **extra}))
'''

WORKLOADS = ["mingpt", "resnet", "unet", "gpt2", "gpt2_generate8", "gpt2_generate",
             "bert_lengths", "bert_lengths_exact", "mingpt_compiled", "resnet_compiled",
             "mingpt_precompiled", "resnet_precompiled"]


def run(workload: str, shared: Path, remote: Path | None, torch_cache: Path) -> dict:
    env = {**os.environ, "TORCH_TPU_SHARED_CACHE_DIR": str(shared),
           "TORCHINDUCTOR_CACHE_DIR": str(torch_cache)}
    if workload == "bert_lengths_exact":
        env["TORCH_TPU_BOUNDED_DYNAMISM"] = "0"
    env.pop("TORCH_TPU_CACHE_DIR", None)
    if remote is not None:
        env["TORCH_TPU_CACHE_DIR"] = str(remote)
    root = Path(__file__).resolve().parent.parent
    completed = subprocess.run([sys.executable, "-c", CHILD, str(root), workload], env=env,
                               capture_output=True, text=True)
    if completed.returncode != 0:
        raise RuntimeError(f"{workload} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", default=WORKLOADS, choices=WORKLOADS)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        printed = run("print", Path(scratch) / "print_shared", None, Path(scratch) / "print_torch")
        for workload in args.workloads:
            base = Path(scratch) / workload
            cold = run(workload, base / "shared", base / "remote", base / "torch_cache")
            warm_shared = run(workload, base / "shared", None, base / "torch_cache")
            warm_remote = run(workload, base / "other_shared", base / "remote",
                              base / "other_torch_cache")
            for name, result in [("cold", cold), ("warm tier 2", warm_shared),
                                 ("warm tier 3", warm_remote)]:
                rows.append({"workload": workload, "run": name, **result,
                             "speedup": cold["seconds"] / result["seconds"]})
    print(f"{'workload':<20}{'run':<13}{'seconds':>9}{'cpu s':>7}{'compiles':>10}"
          f"{'compile s':>11}{'aot hits':>9}{'speedup':>9}")
    for row in rows:
        note = "" if "tokens_match_cpu" not in row else (
            "  tokens match CPU" if row["tokens_match_cpu"] else "  TOKENS DIFFER FROM CPU")
        if "max_error_vs_cpu" in row:
            note = (f"  {row['lengths']} lengths, max |logits - CPU| "
                    f"{row['max_error_vs_cpu']:.1e}, padding {row['padding_fraction']:.0%}")
        print(f"{row['workload']:<20}{row['run']:<13}{row['seconds']:>9.2f}"
              f"{row['cpu_seconds']:>7.2f}{row['compiles']:>10}"
              f"{row['compile_seconds']:>11.2f}{row['aot_cache_hits']:>9}"
              f"{row['speedup']:>9.1f}{note}")
    for row in rows:
        if row["run"] == "cold" and "compiles_per_token" in row:
            print(f"{row['workload']} cold, programs compiled per new token: "
                  f"{row['compiles_per_token']}")
    print(f"print() of a 100x100 tensor, cold process: {printed['seconds'] * 1e3:.1f} ms, "
          f"{printed['compiles']} compiles")

    def plot(axes):
        labels = [f"{row['workload']}\n{row['run']}" for row in rows]
        axes.bar(range(len(rows)), [row["seconds"] for row in rows])
        axes.set_xticks(range(len(rows)), labels, fontsize=6)
        axes.set_yscale("log")
        axes.set_ylabel("seconds to the first finished step / generation (log)")
        axes.set_title("Compile cost: cold vs warm shared (tier 2) vs warm persistent (tier 3)")

    paths = write_results("compile_cost", {"rows": rows, "print": printed, "machine": machine()},
                          plot)
    print("wrote", *[str(p) for p in paths if p])


if __name__ == "__main__":
    main()
