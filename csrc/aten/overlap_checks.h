// Writes that overlap their own inputs raise PyTorch's "unsupported operation" errors, as on CPU.
//
// Our kernels compute every result from the inputs' old values before writing, so an
// overlapping write would quietly produce a different answer from CPU/CUDA, whose kernels raise
// instead of reading elements they have already overwritten. The checks use ATen's own
// MemoryOverlap rules (sizes, strides and storage identity only: no device work).
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <vector>

namespace torch_tpu::aten {

// For one call of an in-place or out= op (`arguments` are its boxed arguments): every argument the
// schema marks as written must not overlap itself (an expanded tensor) nor partially overlap any
// input; ops whose CPU kernels forbid any overlap (cat, gather, index_select, scatter, index_add,
// index_put, take, ...) also reject full overlap; ops whose CPU kernels do not check stay
// unchecked, so nothing CPU accepts is rejected. Call before any write.
void CheckWriteOverlap(const c10::FunctionSchema& schema,
                       const std::vector<c10::IValue>& arguments);

}  // namespace torch_tpu::aten
