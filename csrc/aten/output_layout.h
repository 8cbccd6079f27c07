// The strides PyTorch gives an op's results, taken from the op's meta kernel: elementwise results
// follow their inputs' layout (`x.t() + 1` is column-major, a channels_last input gives a
// channels_last output), as TensorIterator decides on CPU and CUDA.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <vector>

namespace torch_tpu::aten {

// One strides list per tensor result; empty when the op has no meta kernel (or it fails), in
// which case results are contiguous, counted with the reason in
// metrics()["contiguous_layout_fallbacks"] ("<op>: <the meta kernel's error, first line>").
std::vector<std::vector<int64_t>> MetaOutputStrides(const c10::OperatorHandle& op,
                                                    const std::vector<c10::IValue>& arguments);

// The dim order (outer to inner) of each of those results, remembered per layout signature of the
// arguments: for each tensor the relative order of its sizes and of its strides, which sizes are
// 0 or 1, which strides 0, and whether it is contiguous, channels-last or dense; other arguments
// by value. Meta kernels decide layouts from exactly these (TensorIterator's stride comparisons,
// memory-format suggestions, empty_like's dense check), so launches along a growing sequence,
// whose sizes change every call but whose signature does not, skip the meta kernel: some are
// Python (cat, where, _safe_softmax after `import torch._dynamo`) and cost a millisecond a call.
std::vector<std::vector<int64_t>> MetaOutputDimOrders(const c10::OperatorHandle& op,
                                                      const std::vector<c10::IValue>& arguments);

}  // namespace torch_tpu::aten
