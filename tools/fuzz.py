"""Differential fuzzer: seeded random programs run on PyTorch CPU and on `tpu`, results compared.

    .venv/bin/python tools/fuzz.py --minutes 5 --seed 1
    .venv/bin/python tools/fuzz.py --programs 50 --seed 7 --modes strict,compiled
    .venv/bin/python tools/fuzz.py --program-seed 700012        # one program again, by its seed

A program is Python source over a few input tensors (float32, bfloat16, int64, int32, bool;
0-d to 4-d): views (slicing, transpose, permute, narrow, select, diagonal, unsqueeze, view, expand,
unfold, movedim, unbind/chunk/split), reshapes, in-place writes through views (add_, mul_, copy_,
fill_, clamp_, index_put_, masked_fill_, index_add_, scatter_, out=, slice assignment...),
broadcasting and type promotion (mixed dtypes, Python scalars, 0-d tensors), reductions (sum, mean,
amax, argmax, prod, var, logsumexp, max(dim), cumsum, any/all with dims and keepdim), indexing
(advanced indexing with literal and device-computed indices, index_select, gather, masks), casts
and matmul. It is generated one statement at a time while running on CPU, so every statement is
known to be valid there, and built to be *well defined*: no index_put_ with repeated indices
without accumulate, no writes through views whose elements overlap (expand, overlapping unfold)
or through reshape()/contiguous() results (view or copy is PyTorch's choice), no in-place op
whose operands alias the written tensor, no integer overflow, no float-to-integer casts of
non-finite values, and nothing discontinuous (comparisons, argmax, floor, casts to integers,
remainder) applied to float values that rounding may have moved (each value carries an error
class: exact, float32-rounded, bfloat16-rounded, which also sets its tolerance).

Every program runs on CPU (the reference) and on tpu in each mode: `strict`, `debug`,
`defer_and_fuse` (eager modes) and `compiled` (`torch.compile(program, backend="tpu")`). Outputs
and the final values of all inputs must match: dtype, shape, strides of eager outputs (dims of
size > 1), values (integers and bools exactly, floats within their class's tolerance, NaN and
infinity positions equal). On a mismatch the fuzzer prints a self-contained repro (the program as
plain torch code, its inputs built from their seeds, the runner and the comparator), minimizes it
by dropping statements, and exits 1. A compiled-mode mismatch that `torch.compile` with the
`aot_eager` backend on CPU shows as well is PyTorch's, not torch_tpu's: it is counted, not failed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import random
import sys
import textwrap
import time
import warnings

import torch

MODES = ("strict", "debug", "defer_and_fuse", "compiled")
FLOATS = (torch.float32, torch.bfloat16)
INTS = (torch.int64, torch.int32)
# Error classes of float values: 0 exact (bit-equal on any correct implementation), 1 rounded in
# float32 arithmetic, 2 rounded in bfloat16. Tolerances (rtol, atol relative to the tensor's
# largest finite magnitude, at least 1) per class:
TOLERANCES = {0: (0.0, 0.0), 1: (2e-4, 2e-4), 2: (5e-2, 5e-2)}
INT_LIMIT = 2 ** 15       # integer values stay below this: no overflow in + - * of two of them
FLOAT_LIMIT = 1e4         # float magnitudes stay below this: rounding errors stay comparable
INCLUDE_KNOWN_BUGS = False  # --include-known-bugs: generate what Generator.known_bug leaves out
SCALARS = ("2", "-3", "0.5", "-1.5", "2.0", "0.3", "True", "1")


# --- the runtime a repro carries (these functions are copied into it verbatim) -----------------

def make_input(shape, dtype, seed, special=False):
    """A deterministic input tensor on CPU: normal floats (with inf/-inf/nan when `special`),
    small integers, random bools."""
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_floating_point:
        values = torch.randn(shape, generator=generator) * 2
        if special and values.numel() > 1:
            flat = values.view(-1)
            positions = torch.randperm(flat.numel(), generator=generator)[:3]
            for position, value in zip(positions.tolist(), (float("nan"), float("inf"), float("-inf"))):
                flat[position] = value
        return values.to(dtype)
    return torch.randint(-8, 9, shape, generator=generator).to(dtype)


def run_program(program, make_inputs, device, mode):
    """Run `program` on fresh inputs on `device` in `mode` (an eager mode of torch_tpu, "compiled"
    or "eager" on CPU). Returns (outputs, final inputs, output strides), all on CPU."""
    fn = program
    context = contextlib.nullcontext()
    if device != "cpu":
        import torch_tpu
        context = torch_tpu.eager_mode("strict" if mode == "compiled" else mode)
    if mode == "compiled":
        torch._dynamo.reset()
        fn = torch.compile(program, backend="tpu" if device != "cpu" else "aot_eager")
    with context, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inputs = make_inputs(device)
        outputs = fn(*inputs)
        strides = [tuple(o.stride()) for o in outputs]
        return [o.cpu() for o in outputs], [i.cpu() for i in inputs], strides


def _tensor_problem(name, got, ref, level):
    if got.dtype != ref.dtype:
        return f"{name}: dtype {got.dtype} != CPU's {ref.dtype}"
    if got.shape != ref.shape:
        return f"{name}: shape {tuple(got.shape)} != CPU's {tuple(ref.shape)}"
    if not ref.dtype.is_floating_point:
        if torch.equal(got, ref):
            return None
        wrong = (got != ref).nonzero()[:4].tolist()
        return f"{name}: values differ at {wrong}\n  got {got}\n  CPU {ref}"
    got64, ref64 = got.double(), ref.double()
    if not torch.equal(got64.isnan(), ref64.isnan()):
        return f"{name}: NaN positions differ\n  got {got}\n  CPU {ref}"
    infinite = ref64.isinf() | got64.isinf()
    if not torch.equal(got64[infinite], ref64[infinite]):
        return f"{name}: infinities differ\n  got {got}\n  CPU {ref}"
    finite = ref64.isfinite() & got64.isfinite()
    rtol, atol = TOLERANCES[level]
    scale = max(1.0, ref64[finite].abs().max().item()) if finite.any() else 1.0
    error = (got64 - ref64).abs()[finite]
    allowed = atol * scale + rtol * ref64.abs()[finite]
    if bool((error <= allowed).all()):
        return None
    worst = (error - allowed).argmax()
    return (f"{name}: values differ (error class {level}, rtol {rtol}, atol {atol}*{scale:.3g}): "
            f"max excess at finite element {worst.item()}: got {got64[finite][worst].item()!r}, "
            f"CPU {ref64[finite][worst].item()!r}\n  got {got}\n  CPU {ref}")


def compare_results(got, ref, output_levels, input_levels, check_strides=True):
    """Problems (strings) of a run `got` against the CPU run `ref` (both from run_program)."""
    problems = []
    (outs, ins, strides), (ref_outs, ref_ins, ref_strides) = got, ref
    if len(outs) != len(ref_outs):
        return [f"{len(outs)} outputs, CPU {len(ref_outs)}"]
    for kind, tensors, references, levels in (("output", outs, ref_outs, output_levels),
                                              ("input", ins, ref_ins, input_levels)):
        for index, (tensor, reference, level) in enumerate(zip(tensors, references, levels)):
            problem = _tensor_problem(f"{kind} {index}", tensor, reference, level)
            if problem:
                problems.append(problem)
    if check_strides:
        for index, (out, stride, ref_stride) in enumerate(zip(ref_outs, strides, ref_strides)):
            if out.numel() and any(size > 1 and a != b for size, a, b in zip(out.shape, stride, ref_stride)):
                problems.append(f"output {index}: strides {stride} != CPU's {ref_stride}")
    return problems


# --- programs -----------------------------------------------------------------------------------

@dataclasses.dataclass
class Program:
    seed: int
    specs: list            # (shape, dtype name, seed, special) per input
    lines: list            # statements of the body
    outputs: list          # names returned
    levels: dict           # name -> error class of outputs; "x<i>" -> of input i at the end

    def source(self) -> str:
        args = ", ".join(f"x{i}" for i in range(len(self.specs)))
        body = "".join(f"    {line}\n" for line in self.lines)
        returned = ", ".join(self.outputs) + ("," if len(self.outputs) == 1 else "")
        return f"def program({args}):\n{body}    return ({returned})\n"

    def inputs_source(self) -> str:
        rows = "".join(f"        make_input({shape!r}, torch.{dtype}, {seed}, {special}),\n"
                       for shape, dtype, seed, special in self.specs)
        return f"def make_inputs(device):\n    return [t.to(device) for t in [\n{rows}    ]]\n"

    def output_levels(self) -> list:
        return [self.levels[name] for name in self.outputs]

    def input_levels(self) -> list:
        return [self.levels[f"x{i}"] for i in range(len(self.specs))]

    def functions(self):
        namespace = {"torch": torch, "make_input": make_input}
        exec(compile(self.source() + self.inputs_source(), f"<fuzz program {self.seed}>", "exec"), namespace)
        return namespace["program"], namespace["make_inputs"]


@dataclasses.dataclass
class Var:
    name: str
    base: int
    kind: str              # "fresh", "view" (shares the base's storage), "maybe_view" (reshape...)
    overlapping: bool = False
    stale: bool = False


class Reject(Exception):
    pass


def _level_of(dtype) -> int:
    return 2 if dtype == torch.bfloat16 else 1


class Generator:
    """Builds one program statement by statement, running each on CPU as it goes."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.specs = []
        self.lines = []
        self.vars: list[Var] = []
        self.base_level: dict[int, int] = {}     # error class of each storage's contents
        self.base_input: dict[int, int] = {}
        self.counter = 0
        self.ns = {}

    # -- bookkeeping
    def value(self, var: Var) -> torch.Tensor:
        return self.ns[var.name]

    def level(self, var: Var) -> int:
        return self.base_level[var.base] if self.value(var).dtype.is_floating_point else 0

    def usable(self, predicate=lambda var, value: True):
        return [v for v in self.vars if not v.stale and predicate(v, self.value(v))]

    def pick(self, predicate=lambda var, value: True):
        choices = self.usable(predicate)
        return self.rng.choice(choices) if choices else None

    def new_name(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    def reset_namespace(self):
        self.ns = {"torch": torch}
        for index, (shape, dtype, seed, special) in enumerate(self.specs):
            self.ns[f"x{index}"] = make_input(shape, getattr(torch, dtype), seed, special)
        for line in self.lines:
            exec(line, self.ns)

    # -- inputs
    def make_specs(self):
        rng = self.rng
        universe = [rng.choice((1, 2, 3, 4, 5, 5, 4, 3)) for _ in range(rng.randint(1, 4))]
        for _ in range(rng.randint(2, 4)):
            dtype = rng.choice(("float32",) * 5 + ("bfloat16",) * 2 + ("int64",) * 2 + ("int32", "bool"))
            roll = rng.random()
            if roll < 0.08:
                shape = ()
            elif roll < 0.25:
                shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 3)))
            else:
                shape = tuple(universe[rng.randint(0, len(universe) - 1):])
                shape = tuple(1 if rng.random() < 0.15 else size for size in shape)
            special = dtype in ("float32", "bfloat16") and rng.random() < 0.25
            self.specs.append((shape, dtype, rng.randrange(1 << 30), special))
        for index in range(len(self.specs)):
            base = len(self.base_level)
            self.base_level[base] = 0
            self.base_input[base] = index
            self.vars.append(Var(f"x{index}", base, "fresh"))

    # -- random pieces of source
    def scalar(self) -> str:
        return self.rng.choice(SCALARS)

    def dim(self, value) -> int:
        d = self.rng.randrange(max(value.dim(), 1))
        return d - value.dim() if value.dim() and self.rng.random() < 0.3 else d

    def index_literal(self, size: int, device_of: str, unique: bool, count: int | None = None) -> str:
        if count is None:
            count = self.rng.randint(1, max(1, size if unique else size + 2))
        if unique:
            indices = self.rng.sample(range(size), min(count, size))
        else:
            indices = [self.rng.randrange(size) for _ in range(count)]
        if self.rng.random() < 0.3:
            indices = [i - size if self.rng.random() < 0.5 else i for i in indices]
        return f"torch.tensor({indices}, dtype={self.index_dtype()}, device={device_of}.device)"

    def index_dtype(self) -> str:
        """Literal index tensors are int64, sometimes int32 (where PyTorch takes both); always
        typed, since an empty literal would be float (which CPU takes for an empty scatter_ index
        and tpu rejects)."""
        return "torch.int32" if self.rng.random() < 0.15 else "torch.int64"

    def operand(self, a: Var):
        """Another operand broadcastable with `a`: a variable, a Python scalar or a 0-d tensor."""
        roll = self.rng.random()
        if roll < 0.2:
            return self.scalar(), None
        if roll < 0.28:
            dtype = self.rng.choice(("float32", "bfloat16", "int64", "int32"))
            return f"torch.tensor({self.scalar()}, dtype=torch.{dtype}, device={a.name}.device)", None

        def fits(var, value):
            try:
                torch.broadcast_shapes(value.shape, self.value(a).shape)
                return True
            except RuntimeError:
                return False
        b = self.pick(fits)
        return (b.name, b) if b else (self.scalar(), None)

    # -- statement kinds; each returns (line, kind, result_is_view_of, operands, options) ----
    def view_op(self):
        a = self.pick()
        value = self.value(a)
        rng, n = self.rng, value.dim()
        overlapping = False
        if n == 0:
            expr = rng.choice([f"{a.name}.unsqueeze(0)", f"{a.name}[None]", f"{a.name}.view(1, 1)",
                               f"{a.name}.expand(3)"])
            overlapping = "expand" in expr
        else:
            d = self.dim(value)
            size = value.shape[d]
            choice = rng.randrange(15)
            if choice == 0:
                start = rng.randrange(size)
                stop = rng.randint(start, size)
                step = rng.choice((1, 1, 2))
                parts = [":"] * (d % n) + [f"{start}:{stop}" + (f":{step}" if step > 1 else "")]
                expr = f"{a.name}[{', '.join(parts)}]"
            elif choice == 1:
                last = value.shape[-1]
                expr = f"{a.name}[..., {rng.randrange(-last, last)}]" if last else f"{a.name}[..., 0:0]"
            elif choice == 2 and n >= 2:
                d0, d1 = rng.sample(range(n), 2)
                expr = f"{a.name}.transpose({d0}, {d1})" if n > 2 or rng.random() < 0.5 else f"{a.name}.t()"
            elif choice == 3 and n >= 2:
                perm = list(range(n))
                rng.shuffle(perm)
                expr = f"{a.name}.permute({', '.join(map(str, perm))})"
            elif choice == 4:
                start = rng.randrange(size) if size else 0
                expr = f"{a.name}.narrow({d}, {start}, {rng.randint(0, size - start)})"
            elif choice == 5 and size:
                expr = f"{a.name}.select({d}, {rng.randrange(-size, size)})"
            elif choice == 6 and n >= 2:
                d0, d1 = rng.sample(range(n), 2)
                expr = f"{a.name}.diagonal({rng.randint(-1, 1)}, {d0}, {d1})"
            elif choice == 7:
                expr = f"{a.name}.unsqueeze({rng.randint(-n - 1, n)})"
            elif choice == 8 and 1 in value.shape:
                expr = f"{a.name}.squeeze({value.shape.index(1)})"
            elif choice == 9:
                shape = list(value.shape)
                if rng.random() < 0.5 and n >= 2:
                    i = rng.randrange(n - 1)
                    shape[i:i + 2] = [shape[i] * shape[i + 1]]
                elif size % 2 == 0 and size:
                    shape[d:d + 1] = [2, size // 2]
                else:
                    shape = [-1]
                expr = f"{a.name}.view({', '.join(map(str, shape))})"
            elif choice == 10:
                shape = [rng.randint(2, 3) if s == 1 and rng.random() < 0.7 else s for s in value.shape]
                if shape == list(value.shape):
                    shape = [rng.randint(2, 3)] + shape
                expr = f"{a.name}.expand({', '.join(map(str, shape))})"
                overlapping = True
            elif choice == 11 and size:
                window = rng.randint(1, size)
                step = rng.randint(1, 3)
                expr = f"{a.name}.unfold({d}, {window}, {step})"
                overlapping = step < window
            elif choice == 12 and n >= 2:
                expr = f"{a.name}.movedim({d}, {rng.randrange(n)})"
            elif choice == 13 and size:
                which = rng.choice(("unbind", "chunk", "split"))
                if which == "unbind":
                    expr = f"{a.name}.unbind({d})[{rng.randrange(size)}]"
                elif which == "chunk":
                    expr = f"{a.name}.chunk({rng.randint(1, 3)}, {d})[0]"
                else:
                    expr = f"{a.name}.split({rng.randint(1, size)}, {d})[-1]"
            elif choice == 14:
                expr = f"{a.name}[{rng.randrange(-size, size)}]" if size else f"{a.name}[1:]"
                if d != 0:
                    return None
            else:
                return None
        return expr, "view", a, [a], {"overlapping": overlapping or a.overlapping}

    def maybe_view_op(self):
        a = self.pick()
        value = self.value(a)
        choice = self.rng.randrange(4)
        if choice == 0:
            expr = f"{a.name}.reshape(-1)"
        elif choice == 1:
            expr = f"{a.name}.contiguous()"
        elif choice == 2 and value.dim() >= 2:
            expr = f"{a.name}.flatten({self.rng.randrange(value.dim() - 1)})"
        elif choice == 3 and value.dim() >= 1 and value.shape[-1] % 2 == 0 and value.shape[-1]:
            expr = f"{a.name}.reshape(*{a.name}.shape[:-1], 2, -1)"
        else:
            return None
        return expr, "maybe_view", a, [a], {"overlapping": a.overlapping}

    def unary_op(self):
        a = self.pick()
        value = self.value(a)
        x = a.name
        if value.dtype.is_floating_point:
            options = [(f"-{x}", True, False), (f"{x}.abs()", True, False), (f"torch.relu({x})", True, False),
                       (f"torch.tanh({x})", False, False), (f"torch.sigmoid({x})", False, False),
                       (f"torch.sin({x})", False, False), (f"{x} * {x}", False, False),
                       (f"torch.log({x}.abs() + 1)", False, False), (f"torch.sqrt({x})", False, True),
                       (f"torch.log({x})", False, True), (f"{x}.floor()", True, True),
                       (f"{x}.round()", True, True), (f"torch.sign({x})", True, True),
                       (f"torch.clamp({x}, min={self.rng.choice(('-1', '-0.5', 'None'))}, "
                        f"max={self.rng.choice(('1', '2.5'))})", True, False),
                       (f"{x}.clone()", True, False), (f"{x}.flip({self.dim(value)})", True, False),
                       (f"torch.remainder({x}, 1.5)", False, True), (f"{x}.isnan()", True, False),
                       (f"torch.nan_to_num({x}, nan=0.0, posinf=7.0, neginf=-7.0)", True, False),
                       (f"{x}.sort({self.dim(value)}, stable=True).values", True, False)] + self.structural(x, value)
            if value.numel() == 0 or (bool(value.isfinite().all()) and value.abs().max() < 9):
                options.append((f"torch.exp({x})", False, False))
        elif value.dtype == torch.bool:
            options = [(f"~{x}", True, False), (f"{x}.logical_not()", True, False),
                       (f"{x}.clone()", True, False)] + self.structural(x, value)
        else:
            options = [(f"-{x}", True, False), (f"{x}.abs()", True, False), (f"{x} % 3", True, False),
                       (f"{x} // 2", True, False), (f"~{x}", True, False), (f"{x} * {x}", True, False),
                       (f"torch.clamp({x}, -3, 4)", True, False), (f"{x}.sort({self.dim(value)}, stable=True).indices",
                                                                  True, False), (f"{x} ** 2", True, False),
                       (f"{x} << 1", True, False), (f"{x} >> 1", True, False)] + self.structural(x, value)
        expr, exact, discontinuous = self.rng.choice(options)
        return expr, "fresh", None, [a], {"exact": exact, "discontinuous": discontinuous}

    def structural(self, x, value):
        """Exact ops that move elements: (expression, exact, discontinuous)."""
        rng, n = self.rng, value.dim()
        options = [(f"{x}.roll({rng.randint(-2, 3)})", True, False),
                   (f"{x}.repeat({', '.join(str(rng.randint(1, 2)) for _ in range(max(n, 1)))})", True, False),
                   (f"{x}.clone(memory_format=torch.contiguous_format)", True, False)]
        if n >= 1:
            options.append((f"{x}.roll({rng.randint(-2, 3)}, {self.dim(value)})", True, False))
        if n >= 2:
            options += [(f"{x}.tril({rng.randint(-1, 1)})", True, False),
                        (f"{x}.triu({rng.randint(-1, 1)})", True, False)]
        return options

    def sync_op(self):
        """A host read in the middle of the program (cuts the pending graph in defer_and_fuse)."""
        a = self.pick()
        return f"{a.name}.cpu()", "sync", None, [a], {}

    def binary_op(self):
        a = self.pick()
        other, b = self.operand(a)
        x = a.name
        rng = self.rng
        if b is not None and rng.random() < 0.3 or b is None and rng.random() < 0.15:
            x, other = other, x
        right_is_tensor = (other == a.name) or (b is not None and other == b.name) or other.startswith("torch.")
        choice = rng.randrange(13)
        exact, discontinuous = False, False
        if choice == 0:
            expr = f"{x} + {other}"
        elif choice == 1:
            expr = f"torch.sub({x}, {other}, alpha={rng.choice(('2', '0.5', '1'))})"
        elif choice == 2:
            expr = f"{x} * {other}"
        elif choice == 3:
            expr = f"{x} / ({other}.abs() + 1)" if right_is_tensor else f"{x} / {rng.choice(('2', '-0.5', '3.0'))}"
        elif choice == 4:
            expr, exact = f"torch.maximum({a.name}, {b.name})" if b else f"torch.clamp({a.name}, min={other})", True
        elif choice == 5:
            expr, exact = f"torch.minimum({a.name}, {b.name})" if b else f"torch.clamp({a.name}, max={other})", True
        elif choice == 6:
            op = rng.choice(("<", "<=", ">", ">=", "==", "!="))
            expr, exact = f"{x} {op} {other}", True
        elif choice == 7:
            op = rng.choice(("&", "|", "^"))
            expr, exact = f"{x} {op} {other}", True
        elif choice == 8:
            expr, exact = f"torch.logical_{rng.choice(('and', 'or', 'xor'))}({x}, {other})", True
        elif choice == 9:
            cond = self.pick(lambda var, value: value.dtype == torch.bool)
            if cond is None:
                return None
            expr, exact = f"torch.where({cond.name}, {x}, {other})", True
            return expr, "fresh", None, [v for v in (a, b, cond) if v], {"exact": True}
        elif choice == 10:
            expr = f"torch.remainder({x}, ({other}.abs() + 1))" if right_is_tensor else \
                f"{x} % {rng.choice(('2', '3'))}"
            exact = discontinuous = True
        elif choice == 11:
            expr = f"torch.floor_divide({x}, ({other}.abs() + 1))" if right_is_tensor else f"{x} // 2"
            exact = discontinuous = True
        else:
            expr = f"torch.add({x}, {other}, alpha={rng.choice(('2', '-1', '3'))})"
        return expr, "fresh", None, [v for v in (a, b) if v], {"exact": exact, "discontinuous": discontinuous}

    def cast_op(self):
        a = self.pick()
        value = self.value(a)
        target = self.rng.choice(("float32", "bfloat16", "int64", "int32", "bool"))
        if not getattr(torch, target).is_floating_point and target != "bool" and value.dtype.is_floating_point:
            if value.numel() and not bool(value.isfinite().all()):
                return None
        expr = self.rng.choice((f"{a.name}.to(torch.{target})", f"{a.name}.type(torch.{target})")) \
            if self.rng.random() < 0.7 else {"float32": f"{a.name}.float()", "bfloat16": f"{a.name}.bfloat16()",
                                            "int64": f"{a.name}.long()", "int32": f"{a.name}.int()",
                                            "bool": f"{a.name}.bool()"}[target]
        return expr, "fresh", None, [a], {"exact": True, "discontinuous": True}

    def reduction_op(self):
        a = self.pick(lambda var, value: value.dim() > 0)
        if a is None:
            return None
        value = self.value(a)
        rng, x = self.rng, a.name
        d = self.dim(value)
        keep = rng.choice(("", ", keepdim=True", ", keepdim=False"))
        dims = sorted(rng.sample(range(value.dim()), rng.randint(1, value.dim())))
        dims_text = f"({', '.join(map(str, dims))},)" if len(dims) > 1 or rng.random() < 0.5 else str(dims[0])
        choice = rng.randrange(16)
        exact = discontinuous = False
        if choice == 13:
            expr = rng.choice((f"{x}.std({dims_text}{keep})", f"torch.linalg.vector_norm({x}, 2, {dims_text}{keep})",
                               f"{x}.nansum({dims_text}{keep})"))
        elif choice == 14:
            expr, exact, discontinuous = f"torch.count_nonzero({x}, {dims_text})", True, True
        elif choice == 15:
            expr, exact = f"torch.aminmax({x}, dim={d}{keep}).{rng.choice(('min', 'max'))}", True
        elif choice == 0:
            expr = f"{x}.sum({dims_text}{keep})"
            exact = not value.dtype.is_floating_point
        elif choice == 1:
            target = "float32" if value.dtype.is_floating_point else rng.choice(("float32", "int64"))
            expr = f"{x}.sum()" if rng.random() < 0.5 else f"{x}.sum({d}, dtype=torch.{target})"
            exact = not value.dtype.is_floating_point and "float32" not in expr
        elif choice == 2:
            expr = f"{x}.mean({dims_text}{keep})"
        elif choice == 3:
            expr, exact = f"{x}.amax({dims_text}{keep})", True
        elif choice == 4:
            expr, exact = f"{x}.amin({dims_text}{keep})", True
        elif choice == 5:
            expr, exact, discontinuous = f"{x}.argmax({d}{keep})" if rng.random() < 0.8 else f"{x}.argmax()", True, True
        elif choice == 6:
            expr, exact, discontinuous = f"{x}.argmin({d}{keep})", True, True
        elif choice == 7:
            if value.shape[d] > 6:
                return None
            expr = f"{x}.prod({d}{keep})"
            exact = not value.dtype.is_floating_point
        elif choice == 8:
            expr = f"{x}.var({dims_text}{keep}, correction={rng.choice((0, 1))})"
        elif choice == 9:
            expr = f"torch.logsumexp({x}, {dims_text}{keep})"
        elif choice == 10:
            part = rng.choice(("values", "indices"))
            expr, exact = f"{x}.{rng.choice(('max', 'min'))}({d}{keep}).{part}", True
            discontinuous = part == "indices"
        elif choice == 11:
            expr, exact = f"{x}.{rng.choice(('any', 'all'))}({d}{keep})", True
        else:
            expr = f"{x}.cumsum({d})"
            exact = not value.dtype.is_floating_point
        return expr, "fresh", None, [a], {"exact": exact, "discontinuous": discontinuous}

    def matmul_op(self):
        a = self.pick(lambda var, value: value.dim() >= 1 and value.dtype != torch.bool)
        if a is None:
            return None
        value = self.value(a)
        rng = self.rng
        if rng.random() < 0.4 and value.dim() >= 2:
            expr = rng.choice((f"{a.name} @ {a.name}.transpose(-1, -2)", f"{a.name}.transpose(-1, -2) @ {a.name}"))
            operands = [a]
        else:
            def fits(var, other):
                try:
                    torch.matmul(torch.empty(value.shape), torch.empty(other.shape))
                    return other.dtype == value.dtype
                except RuntimeError:
                    return False
            b = self.pick(fits)
            if b is None:
                return None
            expr = rng.choice((f"{a.name} @ {b.name}", f"torch.matmul({a.name}, {b.name})"))
            if value.dim() == 2 and self.value(b).dim() == 2:
                expr = rng.choice((expr, f"torch.mm({a.name}, {b.name})"))
            operands = [a, b]
        return expr, "fresh", None, operands, {"exact": not value.dtype.is_floating_point}

    def index_op(self):
        a = self.pick(lambda var, value: value.dim() > 0 and value.numel() > 0)
        if a is None:
            return None
        value = self.value(a)
        rng, x = self.rng, a.name
        d = self.dim(value)
        size = value.shape[d]
        choice = rng.randrange(10)
        operands = [a]
        if choice == 8 and value.dim() >= 2 and value.shape[1]:
            count = rng.randint(1, 4)
            first = self.index_literal(value.shape[0], x, unique=False, count=count)
            second = self.index_literal(value.shape[1], x, unique=False, count=rng.choice((count, 1)))
            expr = rng.choice((f"{x}[{first}, {second}]", f"{x}[:, {second}]", f"{x}[{first}, 1:]"))
        elif choice == 9 and value.dim() >= 2:
            expr = f"{x}[{self.index_literal(value.shape[0], x, unique=False)}].transpose(0, -1)"
        elif choice == 0:
            expr = f"{x}[{self.index_literal(value.shape[0], x, unique=False)}]"
        elif choice == 1:
            expr = f"{x}.index_select({d}, {self.index_literal(size, x, unique=False)})"
        elif choice == 2:
            index = self.pick(lambda var, v: v.dtype in INTS and v.dim() <= 2)
            if index is None:
                return None
            operands.append(index)
            expr = f"{x}[{index.name} % {value.shape[0]}]" if rng.random() < 0.5 else \
                f"{x}[..., {index.name} % {value.shape[-1]}]"
            if self.known_index_layout_bug(self.value(index)):
                return None
        elif choice == 3:
            shape = [rng.randint(1, size + 1) if i == d % value.dim() else rng.randint(1, s) if s else 0
                     for i, s in enumerate(value.shape)]
            indices = torch.randint(0, size, shape, generator=torch.Generator().manual_seed(rng.randrange(1 << 30)))
            expr = f"torch.gather({x}, {d}, torch.tensor({indices.tolist()}, dtype={self.index_dtype()}, " \
                   f"device={x}.device))"
        elif choice == 4:
            mask = self.pick(lambda var, v: v.dtype == torch.bool and v.dim() <= value.dim())
            if mask is None:
                return None
            operands.append(mask)
            expr = f"{x}.masked_fill({mask.name}, {self.scalar()})"
        elif choice == 5:
            mask = self.pick(lambda var, v: v.dtype == torch.bool and v.shape == value.shape)
            if mask is None:
                return None
            operands.append(mask)
            expr = rng.choice((f"{x}[{mask.name}]", f"torch.masked_select({x}, {mask.name})"))
        elif choice == 6:
            others = self.usable(lambda var, v: v.dtype == value.dtype and v.dim() == value.dim())
            b = rng.choice(others)
            operands.append(b)
            expr = rng.choice((f"torch.cat([{x}, {b.name}], {d})", f"torch.stack([{x}, {b.name}], {d})"))
        else:
            index = self.pick(lambda var, v: v.dtype in INTS and v.dim() == value.dim())
            if index is None:
                return None
            operands.append(index)
            expr = f"torch.gather({x}, {d}, {index.name} % {size})"
        return expr, "fresh", None, operands, {"exact": True}

    def inplace_op(self):
        dst = self.pick(lambda var, value: var.kind != "maybe_view" and not var.overlapping)
        if dst is None:
            return None
        value = self.value(dst)
        rng, x = self.rng, dst.name

        def separate(var, other):
            return var.base != dst.base
        src = self.pick(lambda var, v: separate(var, v) and self._broadcasts(v, value))
        s = src.name if src else self.scalar()
        srcs = [src] if src else []
        choice = rng.randrange(20)
        exact = True
        if choice == 0:
            line, exact = f"{x}.add_({s})", False
            if rng.random() < 0.3:
                line, srcs = f"{x}.add_({x})", []
        elif choice == 1:
            line, exact = f"{x}.mul_({s})", False
        elif choice == 2:
            line, exact = f"{x}.sub_({s}, alpha={rng.choice(('2', '1', '0.5'))})", False
        elif choice == 3:
            if not src:
                return None
            line = f"{x}.copy_({s})"
        elif choice == 4:
            line, srcs = f"{x}.fill_({self.scalar()})", []
        elif choice == 5:
            line, srcs = f"{x}.zero_()", []
        elif choice == 6:
            line, srcs = f"{x}.clamp_({rng.choice(('-1', '-0.5', '0'))}, {rng.choice(('1', '2', '0.5'))})", []
        elif choice == 7 and value.dim() > 0 and value.shape[0] > 0:
            line = f"{x}[{self.index_literal(value.shape[0], x, unique=True)}] = {s}"
            if value.dim() >= 2 and value.shape[1] and rng.random() < 0.4:
                line = f"{x}[:, {self.index_literal(value.shape[1], x, unique=True)}] = {s}"
        elif choice == 8 and value.dim() > 0 and value.shape[0] > 0:
            count = rng.randint(1, value.shape[0] + 2)
            index = self.index_literal(value.shape[0], x, unique=False, count=count)
            source = self.pick(lambda var, v: separate(var, v) and v.dtype == value.dtype
                               and tuple(v.shape) == (count,) + tuple(value.shape[1:]))
            if source is None:
                line, srcs = f"{x}.index_put_(({index},), torch.tensor({self.scalar()}, dtype={x}.dtype, "\
                             f"device={x}.device), accumulate=True)", []
            else:
                line, srcs = f"{x}.index_put_(({index},), {source.name}, accumulate=True)", [source]
            exact = value.dtype == torch.bool or not value.dtype.is_floating_point
        elif choice == 9:
            mask = self.pick(lambda var, v: separate(var, v) and v.dtype == torch.bool and self._broadcasts(v, value))
            if mask is None:
                return None
            line, srcs = f"{x}.masked_fill_({mask.name}, {self.scalar()})", [mask]
        elif choice == 10 and value.dim() > 0:
            d = self.dim(value)
            if value.shape[d] == 0:
                return None
            line, srcs = f"{x}.index_fill_({d}, {self.index_literal(value.shape[d], x, unique=False)}, " \
                         f"{self.scalar()})", []
        elif choice == 11 and value.dim() > 0:
            d = self.dim(value)
            if value.shape[d] == 0:
                return None
            count = rng.randint(1, value.shape[d] + 2)
            shape = list(value.shape)
            shape[d] = count
            source = self.pick(lambda var, v: separate(var, v) and list(v.shape) == shape)
            if source is None:
                return None
            line = f"{x}.index_add_({d}, {self.index_literal(value.shape[d], x, unique=False, count=count)}, " \
                   f"{source.name}{rng.choice(('', ', alpha=2'))})"
            srcs, exact = [source], not value.dtype.is_floating_point
        elif choice == 12 and value.dim() > 0:
            d = self.dim(value)
            dd = d % value.dim()
            size = value.shape[d]
            if size == 0:
                return None
            count = rng.randint(1, size)
            full = [s if i == dd else rng.randint(1, s) if s else 0 for i, s in enumerate(value.shape)]
            gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
            index = torch.argsort(torch.rand(full, generator=gen), dim=dd).narrow(dd, 0, count)
            index_text = f"torch.tensor({index.tolist()}, dtype={self.index_dtype()}, device={x}.device)"
            source = self.pick(lambda var, v: separate(var, v) and v.dtype == value.dtype and v.dim() == value.dim()
                               and all(vs >= i for vs, i in zip(v.shape, index.shape)))
            if source is not None and rng.random() < 0.7:
                line, srcs = f"{x}.scatter_({d}, {index_text}, {source.name})", [source]
            else:
                line, srcs = f"{x}.scatter_({d}, {index_text}, {self.scalar()})", []
        elif choice == 13 and value.dim() > 0:
            d = self.dim(value)
            size = value.shape[d]
            if size == 0:
                return None
            start = rng.randrange(size)
            parts = [":"] * (d % value.dim()) + [f"{start}:{rng.randint(start, size)}"]
            line = f"{x}[{', '.join(parts)}] = {s}"
        elif choice == 14:
            a = self.pick(lambda var, v: separate(var, v))
            b = self.pick(lambda var, v: separate(var, v))
            if a is None or b is None:
                return None
            op = rng.choice(("add", "mul", "maximum", "sub"))
            line, srcs = f"torch.{op}({a.name}, {b.name}, out={x})", [a, b]
            exact = op == "maximum"
        elif choice == 15 and value.dtype.is_floating_point:
            a = self.pick(lambda var, v: separate(var, v) and self._broadcasts(v, value))
            if a is None or src is None:
                return None
            line, srcs, exact = f"{x}.addcmul_({a.name}, {src.name}, value={rng.choice(('0.5', '-2'))})", \
                [a, src], False
        elif choice == 16:
            if value.dtype.is_floating_point:
                op, exact = rng.choice((("neg_", True), ("abs_", True), ("relu_", True), ("sigmoid_", False),
                                        ("tanh_", False), ("clamp_min_(0.5)", True), ("floor_", True),
                                        ("nan_to_num_(0.0, 3.0, -3.0)", True), ("sin_", False)))
                if op == "floor_" and self.base_level[dst.base]:
                    return None
            elif value.dtype == torch.bool:
                op = rng.choice(("logical_not_", "bitwise_not_"))
            else:
                op = rng.choice(("neg_", "abs_", "bitwise_not_", "clamp_max_(3)", "remainder_(3)"))
            line, srcs = f"{x}.{op}" + ("()" if "(" not in op else ""), []
        elif choice == 17 and value.dim() > 0:
            d = self.dim(value)
            size = value.shape[d]
            if size == 0:
                return None
            count = rng.randint(1, size)
            shape = list(value.shape)
            shape[d] = count
            source = self.pick(lambda var, v: separate(var, v) and list(v.shape) == shape)
            if source is None:
                return None
            line = f"{x}.index_copy_({d}, {self.index_literal(size, x, unique=True, count=count)}, {source.name})"
            srcs = [source]
        elif choice == 18:
            mask = self.pick(lambda var, v: separate(var, v) and v.dtype == torch.bool and self._broadcasts(v, value))
            source = self.pick(lambda var, v: separate(var, v) and v.dtype == value.dtype
                               and v.numel() >= value.numel())
            if mask is None or source is None:
                return None
            line, srcs = f"{x}.masked_scatter_({mask.name}, {source.name})", [mask, source]
        elif choice == 19 and value.dtype.is_floating_point:
            end = self.pick(lambda var, v: separate(var, v) and v.dtype == value.dtype and self._broadcasts(v, value))
            if end is None:
                return None
            line, srcs, exact = f"{x}.lerp_({end.name}, {rng.choice(('0.25', '0.5', '-1.0'))})", [end], False
        else:
            return None
        return line, "inplace", dst, srcs, {"exact": exact}

    @staticmethod
    def _broadcasts(source, target) -> bool:
        try:
            return torch.broadcast_shapes(source.shape, target.shape) == target.shape
        except RuntimeError:
            return False

    # -- one statement
    def step(self) -> bool:
        kinds = [(self.view_op, 5), (self.maybe_view_op, 1), (self.unary_op, 3), (self.binary_op, 6),
                 (self.cast_op, 2), (self.reduction_op, 3), (self.matmul_op, 1), (self.index_op, 3),
                 (self.inplace_op, 7), (self.sync_op, 0.4)]
        make = self.rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        try:
            candidate = make()
        except (ValueError, IndexError):  # an empty range: a dimension of size 0 or 1
            return False
        if candidate is None:
            return False
        expr, kind, dst, operands, options = candidate
        # Nothing discontinuous of rounded floats, nothing rounded written into integers or bools.
        into_integers = kind == "inplace" and not self.value(dst).dtype.is_floating_point
        for var in operands:
            if self.value(var).dtype.is_floating_point and self.level(var) and \
                    (options.get("discontinuous") or into_integers):
                return False
        if self.known_bug(expr, kind, dst, operands):
            return False
        if kind == "inplace":
            written = self.value(dst)
            if written.dtype in INTS and any(self.value(v).dtype.is_floating_point and self.value(v).numel()
                                             and not bool(self.value(v).isfinite().all()) for v in operands):
                return False
            line, name = expr, None
        elif kind == "sync":
            line, name = expr, None
        else:
            name = self.new_name()
            line = f"{name} = {expr}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                exec(line, self.ns)
            self.accept(line, name, kind, dst, operands, options)
        except Exception:  # noqa: BLE001  (an invalid or ill-defined candidate: drop it)
            self.ns.pop(name, None)
            if kind == "inplace":
                self.reset_namespace()
            return False
        self.lines.append(line)
        return True

    @staticmethod
    def known_index_layout_bug(index) -> bool:
        """Bug: advanced indexing with a non-contiguous index tensor lays its result out
        contiguous where CPU follows the index's strides: x = randn(4, 5); i = tensor([[0, 1, 2],
        [3, 0, 1]]).t(); x[i] has strides (5, 15, 1) on CPU, (10, 5, 1) on tpu; x[..., i] (6, 1, 3)
        on CPU, (6, 2, 1) on tpu."""
        return not INCLUDE_KNOWN_BUGS and index.numel() > 1 and not index.is_contiguous()

    def known_bug(self, expr, kind, dst, operands) -> bool:
        """Statements left out because of a known torch_tpu bug (each named; remove when fixed)."""
        if INCLUDE_KNOWN_BUGS:
            return False
        values = [self.value(v) for v in operands + ([dst] if kind == "inplace" else [])]
        # Bug: a broadcasting op over an operand whose size-1 dim has the same stride as another
        # dim (strides other than contiguous()'s) lays its result out contiguous where CPU's
        # TensorIterator orders dims by those strides: empty_strided((1, 1, 2), (1, 3, 1)) +
        # zeros(4, 1) has strides (1, 1, 4) on CPU, (8, 2, 1) on tpu. (Same-shape operands were
        # fixed in ec9b167.)
        if kind == "fresh" and len({tuple(v.shape) for v in values}) > 1:
            for v in values:
                if v.stride() == torch.empty(v.shape).stride():
                    continue
                strides = [st for size, st in zip(v.shape, v.stride()) if size > 1]
                if any(size == 1 and st in strides for size, st in zip(v.shape, v.stride())):
                    return True
        return False

    def accept(self, line, name, kind, dst, operands, options):
        if kind == "sync":
            return
        levels = [self.level(v) for v in operands]
        operand_level = max(levels, default=0)
        if kind == "inplace":
            written = self.value(dst)
            level = max(operand_level, self.base_level[dst.base])
            if written.dtype.is_floating_point and (level or not options.get("exact")):
                level = max(level, _level_of(written.dtype))
            self.check_values(written)
            self.base_level[dst.base] = level if written.dtype.is_floating_point else 0
            for var in self.vars:
                if var.base == dst.base and var.kind == "maybe_view":
                    var.stale = True
            return
        result = self.ns[name]
        if not isinstance(result, torch.Tensor):
            raise Reject(line)
        if not result.dtype.is_floating_point and operand_level:
            raise Reject(line)
        self.check_values(result)
        if kind in ("view", "maybe_view"):
            kind = "maybe_view" if dst.kind == "maybe_view" else kind
            self.vars.append(Var(name, dst.base, kind, options.get("overlapping", False)))
            return
        for var in operands:  # x.to(its own dtype), x.float() of a float...: the operand itself
            if result.untyped_storage().data_ptr() == self.value(var).untyped_storage().data_ptr() \
                    and result.numel():
                self.vars.append(Var(name, var.base, "maybe_view" if var.kind == "maybe_view" else "view",
                                     var.overlapping))
                return
        level = operand_level
        if result.dtype.is_floating_point and (level or not options.get("exact")):
            level = max(level, _level_of(result.dtype))
        base = len(self.base_level)
        self.base_level[base] = level if result.dtype.is_floating_point else 0
        self.vars.append(Var(name, base, "fresh"))

    @staticmethod
    def check_values(value):
        if value.numel() == 0:
            return
        if value.dtype.is_floating_point:
            finite = value[value.isfinite()]
            if finite.numel() and finite.abs().max() > FLOAT_LIMIT:
                raise Reject("float magnitude")
        elif value.dtype != torch.bool and value.abs().max() > INT_LIMIT:
            raise Reject("integer magnitude")

    def generate(self) -> Program:
        self.make_specs()
        self.reset_namespace()
        target = self.rng.randint(6, 18)
        attempts = 0
        while len(self.lines) < target and attempts < 400:
            attempts += 1
            self.step()
        fresh = [v for v in self.vars if not v.stale and v.kind == "fresh" and not v.name.startswith("x")]
        others = [v for v in self.vars if not v.stale and not v.name.startswith("x")]
        outputs = fresh[-1:] + [v for v in others if v not in fresh[-1:] and self.rng.random() < 0.5]
        if not outputs:
            outputs = [self.vars[0]]
        levels = {v.name: self.level(v) for v in outputs}
        for base, index in self.base_input.items():
            levels[f"x{index}"] = self.base_level[base]
        return Program(self.seed, self.specs, self.lines, [v.name for v in outputs], levels)


def generate(seed: int) -> Program:
    return Generator(seed).generate()


# --- running and comparing --------------------------------------------------------------------

@dataclasses.dataclass
class Mismatch:
    program: Program
    mode: str
    problems: list


def check_mode(program: Program, mode: str, reference=None):
    """Problems of `program` in `mode` against CPU (an exception is one problem)."""
    fn, make_inputs = program.functions()
    if reference is None:
        reference = run_program(fn, make_inputs, "cpu", "eager")
    try:
        got = run_program(fn, make_inputs, "tpu", mode)
    except Exception as error:  # noqa: BLE001  (CPU ran it: any error is a mismatch)
        with contextlib.suppress(Exception):
            torch.tpu.synchronize()  # nothing of this program's left to surface in the next one
        return [f"raised {type(error).__name__}: {error}".strip()[:2000]]
    return compare_results(got, reference, program.output_levels(), program.input_levels(),
                           check_strides=mode != "compiled")


def upstream_compile_problem(program: Program) -> bool:
    """Whether torch.compile alone (backend aot_eager, on CPU) already differs from eager CPU."""
    fn, make_inputs = program.functions()
    reference = run_program(fn, make_inputs, "cpu", "eager")
    try:
        got = run_program(fn, make_inputs, "cpu", "compiled")
    except Exception:  # noqa: BLE001
        return True
    return bool(compare_results(got, reference, program.output_levels(), program.input_levels(), False))


def run_one(program: Program, modes, stats=None):
    """Mismatches of one program over `modes`."""
    fn, make_inputs = program.functions()
    reference = run_program(fn, make_inputs, "cpu", "eager")
    found = []
    for mode in modes:
        problems = check_mode(program, mode, reference)
        if problems and mode == "compiled" and upstream_compile_problem(program):
            if stats is not None:
                stats["upstream_compile_problems"] = stats.get("upstream_compile_problems", 0) + 1
                stats.setdefault("upstream_compile_seeds", []).append(program.seed)
            continue
        if problems:
            found.append(Mismatch(program, mode, problems))
    return found


def minimize(program: Program, mode: str, budget_s: float = 120.0) -> Program:
    """Drop statements and outputs while CPU still runs the program and `mode` still differs."""
    deadline = time.monotonic() + budget_s

    def still_fails(candidate):
        try:
            fn, make_inputs = candidate.functions()
            reference = run_program(fn, make_inputs, "cpu", "eager")
        except Exception:  # noqa: BLE001  (the reduced program is not valid on CPU)
            return False
        return bool(check_mode(candidate, mode, reference))

    current = program
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for i in range(len(current.outputs) - 1, -1, -1):
            if len(current.outputs) > 1:
                trial = dataclasses.replace(current, outputs=current.outputs[:i] + current.outputs[i + 1:])
                if still_fails(trial):
                    current, changed = trial, True
        for i in range(len(current.lines) - 1, -1, -1):
            if time.monotonic() > deadline:
                break
            trial = dataclasses.replace(current, lines=current.lines[:i] + current.lines[i + 1:])
            if still_fails(trial):
                current, changed = trial, True
    return current


def repro(program: Program, mode: str, problems) -> str:
    runtime = "\n\n".join(inspect.getsource(f) for f in (make_input, run_program, _tensor_problem, compare_results))
    message = textwrap.indent("\n".join(problems), "    ")
    return f'''"""torch_tpu differential fuzz repro (tools/fuzz.py, program seed {program.seed}).
Mode {mode!r} differs from PyTorch CPU:
{message}
Run: .venv/bin/python this_file.py (exits 1 while the mismatch persists)."""
import contextlib
import sys
import warnings

import torch

import torch_tpu  # noqa: F401

TOLERANCES = {TOLERANCES!r}
MODE = {mode!r}


{runtime}


{program.inputs_source()}

{program.source()}

if __name__ == "__main__":
    reference = run_program(program, make_inputs, "cpu", "eager")
    got = run_program(program, make_inputs, "tpu", MODE)
    problems = compare_results(got, reference, {program.output_levels()!r}, {program.input_levels()!r},
                               check_strides=MODE != "compiled")
    print("\\n".join(problems) or "no mismatch")
    sys.exit(1 if problems else 0)
'''


def fuzz(seed: int, programs: int | None = None, minutes: float | None = None, modes=MODES,
         log=print, minimize_budget_s: float = 120.0):
    """Run programs seeded from `seed` until `programs` ran or `minutes` passed. Returns
    (mismatches, stats); each mismatch carries a repro (and a minimized one)."""
    import torch_tpu  # noqa: F401  (the tpu device)
    stats = {"programs": 0, "statements": 0}
    deadline = time.monotonic() + 60 * minutes if minutes else None
    mismatches = []
    index = 0
    while (programs is None or index < programs) and (deadline is None or time.monotonic() < deadline):
        program = generate(seed * 100_000 + index)
        index += 1
        stats["programs"] += 1
        stats["statements"] += len(program.lines)
        for number, mismatch in enumerate(run_one(program, modes, stats)):
            mismatch.repro = repro(program, mismatch.mode, mismatch.problems)
            mismatch.minimized = mismatch.repro
            if minimize_budget_s and number == 0:  # once per program: its first differing mode
                small = minimize(program, mismatch.mode, minimize_budget_s)
                mismatch.minimized = repro(small, mismatch.mode, check_mode(small, mismatch.mode) or mismatch.problems)
            mismatches.append(mismatch)
            log(f"MISMATCH program seed {program.seed}, mode {mismatch.mode}:\n" + "\n".join(mismatch.problems))
    return mismatches, stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0, help="program i has seed SEED*100000+i")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long")
    parser.add_argument("--programs", type=int, default=None, help="stop after this many programs")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    parser.add_argument("--program-seed", type=int, default=None, help="run (and print) one program")
    parser.add_argument("--no-minimize", action="store_true", help="print repros without minimizing")
    parser.add_argument("--include-known-bugs", action="store_true",
                        help="also generate what the known-bug exclusions leave out (to check a fix)")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; choose from {MODES}")
    global INCLUDE_KNOWN_BUGS
    INCLUDE_KNOWN_BUGS = args.include_known_bugs
    start = time.monotonic()
    if args.program_seed is not None:
        program = generate(args.program_seed)
        print(program.inputs_source() + "\n" + program.source())
        import torch_tpu  # noqa: F401
        mismatches = run_one(program, modes)
        for m in mismatches:
            print(repro(program, m.mode, m.problems))
        return 1 if mismatches else 0
    if args.minutes is None and args.programs is None:
        args.minutes = 1.0
    mismatches, stats = fuzz(args.seed, args.programs, args.minutes, modes,
                             minimize_budget_s=0 if args.no_minimize else 120.0)
    for mismatch in mismatches:
        print("=" * 100)
        print(f"# Repro (program seed {mismatch.program.seed}, mode {mismatch.mode}):")
        print(mismatch.repro)
        if mismatch.minimized != mismatch.repro:
            print("# Minimized (statements dropped automatically; check it is still well defined):")
            print(mismatch.minimized)
    print(f"{stats['programs']} programs ({stats['statements']} statements), modes {','.join(modes)}, "
          f"{time.monotonic() - start:.0f}s: {len(mismatches)} mismatches"
          + (f"; {stats['upstream_compile_problems']} torch.compile (aot_eager) problems not counted"
             f" (program seeds {stats['upstream_compile_seeds']})" if stats.get("upstream_compile_problems") else ""))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
