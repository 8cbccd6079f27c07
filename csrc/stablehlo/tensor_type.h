// Statically shaped ranked tensor types, printed in MLIR syntax.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "element_type.h"

namespace torch_tpu::stablehlo {

struct TensorType {
  ElementType element_type = ElementType::kF32;
  // Static sizes only; the builder rejects negative entries so "dynamic" can never leak in.
  std::vector<int64_t> dims;

  int64_t NumElements() const;
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  bool IsScalar() const { return dims.empty(); }
  // "tensor<2x3xf32>"; rank 0 prints as "tensor<f32>".
  std::string ToString() const;

  bool operator==(const TensorType& other) const = default;
};

// Convenience for dimension lists in error messages: "[2, 3]".
std::string DimsToString(const std::vector<int64_t>& dims);

}  // namespace torch_tpu::stablehlo
