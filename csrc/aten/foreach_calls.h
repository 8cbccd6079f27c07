// Calls of torch._foreach_* ops. Most run as one program (lowering/foreach.h); the ones that one
// program cannot stand for run PyTorch's own per-tensor loop, element op by element op.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>

#include <optional>
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

// When a call of a pointwise foreach op can run over its tensors' flat elements (every list's
// i-th tensor contiguous, all of one shape per position, a tensor argument 0-d, and some tensor
// of two or more dimensions): the shape of each position, which its new result takes back.
std::optional<std::vector<std::vector<int64_t>>> FlattenedForeachShapes(
    const lowering::ForeachForm& form, const std::vector<c10::IValue>& arguments);

}  // namespace torch_tpu::aten
