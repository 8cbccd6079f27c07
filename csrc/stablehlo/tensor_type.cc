#include "tensor_type.h"

namespace torch_tpu::stablehlo {

int64_t TensorType::NumElements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string TensorType::ToString() const {
  std::string out = "tensor<";
  for (int64_t d : dims) {
    out += std::to_string(d);
    out += 'x';
  }
  out += MlirName(element_type);
  out += '>';
  return out;
}

std::string DimsToString(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(dims[i]);
  }
  out += ']';
  return out;
}

}  // namespace torch_tpu::stablehlo
