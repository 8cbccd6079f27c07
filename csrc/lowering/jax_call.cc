// tpu_kernels::jax_call(str kernel, Tensor[] inputs) -> Tensor[]: a traced JAX kernel called from
// a program. The kernel's functions are linked into the program's module and called with
// func.call, so the same lowering serves eager, DeferAndFuse and torch.compile programs.
#include <c10/util/Exception.h>

#include "lowering/context.h"
#include "lowering/jax_kernel_registry.h"

namespace torch_tpu::lowering {
namespace {

std::vector<stablehlo::Value> JaxCall(LoweringContext& context, std::span<const Operand> operands) {
  const std::string& key = operands[0].ivalue.toStringRef();
  const auto kernel = JaxKernelRegistry::Get().Find(key);
  // Keys are registered by torch_tpu.pallas when it traces; a key from another process (a
  // pickled graph) has nothing behind it until the kernel is traced again here.
  TORCH_CHECK(kernel != nullptr, "tpu_kernels::jax_call: kernel ", key,
              " was not traced in this process (call its jax_op first)");
  std::vector<stablehlo::Value> inputs = operands[1].values;
  TORCH_CHECK_VALUE(inputs.size() == kernel->argument_types.size(), "tpu_kernels::jax_call: ", key,
                    " takes ", kernel->argument_types.size(), " inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK_VALUE(inputs[i].type() == kernel->argument_types[i], "tpu_kernels::jax_call: ", key,
                      " input ", i, " must be ", kernel->argument_types[i].ToString(), ", got ",
                      inputs[i].type().ToString());
  }
  return context.builder().Call(kernel, inputs);
}
TORCH_TPU_LOWERING(JaxCall, "tpu_kernels::jax_call");

}  // namespace
}  // namespace torch_tpu::lowering
