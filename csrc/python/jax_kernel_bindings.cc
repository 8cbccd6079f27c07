#include "python/jax_kernel_bindings.h"

#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "lowering/jax_kernel_registry.h"
#include "stablehlo/element_type.h"
#include "stablehlo/module.h"

namespace torch_tpu::python {
namespace {

namespace py = pybind11;
using stablehlo::ElementType;
using TypeSpec = std::pair<std::string, std::vector<int64_t>>;

// ("f32", [2, 3]) -> tensor<2x3xf32>; element types use MLIR's spelling, as JAX's module does.
stablehlo::TensorType ToTensorType(const TypeSpec& spec) {
  for (int i = 0; i < stablehlo::kElementTypeCount; ++i) {
    const auto type = static_cast<ElementType>(i);
    if (stablehlo::MlirName(type) == spec.first) return {type, spec.second};
  }
  throw py::value_error("jax_op: element type " + spec.first + " is not supported on tpu");
}

std::vector<stablehlo::TensorType> ToTensorTypes(const std::vector<TypeSpec>& specs) {
  std::vector<stablehlo::TensorType> types;
  for (const TypeSpec& spec : specs) types.push_back(ToTensorType(spec));
  return types;
}

}  // namespace

void BindJaxKernels(py::module& module) {
  module.def(
      "_register_jax_kernel",
      [](const std::string& key, const std::string& entry, const std::string& text,
         const std::vector<TypeSpec>& arguments, const std::vector<TypeSpec>& results) {
        auto kernel = std::make_shared<stablehlo::LinkedFunction>();
        kernel->entry = entry;
        kernel->text = text;
        kernel->argument_types = ToTensorTypes(arguments);
        kernel->result_types = ToTensorTypes(results);
        lowering::JaxKernelRegistry::Get().Register(key, std::move(kernel));
      },
      py::arg("key"), py::arg("entry"), py::arg("text"), py::arg("arguments"), py::arg("results"));
  // A module whose @main only calls the kernel: what ahead-of-time compilation of one kernel
  // for a TPU target compiles (torch_tpu.pallas.lower).
  module.def("_jax_kernel_module", [](const std::string& key) {
    const auto kernel = lowering::JaxKernelRegistry::Get().Find(key);
    if (kernel == nullptr) throw py::key_error("jax_op: no traced kernel " + key);
    stablehlo::Module program("jax_kernel");
    stablehlo::FunctionBuilder& main = program.main();
    std::vector<stablehlo::Value> arguments;
    for (const auto& type : kernel->argument_types) arguments.push_back(main.Argument(type));
    main.Return(main.Call(kernel, arguments));
    return program.ToText();
  });
  module.def("_has_jax_kernel", [](const std::string& key) {
    return lowering::JaxKernelRegistry::Get().Find(key) != nullptr;
  });
}

}  // namespace torch_tpu::python
