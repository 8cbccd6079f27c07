// The explicit CPU fallback, also for lowered ops whose lowering covers only some dtypes.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_tpu::aten {

// Runs op's CPU kernel on copies of its tpu arguments (counted and warned once per op, or an
// error under TORCH_TPU_FALLBACK=error); the results replace the arguments on the stack.
void CpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_tpu::aten
