#include "lowering/jax_kernel_registry.h"

#include <c10/util/Exception.h>

namespace torch_tpu::lowering {

JaxKernelRegistry& JaxKernelRegistry::Get() {
  static JaxKernelRegistry registry;
  return registry;
}

void JaxKernelRegistry::Register(const std::string& key,
                                 std::shared_ptr<const stablehlo::LinkedFunction> kernel) {
  TORCH_CHECK(kernel != nullptr, "jax_op: no kernel given for ", key);
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, inserted] = kernels_.emplace(key, kernel);
  TORCH_CHECK(inserted || (it->second->text == kernel->text && it->second->entry == kernel->entry),
              "jax_op: kernel key ", key, " is already registered with a different module");
}

std::shared_ptr<const stablehlo::LinkedFunction> JaxKernelRegistry::Find(
    const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = kernels_.find(key);
  return it == kernels_.end() ? nullptr : it->second;
}

}  // namespace torch_tpu::lowering
