// Advanced-indexing arguments (the Tensor?[] of index, index_put, _index_put_impl) as PyTorch
// defines them, checked and normalized on the host before lowering.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <vector>

namespace torch_tpu::aten {

// Rewrites every Tensor?[] argument of `arguments` (the op's boxed arguments, self first) in
// place so that the lowering sees only long/int index tensors on self's device: bool and uint8
// masks become one index tensor per masked dimension (their nonzero coordinates), CPU index
// tensors move to the device, and lists TorchScript passes as Tensor[] become Tensor?[].
// Raises what PyTorch raises for everything decidable from shapes, dtypes and devices (mask
// shape mismatches, unbroadcastable indices, too many indices, values that do not fit the
// indexing result), in every execution mode. Ops without Tensor?[] arguments are untouched.
void PrepareIndexArguments(const c10::FunctionSchema& schema, std::vector<c10::IValue>& arguments);

}  // namespace torch_tpu::aten
