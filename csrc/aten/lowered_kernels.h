// Registers the eager kernel of every lowered ATen op for the tpu (PrivateUse1) dispatch key.
#pragma once

#include <string>
#include <vector>

namespace torch_tpu::aten {

// Idempotent; called when torch_tpu._C is imported, after all lowerings have registered.
// Throws, listing them, when a registered name is not an operator of this torch or is not of
// the variant kind (functional, in-place, out=) it was registered as.
void RegisterLoweredKernels();

// The ATen overload names that have a lowering (functional, in-place and out= variants), sorted.
std::vector<std::string> LoweredOverloadNames();

// Those whose eager kernel is unboxed (their tensors reach the lowering borrowed, never copied),
// sorted; the others are served by the boxed kernel. Empty before RegisterLoweredKernels.
std::vector<std::string> UnboxedLoweredOverloadNames();

}  // namespace torch_tpu::aten
