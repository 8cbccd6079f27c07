#include "lowering/matmul_precision.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <vector>

namespace torch_tpu::lowering {
namespace {

std::vector<MatmulPrecision>& Overrides() {
  thread_local std::vector<MatmulPrecision> overrides;
  return overrides;
}

}  // namespace

MatmulPrecision CurrentMatmulPrecision() {
  const std::vector<MatmulPrecision>& overrides = Overrides();
  if (!overrides.empty()) return overrides.back();
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGHEST:
      return MatmulPrecision::kHighest;
    case at::Float32MatmulPrecision::HIGH:
      return MatmulPrecision::kHigh;
    case at::Float32MatmulPrecision::MEDIUM:
      return MatmulPrecision::kDefault;
  }
  return MatmulPrecision::kHighest;
}

void PushMatmulPrecision(MatmulPrecision precision) { Overrides().push_back(precision); }

void PopMatmulPrecision() {
  std::vector<MatmulPrecision>& overrides = Overrides();
  TORCH_CHECK(!overrides.empty(), "torch.tpu.precision: no precision to restore on this thread");
  overrides.pop_back();
}

MatmulPrecision MatmulPrecisionFor(c10::ScalarType dtype) {
  if (dtype == c10::kFloat || dtype == c10::kComplexFloat) return CurrentMatmulPrecision();
  return MatmulPrecision::kHighest;
}

const char* MatmulPrecisionName(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::kDefault:
      return "default";
    case MatmulPrecision::kHigh:
      return "high";
    case MatmulPrecision::kHighest:
      return "highest";
  }
  return "?";
}

}  // namespace torch_tpu::lowering
