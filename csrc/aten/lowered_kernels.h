// Registers the eager kernel of every lowered ATen op for the tpu (PrivateUse1) dispatch key.
#pragma once

namespace torch_tpu::aten {

// Idempotent; called when torch_tpu._C is imported, after all lowerings have registered.
void RegisterLoweredKernels();

}  // namespace torch_tpu::aten
