"""Soak test: training on `tpu` under injected failures and cache damage ends where a clean run does.

    .venv/bin/python tools/soak.py --minutes 3                 # small MLP
    .venv/bin/python tools/soak.py --minutes 5 --model mingpt  # examples/mingpt.py's GPT
    .venv/bin/python tools/soak.py --minutes 2 --mode defer_and_fuse --seed 3

The faulty run trains in segments, each a fresh process that resumes from the previous segment's
checkpoint (so later segments read the compilation cache's shared and persistent tiers, in
temporary `TORCH_TPU_SHARED_CACHE_DIR` and `TORCH_TPU_CACHE_DIR` directories). Batch sizes change
as training goes on, so programs keep compiling through the run. Within a segment, at random
steps, it arms `torch_tpu.testing.inject_failure(site, count)` for the sites "compile",
"execute", "transfer", "store_read", "store_write"; truncates, corrupts or replaces with garbage
files of both cache directories; and takes a cache directory away (a regular file in its place)
for a few steps. Every step is: host snapshot of weights and optimizer state, forward, backward,
synchronize, optimizer step, synchronize. A step that raises is redone:
- when it failed before the optimizer step, the weights and optimizer state must still equal the
  snapshot (a failure that poisons them there is a bug: reported, and the run fails);
- when it failed in the optimizer step (whose in-place results are undefined after a device
  failure, docs/semantics.md), they are restored from the snapshot first.
Then a clean run (one process, no faults, its own empty cache directories) trains the same
number of steps from the same seed. Weights, optimizer state and per-step losses must be equal
(bit for bit unless --rtol). Prints a summary; exits 1 on a mismatch, a poisoned step, a step that
would not complete, or a segment that crashed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITES = ("compile", "execute", "transfer", "store_read", "store_write")
MAX_ATTEMPTS = 4


# --- the model and data (worker side) ----------------------------------------------------------

def batch_size(seed: int, step: int) -> int:
    """A new batch size every few steps early on, so that programs compile throughout the run."""
    return 4 + random.Random(seed * 7919 + step).randrange(1 + step // 3)


def build(model_name: str, seed: int):
    import torch
    torch.manual_seed(seed)
    if model_name == "mingpt":
        sys.path.insert(0, str(ROOT / "examples"))
        import mingpt
        return mingpt.build(seed, block=16, layers=2, heads=2, dim=32)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),
                               torch.nn.LayerNorm(64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def batch(model_name: str, seed: int, step: int):
    import torch
    size = batch_size(seed, step)
    if model_name == "mingpt":
        sys.path.insert(0, str(ROOT / "examples"))
        import mingpt
        return mingpt.make_batches(1, size, 16, seed * 100_003 + step)[0]
    generator = torch.Generator().manual_seed(seed * 100_003 + step)
    return torch.randn(size, 32, generator=generator), torch.randint(0, 10, (size,), generator=generator)


def loss_of(model_name, model, x, y):
    import torch.nn.functional as F
    if model_name == "mingpt":
        return model(x, y)[1]
    return F.cross_entropy(model(x), y)


# --- damage to the cache directories (worker side) ---------------------------------------------

def cache_files(directory: str) -> list[Path]:
    path = Path(directory)
    if not path.is_dir():
        return []
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.endswith(".lock"))


def damage_entries(rng: random.Random, directories, report) -> None:
    files = [f for d in directories for f in cache_files(d)]
    for target in rng.sample(files, min(len(files), rng.randint(1, 3))):
        data = target.read_bytes()
        how = rng.choice(("truncate", "flip", "garbage", "empty"))
        if how == "truncate":
            data = data[:rng.randrange(max(1, len(data)))]
        elif how == "flip" and data:
            data = bytearray(data)
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            data = bytes(data)
        elif how == "garbage":
            data = rng.randbytes(rng.randint(1, 200))
        else:
            data = b""
        target.write_bytes(data)
        report["damaged_files"][how] = report["damaged_files"].get(how, 0) + 1


class Outage:
    """A cache directory taken away: renamed aside, a regular file in its place."""

    def __init__(self, directory: str):
        self.directory = Path(directory)
        self.aside = self.directory.with_name(self.directory.name + ".away")
        self.active = False

    def start(self) -> None:
        if self.active or not self.directory.is_dir():
            return
        self.directory.rename(self.aside)
        self.directory.write_bytes(b"store outage (tools/soak.py)")
        self.active = True

    def end(self) -> None:
        if not self.active:
            return
        self.directory.unlink()
        self.aside.rename(self.directory)
        self.active = False


# --- one segment of training (worker side) -----------------------------------------------------

def worker(args) -> int:
    import torch
    import torch_tpu
    from torch_tpu import testing

    device = torch.device("tpu")
    state_dir = Path(args.state)
    report = {"steps": {}, "failures": {}, "retries": 0, "poisoned": [], "stuck": [], "armed": {},
              "damaged_files": {}, "outages": 0, "warnings": {}, "errors": []}
    model = build(args.model, args.seed).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    step = 0
    checkpoint = state_dir / "checkpoint.pt"
    if checkpoint.exists():
        saved = torch.load(checkpoint)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step = saved["step"]
    rng = random.Random(f"{args.seed}:{args.segment}")
    outages = [Outage(os.environ["TORCH_TPU_SHARED_CACHE_DIR"]), Outage(os.environ["TORCH_TPU_CACHE_DIR"])]
    outage_until = -1
    deadline = time.monotonic() + args.seconds if args.seconds else None
    torch_tpu.set_eager_mode(args.mode)

    def disarm_all():
        for site in SITES:
            testing.inject_failure(site, 0)

    def host_state():
        return ({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
                _to_cpu(optimizer.state_dict()))

    def differences(snapshot) -> list[str]:
        params, opt = snapshot
        found = []
        for name, value in model.state_dict().items():
            if not torch.equal(value.cpu(), params[name]):
                found.append(f"weight {name}")
        now = _to_cpu(optimizer.state_dict())
        for index, state in opt["state"].items():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and not torch.equal(now["state"][index][key], value):
                    found.append(f"optimizer state {index}.{key}")
        return found

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        while step < args.end_step and (deadline is None or time.monotonic() < deadline):
            x, y = batch(args.model, args.seed, step)
            if args.faults:
                if rng.random() < 0.12:
                    damage_entries(rng, [os.environ["TORCH_TPU_SHARED_CACHE_DIR"],
                                         os.environ["TORCH_TPU_CACHE_DIR"]], report)
                if outage_until < 0 and rng.random() < 0.05:
                    rng.choice(outages).start()
                    report["outages"] += 1
                    outage_until = step + rng.randint(1, 4)
                elif 0 <= outage_until <= step:
                    for outage in outages:
                        outage.end()
                    outage_until = -1
            snapshot, restore = None, False
            for attempt in range(MAX_ATTEMPTS):
                phase = "snapshot"
                try:
                    if args.faults and attempt == 0 and rng.random() < args.rate:
                        # Store failures switch a store off for the rest of the process: rarer,
                        # so that later steps still read (damaged) entries.
                        site, count = rng.choices(SITES, (3, 3, 3, 1, 1))[0], rng.randint(1, 2)
                        arm_at = rng.choice(("snapshot", "forward", "backward", "optimizer"))
                        report["armed"][site] = report["armed"].get(site, 0) + 1
                    else:
                        arm_at = None

                    def arm(at):
                        if arm_at == at:
                            testing.inject_failure(site, count)

                    arm("snapshot")
                    if snapshot is None:
                        snapshot = host_state()
                    if restore:
                        phase = "restore"
                        with torch.no_grad():
                            for name, value in model.state_dict().items():
                                value.copy_(snapshot[0][name])
                        optimizer.load_state_dict(snapshot[1])
                        torch.tpu.synchronize()
                        restore = False
                    phase = "forward"
                    arm("forward")
                    optimizer.zero_grad(set_to_none=True)
                    loss = loss_of(args.model, model, x.to(device), y.to(device))
                    phase = "backward"
                    arm("backward")
                    loss.backward()
                    torch.tpu.synchronize()
                    loss_value = loss.item()
                    phase = "optimizer"
                    arm("optimizer")
                    optimizer.step()
                    torch.tpu.synchronize()
                    disarm_all()
                    if args.sabotage and step == 3:  # self-check: the comparison must see this
                        with torch.no_grad():
                            next(model.parameters()).view(-1)[0] += 1e-3
                    report["steps"][step] = loss_value
                    break
                except Exception as error:  # noqa: BLE001  (an injected failure, or a bug: sorted below)
                    disarm_all()
                    with contextlib.suppress(Exception):
                        torch.tpu.synchronize()
                    message = f"step {step} attempt {attempt} ({phase}): {type(error).__name__}: {error}"
                    report["failures"][phase] = report["failures"].get(phase, 0) + 1
                    report["retries"] += 1
                    if "injected" not in str(error):
                        report["errors"].append(message[:500])
                    optimizer.zero_grad(set_to_none=True)
                    if phase in ("forward", "backward") and snapshot is not None:
                        try:
                            poisoned = differences(snapshot)
                        except Exception as read_error:  # noqa: BLE001
                            poisoned = [f"reading the weights raised {type(read_error).__name__}: {read_error}"]
                        if poisoned:
                            report["poisoned"].append(f"{message[:300]} left changed: {', '.join(poisoned[:6])}")
                            restore = True
                    elif phase in ("optimizer", "restore"):
                        restore = True
            else:
                report["stuck"].append(f"step {step} failed {MAX_ATTEMPTS} times")
                break
            step += 1
        for outage in outages:
            outage.end()
        disarm_all()
        for warning in caught:
            text = str(warning.message).split("\n")[0][:120]
            report["warnings"][text] = report["warnings"].get(text, 0) + 1
    torch_tpu.set_eager_mode("strict")
    torch.save({"model": {k: v.cpu() for k, v in model.state_dict().items()},
                "optimizer": _to_cpu(optimizer.state_dict()), "step": step}, checkpoint)
    metrics = torch_tpu.metrics()
    report["end_step"] = step
    report["injected_failures"] = dict(metrics.get("injected_failures", {}))
    report["cache_corrupt_entries"] = metrics.get("cache_corrupt_entries", 0)
    report["compiles"] = metrics.get("compile_count", 0)
    (state_dir / f"report-{args.segment}.json").write_text(json.dumps(report))
    return 0


def _to_cpu(value):
    import torch
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    return value


# --- orchestration -----------------------------------------------------------------------------

def run_segment(args, state: Path, caches: tuple[str, str], segment: int, end_step: int,
                seconds: float, faults: bool) -> dict:
    env = {**os.environ, "TORCH_TPU_SHARED_CACHE_DIR": caches[0], "TORCH_TPU_CACHE_DIR": caches[1]}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--state", str(state),
               "--segment", str(segment), "--end-step", str(end_step), "--seconds", str(seconds),
               "--model", args.model, "--seed", str(args.seed), "--mode", args.mode,
               "--rate", str(args.rate)] + (["--faults"] if faults else []) + \
        (["--sabotage"] if faults and args.sabotage else [])
    result = subprocess.run(command, env=env, capture_output=True, text=True,
                            timeout=seconds + 600 if seconds else None)
    report_file = state / f"report-{segment}.json"
    if result.returncode != 0 or not report_file.exists():
        return {"crashed": f"segment {segment} exited {result.returncode}:\n{result.stderr[-3000:]}"}
    report = json.loads(report_file.read_text())
    report["stderr_lines"] = [line for line in result.stderr.splitlines() if line.strip()][-5:]
    return report


def compare(clean: dict, faulty: dict, rtol: float) -> list[str]:
    import torch
    problems = []

    def close(a, b):
        if rtol == 0:
            return torch.equal(a, b)
        return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=rtol, atol=rtol)

    for name, value in clean["model"].items():
        other = faulty["model"][name]
        if not close(value, other):
            problems.append(f"weight {name}: max difference {(value.double() - other.double()).abs().max().item():.3g}")
    for index, state in clean["optimizer"]["state"].items():
        for key, value in state.items():
            other = faulty["optimizer"]["state"][index][key]
            if isinstance(value, torch.Tensor) and not close(value, other):
                problems.append(f"optimizer state {index}.{key} differs")
    if clean["step"] != faulty["step"]:
        problems.append(f"steps: clean {clean['step']}, faulty {faulty['step']}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=3.0, help="length of the faulty run")
    parser.add_argument("--segments", type=int, default=4, help="processes the faulty run is split into")
    parser.add_argument("--model", choices=["mlp", "mingpt"], default="mlp")
    parser.add_argument("--mode", choices=["strict", "debug", "defer_and_fuse"], default="strict")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate", type=float, default=0.3, help="chance a step arms an injected failure")
    parser.add_argument("--rtol", type=float, default=0.0, help="0: weights must be bit-equal")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories")
    parser.add_argument("--sabotage", action="store_true",
                        help="self-check: change one weight of the faulty run after step 3; the soak must fail")
    # worker options
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--faults", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    parser.add_argument("--segment", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--end-step", type=int, default=1 << 30, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    import torch
    root = Path(tempfile.mkdtemp(prefix="torch_tpu-soak-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    try:
        directories = {}
        for run in ("faulty", "clean"):
            for part in ("state", "shared", "remote"):
                directories[run, part] = root / run / part
                directories[run, part].mkdir(parents=True)
                if part == "shared":
                    directories[run, part].chmod(0o700)
        start = time.monotonic()
        reports = []
        per_segment = 60 * args.minutes / args.segments
        for segment in range(args.segments):
            report = run_segment(args, directories["faulty", "state"],
                                 (str(directories["faulty", "shared"]), str(directories["faulty", "remote"])),
                                 segment, 1 << 30, per_segment, faults=True)
            reports.append(report)
            if "crashed" in report:
                break
            print(f"faulty segment {segment}: steps to {report['end_step']}, failures by phase {report['failures']}, "
                  f"injected fired {report['injected_failures']}, damaged files {report['damaged_files']}, "
                  f"outages {report['outages']}, corrupt entries seen {report['cache_corrupt_entries']}, "
                  f"compiles {report['compiles']}", flush=True)
        faulty_time = time.monotonic() - start
        problems = [r["crashed"] for r in reports if "crashed" in r]
        steps = reports[-1].get("end_step", 0) if not problems else 0
        if not problems:
            clean = run_segment(args, directories["clean", "state"],
                                (str(directories["clean", "shared"]), str(directories["clean", "remote"])),
                                0, steps, 0, faults=False)
            if "crashed" in clean:
                problems.append(clean["crashed"])
            else:
                print(f"clean run: {clean['end_step']} steps, compiles {clean['compiles']}", flush=True)
                faulty_state = torch.load(directories["faulty", "state"] / "checkpoint.pt")
                clean_state = torch.load(directories["clean", "state"] / "checkpoint.pt")
                problems += compare(clean_state, faulty_state, args.rtol)
                faulty_losses = {int(k): v for r in reports for k, v in r["steps"].items()}
                for step, loss in sorted((int(k), v) for k, v in clean["steps"].items()):
                    if step in faulty_losses and faulty_losses[step] != loss and \
                            abs(faulty_losses[step] - loss) > args.rtol * abs(loss):
                        problems.append(f"step {step}: loss {faulty_losses[step]!r}, clean run {loss!r}")
                        break
        for report in reports:
            problems += [f"NOT INJECTED: {e}" for e in report.get("errors", [])]
            problems += [f"POISONED: {p}" for p in report.get("poisoned", [])]
            problems += [f"STUCK: {p}" for p in report.get("stuck", [])]
        armed, fired, failures, errors, warning_counts = {}, {}, {}, [], {}
        for report in reports:
            for name, into in (("armed", armed), ("injected_failures", fired), ("failures", failures),
                               ("warnings", warning_counts)):
                for key, value in report.get(name, {}).items():
                    into[key] = into.get(key, 0) + value
            errors += report.get("errors", [])
        print("\n=== soak summary ===")
        print(f"model {args.model}, mode {args.mode}, seed {args.seed}: {steps} steps in {len(reports)} faulty "
              f"segments ({faulty_time:.0f} s)")
        print(f"armed injections by site: {armed}")
        print(f"injected failures that fired: {fired}")
        never = [s for s in SITES if armed.get(s) and not fired.get(s)]
        if never:
            print(f"note: armed but never fired (not wired yet, or nothing of that kind ran): {never}")
        print(f"failed attempts by phase: {failures}; retries {sum(r.get('retries', 0) for r in reports)}")
        print(f"cache files damaged: {sum(sum(r.get('damaged_files', {}).values()) for r in reports)}, "
              f"outages {sum(r.get('outages', 0) for r in reports)}, corrupt entries detected "
              f"{sum(r.get('cache_corrupt_entries', 0) for r in reports)}")
        if warning_counts:
            print("warnings: " + "; ".join(f"{count}x {text}" for text, count in sorted(warning_counts.items())[:8]))
        if errors:
            print(f"failures that were not injected ({len(errors)}):")
            for error in errors[:10]:
                print(f"  {error}")
        if problems:
            print(f"FAILED ({len(problems)} problems):")
            for problem in problems[:30]:
                print(f"  {problem}")
            return 1
        print("OK: weights, optimizer state and losses equal the clean run's"
              + (" (bit for bit)" if args.rtol == 0 else f" (rtol {args.rtol})"))
        return 0
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
