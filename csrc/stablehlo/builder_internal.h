// Internal helpers shared by the builder's translation units (validation and text rendering).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "builder.h"
#include "element_type.h"
#include "tensor_type.h"

namespace torch_tpu::stablehlo::internal {

// Bit set of element-type categories an op accepts.
enum Allowed : int {
  kPredOk = 1,
  kSignedOk = 2,
  kUnsignedOk = 4,
  kFloatOk = 8,
  kComplexOk = 16,
  kIntOk = kSignedOk | kUnsignedOk,
  kNumericOk = kIntOk | kFloatOk,
  kAnyOk = kPredOk | kNumericOk,
  kInexactOk = kFloatOk | kComplexOk,
};

// Throws BuilderError("<op>: <what>").
[[noreturn]] void Fail(std::string_view op, const std::string& what);
void CheckElementType(std::string_view op, const TensorType& type, int allowed);
// Rejects negative sizes.
void CheckDims(std::string_view op, const std::vector<int64_t>& dims, std::string_view what);
// Checks that `dims` are distinct and within [0, rank).
void CheckDimensionList(std::string_view op, const std::vector<int64_t>& dims, int64_t rank,
                        std::string_view what, const TensorType& type);

// "array<i64: 1, 2>" (or "array<i64>" when empty).
std::string I64Array(const std::vector<int64_t>& values);
// "t0, t1, ..." without parentheses.
std::string TypeList(const std::vector<TensorType>& types);
// A single type bare, several in parentheses, as the generic op syntax wants them.
std::string ResultTypeList(const std::vector<TensorType>& types);
std::string OperandTypes(const std::vector<Value>& values);
TensorType Scalar(ElementType type);

}  // namespace torch_tpu::stablehlo::internal
