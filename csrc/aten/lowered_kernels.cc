// One boxed kernel serves every lowered ATen op in eager mode: it reads the op's schema to sort
// arguments into tensors, runtime scalars, generators and static attributes, runs the op's
// lowering through exec::EagerLaunch, and writes results back for in-place and out= variants.
#include "aten/lowered_kernels.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/index_arguments.h"
#include "aten/index_checks.h"
#include "aten/output_layout.h"
#include "aten/write_checks.h"
#include "exec/eager.h"
#include "lowering/registry.h"
#include "runtime/generator.h"

namespace torch_tpu::aten {
namespace {

using lowering::LoweringEntry;

std::string FullName(const c10::FunctionSchema& schema) {
  const auto& name = schema.operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

bool IsScalarType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::NumberType) return true;
  if (auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::NumberType;
  }
  return false;
}

bool IsGeneratorType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

bool IsOutArgument(const c10::Argument& argument) {
  return argument.kwarg_only() && argument.alias_info() && argument.alias_info()->isWrite();
}

void LoweredKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name = FullName(schema);
  const LoweringEntry* entry = lowering::LoweringRegistry::Get().Find(name);
  TORCH_INTERNAL_ASSERT(entry != nullptr, "no lowering for ", name);

  const auto& arguments = schema.arguments();
  std::vector<c10::IValue> values(stack->end() - arguments.size(), stack->end());
  torch::jit::drop(*stack, arguments.size());
  PrepareIndexArguments(schema, values);
  CheckWrites(schema, values);

  if (exec::CurrentExecutionMode() == exec::ExecutionMode::kDebug) {
    CheckIndicesInDebugMode(entry->functional_name, values);
  }
  exec::EagerLaunch launch(entry->functional_name);
  std::vector<at::Tensor> outs;
  if (entry->implicit_random) {
    const auto [seed, offset] = runtime::ResolveGenerator(std::nullopt)->Reserve();
    launch.AddRngState(seed, offset);
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::Argument& argument = arguments[i];
    const c10::IValue& value = values[i];
    if (entry->variant == LoweringEntry::Variant::kOut && IsOutArgument(argument)) {
      outs.push_back(value.toTensor());
    } else if (IsGeneratorType(argument.type())) {
      std::optional<at::Generator> generator;
      if (value.isGenerator()) generator = value.toGenerator();
      runtime::TpuGenerator* tpu_generator = runtime::ResolveGenerator(generator);
      const auto [seed, offset] = tpu_generator->Reserve();
      launch.AddRngState(seed, offset);
    } else if (value.isTensor() && !value.toTensor().defined()) {
      launch.AddStatic(c10::IValue());  // an absent Tensor? argument
    } else if (value.isTensor()) {
      launch.AddTensor(value.toTensor());
    } else if (value.isTensorList()) {
      launch.AddTensorList(value.toTensorVector());
    } else if (value.isOptionalTensorList()) {
      launch.AddOptionalTensorList(value.toOptionalTensorList().vec());
    } else if (IsScalarType(argument.type()) && !value.isNone()) {
      launch.AddScalar(value.toScalar());
    } else {
      launch.AddStatic(value);
    }
  }
  if (entry->variant == LoweringEntry::Variant::kInPlace) {
    launch.WriteResultTo(0, values[0].toTensor());
  }
  if (entry->variant == LoweringEntry::Variant::kFunctional) {
    launch.SetOutputStrides([&op, &values] { return MetaOutputStrides(op, values); });
  }
  std::vector<at::Tensor> results = launch.Run(*entry->function);

  if (entry->variant == LoweringEntry::Variant::kOut) {
    TORCH_CHECK(outs.size() == results.size(), name, ": expected ", results.size(),
                " out= tensors, got ", outs.size());
    for (size_t k = 0; k < outs.size(); ++k) {
      TORCH_CHECK(c10::canCast(results[k].scalar_type(), outs[k].scalar_type()), name,
                  ": result type ", results[k].scalar_type(),
                  " can't be cast to the desired output type ", outs[k].scalar_type());
      at::native::resize_output(outs[k], results[k].sizes());
      outs[k].copy_(results[k]);
      torch::jit::push(*stack, outs[k]);
    }
    return;
  }
  for (auto& result : results) torch::jit::push(*stack, std::move(result));
}

}  // namespace

void RegisterLoweredKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Created here rather than statically: lowerings register during static initialization of
    // several files, whose order is unspecified; by now all of them have run.
    static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                  __FILE__, __LINE__);
    for (const std::string& name : lowering::LoweringRegistry::Get().OverloadNames()) {
      if (name.rfind("aten::", 0) != 0) continue;  // internal lowerings are not ATen ops
      const std::string op_name = name.substr(6);
      const auto dot = op_name.find('.');
      const c10::OperatorName schema_name("aten::" + op_name.substr(0, dot),
                                          dot == std::string::npos ? "" : op_name.substr(dot + 1));
      // Variant names are written by hand in the lowering files; skip any this torch lacks
      // rather than registering a kernel for an operator that does not exist.
      if (!c10::Dispatcher::singleton().findOp(schema_name).has_value()) continue;
      library.impl(op_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&LoweredKernel>());
    }
  });
}

}  // namespace torch_tpu::aten
