"""The Dynamo backend "tpu": AOTAutograd with the tpu decompositions, each forward and backward
graph compiled to one native program. Graphs traced with symbolic shapes are traced once, with
their symbols, and run one program per size bucket (bounded.py, bounded_training.py), or per
exact shape where padding cannot be kept out of their results."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from torch_tpu._dynamo.bounded import SymbolicGraph
from torch_tpu._dynamo.bounded_training import linked_partition, training_compiler
from torch_tpu._dynamo.collectives import _compile_with_collectives, _is_collective
from torch_tpu._dynamo.decompositions import _decompositions
from torch_tpu._dynamo.graph_call import _compile_graph, _copy_outputs_of_inputs
from torch_tpu._dynamo.messages import _warn_once


def _compiler_for(gm: torch.fx.GraphModule) -> Callable:
    """The function that compiles `gm` (an AOTAutograd graph) to what runs it."""
    _copy_outputs_of_inputs(gm)
    if any(_is_collective(node) for node in gm.graph.nodes):
        return _compile_with_collectives
    return _compile_graph


def _fw_compiler(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    return _compiler_for(gm)(gm, example_inputs)


def _cacheable_compiler(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """The fw/bw compiler of graphs AOTAutograd's cache may keep (output_code.py)."""
    from torch_tpu._dynamo.output_code import TpuGraphCode

    return TpuGraphCode(gm, _compiler_for(gm), example_inputs)


_aot_backend = None
_aot_symbolic_backend = None


def _symbolic_inference_compiler(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    return SymbolicGraph(gm, _fw_compiler)


def _partition_without_cse(joint_module, joint_inputs, **kwargs):
    """Inductor's min-cut partition without its common-subexpression pass over the joint graph:
    XLA eliminates common subexpressions in every program it compiles, and that pass imports
    Inductor's pattern matcher and lowerings (0.6-0.8 s of a process's first compiled step; the
    peaks of benchmarks/memory.py's compiled steps are the same either way)."""
    import torch._functorch.config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    with functorch_config.patch(cse=False):
        return min_cut_rematerialization_partition(joint_module, joint_inputs, **kwargs)


def _aot_options(linked: bool = False) -> dict:
    # The backward recomputes cheap pointwise results from what the forward saves rather
    # than keeping every intermediate alive between the two programs (Inductor's choice):
    # a training step's activations then need what eager's need, or less.
    partition = _partition_without_cse
    # Symbolic training graphs: the forward and backward of a pair share each call's buckets.
    return dict(partition_fn=linked_partition(partition) if linked else partition,
                decompositions=_decompositions(), keep_inference_input_mutations=True)


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list, **kwargs: Any) -> Callable:
    """The Dynamo backend registered as ``"tpu"``."""
    global _aot_backend, _aot_symbolic_backend
    from torch._dynamo.backends.common import aot_autograd

    options = kwargs.get("options") or {}
    if options or kwargs.get("mode") not in (None, "default"):
        _warn_once('torch.compile(backend="tpu"): mode= and inductor options are accepted and '
                   "ignored; XLA compiles every graph at its full optimization level")
    if _aot_backend is None:
        from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
        from torch._inductor.output_code import OutputCode

        # Serializable compilers: AOTAutograd's cache keeps their graphs (output_code.py).
        _aot_backend = aot_autograd(
            fw_compiler=SerializableAOTDispatchCompiler(OutputCode, _cacheable_compiler),
            bw_compiler=SerializableAOTDispatchCompiler(OutputCode, _cacheable_compiler),
            **_aot_options())
    # Imported at the first compile: at registration torch._inductor may be importing still.
    from torch_tpu._dynamo.output_code import aot_cache_scope

    if not any(_is_symbolic(value) for value in example_inputs):
        with aot_cache_scope(_aot_backend.kwargs["decompositions"]):
            return _aot_backend(gm, example_inputs)
    if _aot_symbolic_backend is None:
        _aot_symbolic_backend = aot_autograd(fw_compiler=training_compiler(_fw_compiler),
                                             bw_compiler=training_compiler(_fw_compiler),
                                             inference_compiler=_symbolic_inference_compiler,
                                             **_aot_options(linked=True))
    from torch._dynamo.exc import RestartAnalysis, TensorifyScalarRestartAnalysis

    try:
        return _aot_symbolic_backend(gm, example_inputs)
    except (RestartAnalysis, TensorifyScalarRestartAnalysis):
        raise  # Dynamo's own control flow: it traces the frame again
    except Exception as error:  # noqa: BLE001 - any tracing failure: trace each shape instead
        _warn_once('torch.compile(backend="tpu"): a graph with dynamic shapes is traced again '
                   f"for each input shape because tracing it with symbolic shapes failed: "
                   f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
        return _PerShape(gm)


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return True
    return isinstance(value, torch.Tensor) and any(
        not isinstance(v, int) for v in (*value.shape, *value.stride(), value.storage_offset()))


class _PerShape:
    """A graph Dynamo traced with symbolic shapes, compiled again for each concrete signature:
    the sizes it receives as inputs become constants of that compilation."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.compiled: dict = {}

    def __call__(self, *args: Any) -> Any:
        key = tuple((tuple(a.shape), tuple(a.stride()), a.dtype, a.device, a.requires_grad)
                    if isinstance(a, torch.Tensor) else (type(a), a) for a in args)
        compiled = self.compiled.get(key)
        if compiled is None:
            compiled = self.compiled[key] = self._specialize(args)
        sizes = [i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)]
        return compiled(*[a for i, a in enumerate(args) if i not in sizes])

    def _specialize(self, args: tuple) -> Callable:
        import copy

        from torch._guards import TracingContext, tracing
        from torch._subclasses.fake_tensor import FakeTensorMode

        from torch_tpu._dynamo.output_code import aot_cache_scope

        gm = copy.deepcopy(self.gm)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for node, value in zip(placeholders, args):
            if not isinstance(value, torch.Tensor):  # a size: a constant of this compilation
                node.replace_all_uses_with(value)
                gm.graph.erase_node(node)
        gm.recompile()
        fake_mode = FakeTensorMode(static_shapes=True)
        fake_args = [fake_mode.from_tensor(a, static_shapes=True) for a in args
                     if isinstance(a, torch.Tensor)]
        with tracing(TracingContext(fake_mode)), \
                aot_cache_scope(_aot_backend.kwargs["decompositions"]):
            return _aot_backend(gm, fake_args)
