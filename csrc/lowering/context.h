// What a lowering works with: the function builder plus PyTorch-flavoured helpers (dtype
// conversion with PyTorch's rules, NumPy-style broadcasting, typed constants).
#pragma once

#include <c10/core/ScalarType.h>

#include <span>
#include <string>
#include <vector>

#include "lowering/dtype.h"
#include "lowering/registry.h"
#include "stablehlo/builder.h"

namespace torch_tpu::lowering {

// The StableHLO vocabulary every lowering file speaks.
using stablehlo::ElementType;
using stablehlo::FunctionBuilder;
using stablehlo::TensorType;
using stablehlo::Value;
using Direction = FunctionBuilder::ComparisonDirection;

// A constant with `like`'s element type and shape.
inline Value FullLike(FunctionBuilder& b, double value, const Value& like) {
  return b.Constant(like.element_type(), value, like.dims());
}

class LoweringContext {
 public:
  LoweringContext(stablehlo::FunctionBuilder& builder, std::string op_name)
      : builder_(builder), op_name_(std::move(op_name)) {}

  stablehlo::FunctionBuilder& builder() { return builder_; }
  const std::string& op_name() const { return op_name_; }

  // torch dtype of a value (from its element type).
  static c10::ScalarType DtypeOf(const stablehlo::Value& value) {
    return ToScalarType(value.element_type());
  }
  // Converts to `dtype` with PyTorch semantics (to bool: != 0; float -> int truncates).
  stablehlo::Value Convert(stablehlo::Value value, c10::ScalarType dtype);
  // Broadcasts to `dims` with NumPy/PyTorch rules (align trailing dimensions, size-1 stretches).
  stablehlo::Value BroadcastTo(stablehlo::Value value, const std::vector<int64_t>& dims);
  // Splat constant of `dtype` shaped `dims`.
  stablehlo::Value Constant(double value, c10::ScalarType dtype,
                            const std::vector<int64_t>& dims = {});
  stablehlo::Value ConstantInt(int64_t value, c10::ScalarType dtype,
                               const std::vector<int64_t>& dims = {});

  // PyTorch's broadcast shape of several shapes; throws naming the op on mismatch.
  std::vector<int64_t> BroadcastShape(std::span<const std::vector<int64_t>> shapes) const;
  // Type promotion over tensor/scalar operands (None and statics are skipped).
  c10::ScalarType PromotedType(std::span<const Operand> operands) const;
  // Converts each value operand to `dtype` and broadcasts all to their common shape.
  std::vector<stablehlo::Value> PromoteAndBroadcast(std::span<const Operand> operands,
                                                    c10::ScalarType dtype);

  // Static argument accessors with op-named errors.
  int64_t Int(const Operand& operand) const;
  double Double(const Operand& operand) const;
  bool Bool(const Operand& operand) const;
  std::vector<int64_t> IntList(const Operand& operand) const;
  std::optional<c10::ScalarType> OptionalDtype(const Operand& operand) const;
  // Device random states (tensor<2xui64>: seed, offset) passed to this program, in the order the
  // op's generators were added; random lowerings draw bits from them.
  void set_rng_states(std::vector<stablehlo::Value> states) { rng_states_ = std::move(states); }
  stablehlo::Value rng_state(size_t index) const;

  // Index-taking lowerings declare the indices they consume: `indices` (any integer shape) must
  // lie in [-bound, bound) when negative indices wrap, else in [0, bound). The executor turns the
  // declarations into one device-side flag per program: debug mode raises IndexError at the op,
  // strict mode folds it into the device error word read at the next synchronization.
  void CheckIndicesInRange(stablehlo::Value indices, int64_t bound, bool negative_wraps);
  // A 0-d pred that is true when a condition the op requires is violated (integer division by
  // zero, say); `what` explains it in the error.
  void CheckNotViolated(stablehlo::Value violated, std::string what);
  struct DeviceCheck {
    stablehlo::Value violated;  // 0-d pred
    std::string what;
  };
  const std::vector<DeviceCheck>& device_checks() const { return device_checks_; }

  // Wraps a possibly negative dimension index for a tensor of `rank`.
  int64_t WrapDim(int64_t dim, int64_t rank) const;
  // A dim the op indexes sizes with: a 0-d tensor has none (IndexError, as on CPU), where WrapDim
  // lets 0 and -1 name a 0-d tensor's "dimension" like PyTorch's reductions do.
  int64_t WrapExistingDim(int64_t dim, int64_t rank) const;

 private:
  stablehlo::FunctionBuilder& builder_;
  std::string op_name_;
  std::vector<stablehlo::Value> rng_states_;
  std::vector<DeviceCheck> device_checks_;
};

inline Value FullLike(LoweringContext& context, double value, const Value& like) {
  return FullLike(context.builder(), value, like);
}

}  // namespace torch_tpu::lowering
