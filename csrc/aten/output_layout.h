// The strides PyTorch gives an op's results, taken from the op's meta kernel: elementwise results
// follow their inputs' layout (`x.t() + 1` is column-major, a channels_last input gives a
// channels_last output), as TensorIterator decides on CPU and CUDA.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <vector>

namespace torch_tpu::aten {

// One strides list per tensor result; empty when the op has no meta kernel (or it fails), in
// which case results are contiguous.
std::vector<std::vector<int64_t>> MetaOutputStrides(const c10::OperatorHandle& op,
                                                    const std::vector<c10::IValue>& arguments);

}  // namespace torch_tpu::aten
