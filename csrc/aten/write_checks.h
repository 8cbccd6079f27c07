// Checks for the tensors an op writes (in-place self, out= arguments), made before any write, so
// that a bad call raises what PyTorch raises on CPU/CUDA instead of quietly computing something.
//
// Overlap: our kernels compute every result from the inputs' old values before writing, so an
// overlapping write would quietly produce a different answer from CPU/CUDA, whose kernels raise
// ("unsupported operation: ...") instead of reading elements they have already overwritten. The
// checks use ATen's own MemoryOverlap rules (sizes, strides and storage identity only).
//
// Devices: as on CUDA, a tpu op never writes into a CPU tensor, and an op that writes a tpu tensor
// takes no CPU tensor inputs other than 0-dim scalars (and index lists, which move to the device).
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <vector>

namespace torch_tpu::aten {

// For one call of an op (`arguments` are its boxed arguments; a no-op unless the schema marks an
// argument as written): every written argument must be a tpu tensor and must not overlap itself
// (an expanded tensor) nor partially overlap any input; ops whose CPU kernels forbid any overlap
// (cat, gather, index_select, scatter, index_add, index_put, take, ...) also reject full
// overlap; ops whose CPU kernels do not check stay unchecked, so nothing CPU accepts is rejected.
void CheckWrites(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& arguments);

}  // namespace torch_tpu::aten
