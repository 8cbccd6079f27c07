"""The lowering registry against the dispatcher: every overload name a lowering registers under is
an operator of this torch, of the variant kind it was registered as, with a tpu kernel."""

import pytest
import torch

from torch_tpu import _C

NAMES = _C._lowered_overload_names()


def _operator(name: str) -> tuple[str, str]:
    op, _, overload = name.partition(".")
    return op, overload


def _out_arguments(schema) -> list:
    return [a for a in schema.arguments if a.kwarg_only and a.alias_info and a.alias_info.is_write]


def test_names_are_sorted_unique_aten_overloads():
    assert NAMES == sorted(set(NAMES))
    # Besides ATen: the operator that calls traced JAX kernels (torch.tpu.pallas).
    assert [name for name in NAMES if not name.startswith("aten::")] == ["tpu_kernels::jax_call"]
    # The registry is not empty by accident: the most common ops are there.
    for name in ("aten::add.Tensor", "aten::add_.Tensor", "aten::add.out", "aten::mm"):
        assert name in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_dispatcher_knows_name_and_tpu_has_its_kernel(name):
    schema = torch._C._dispatch_find_schema_or_throw(*_operator(name)).schema()
    assert f"{schema.name}.{schema.overload_name}".rstrip(".") == name
    assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")


@pytest.mark.parametrize("name", NAMES)
def test_variant_kind_matches_schema(name):
    # In-place names end their operator in "_" (Python's dunders: `__i<op>__`) and write self;
    # every other variant writes out=.
    schema = torch._C._dispatch_find_schema_or_throw(*_operator(name)).schema()
    op = _operator(name)[0].split("::")[-1]
    writes = [a for a in schema.arguments if a.alias_info and a.alias_info.is_write]
    dunder = op.startswith("__") and op.endswith("__")
    if op.startswith("__i") if dunder else op.endswith("_"):
        assert schema.arguments[0].alias_info.is_write
        assert not _out_arguments(schema)
    elif writes:
        assert _out_arguments(schema) == writes
