// Calls of torch._foreach_* ops. Most run as one program (lowering/foreach.h); the ones that one
// program cannot stand for run PyTorch's own per-tensor loop, element op by element op.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>

#include <vector>

#include "lowering/foreach.h"

namespace torch_tpu::aten {

// Checks the lists as PyTorch does (non-empty, equal lengths) and, where one program would not
// compute what the per-tensor loop computes, runs that loop and pushes its results on `stack`:
// elements on several devices, or an in-place call where a written tensor shares its storage with
// another element, or overlaps itself or its own element's inputs (the element ops then raise
// or see earlier elements' writes, as on CPU). Returns whether it ran the call.
bool RunForeachPerElementWhereNeeded(const lowering::ForeachForm& form, bool in_place,
                                     const std::vector<c10::IValue>& arguments,
                                     torch::jit::Stack* stack);

}  // namespace torch_tpu::aten
