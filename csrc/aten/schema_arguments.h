// How an ATen schema's arguments are sorted into lowering operand kinds. Shared by the eager
// kernel of lowered ops (aten/lowered_kernels.cc) and compiled graphs (exec/graph_program.cc), so
// both hand a lowering the same operands for the same call.
#pragma once

#include <ATen/core/function_schema.h>

#include <string>

namespace torch_tpu::aten {

// "aten::add.Tensor"; "aten::mm" for the default overload.
inline std::string FullName(const c10::FunctionSchema& schema) {
  const auto& name = schema.operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

// Scalar / Scalar?: a runtime argument, so new values never recompile.
inline bool IsScalarType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::NumberType) return true;
  if (auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::NumberType;
  }
  return false;
}

// Scalar[] (foreach ops' per-tensor scalars): one runtime argument per element.
inline bool IsScalarListType(const c10::TypePtr& type) {
  auto list = type->cast<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::NumberType;
}

inline bool IsGeneratorType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

inline bool IsOutArgument(const c10::Argument& argument) {
  return argument.kwarg_only() && argument.alias_info() && argument.alias_info()->isWrite();
}

}  // namespace torch_tpu::aten
