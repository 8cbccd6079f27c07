// Traced JAX kernels (torch.tpu.pallas.jax_op), by key. Python traces a kernel once per input
// signature, links its StableHLO functions under symbols unique to that trace, and registers them
// here; the tpu_kernels::jax_call lowering then calls the kernel from any program (eager, fused,
// compiled) by key. Keys embed a hash of the kernel's text, so one key never names two kernels.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "stablehlo/builder.h"

namespace torch_tpu::lowering {

class JaxKernelRegistry {
 public:
  static JaxKernelRegistry& Get();

  // Registering a key again with the same function is a no-op; with another one it throws.
  void Register(const std::string& key, std::shared_ptr<const stablehlo::LinkedFunction> kernel);
  // nullptr when `key` was never registered in this process.
  std::shared_ptr<const stablehlo::LinkedFunction> Find(const std::string& key) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const stablehlo::LinkedFunction>> kernels_;
};

}  // namespace torch_tpu::lowering
