// The explicit CPU fallback (fallback.cc), shared by the dense and nested tpu dispatch keys.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>

namespace torch_tpu::aten {

// Runs `op`'s CPU kernel on CPU copies of its tpu arguments and copies the results back; warns
// once per op, counts it in the metrics, and raises instead under TORCH_TPU_FALLBACK=error.
void CpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The bookkeeping of a fallback run of `op` (the TORCH_TPU_FALLBACK=error check, the pending
// deferred graph run, the count and the once-per-op warning); returns the op's full name.
std::string RecordFallback(const c10::OperatorHandle& op);

}  // namespace torch_tpu::aten
