// The one registry of lowerings: ATen op -> StableHLO. Eager execution (strict/debug),
// DeferAndFuse and torch.compile all build their programs from these functions.
//
// A lowering is functional: it receives its operands as StableHLO values (tensors read through
// their views, runtime scalars) or static attributes, and returns result values. In-place and out=
// variants reuse the functional lowering; writing results back is the executor's job.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "stablehlo/builder.h"

namespace torch_tpu::lowering {

struct Operand {
  enum class Kind {
    kTensor,      // a device tensor (or a zero-dim host tensor), value has its shape
    kScalar,      // a runtime scalar (Python number, alpha, lr...): a 0-d value
    kTensorList,  // Tensor[] arguments (cat, stack, foreach ops)
    kStatic,      // anything that is part of the compiled program: ints, lists, bools, dtypes, None
  };
  Kind kind = Kind::kStatic;
  stablehlo::Value value;
  std::vector<stablehlo::Value> values;
  std::vector<c10::ScalarType> dtypes;  // per element of `values` for kTensorList
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // torch dtype of `value`
  bool wrapped_number = false;  // a Python number that arrived as a zero-dim tensor
  c10::IValue ivalue;           // kStatic

  bool is_none() const { return kind == Kind::kStatic && ivalue.isNone(); }
  bool is_value() const { return kind == Kind::kTensor || kind == Kind::kScalar; }
};

class LoweringContext;
using LoweringFunction =
    std::function<std::vector<stablehlo::Value>(LoweringContext&, std::span<const Operand>)>;

// How an ATen overload maps onto a functional lowering.
struct LoweringEntry {
  enum class Variant { kFunctional, kInPlace, kOut };
  std::string functional_name;  // "aten::add.Tensor"
  Variant variant = Variant::kFunctional;
  const LoweringFunction* function = nullptr;
  // Draws random bits without taking a Generator argument (native_dropout): the executor passes
  // the default generator's state.
  bool implicit_random = false;
};

class LoweringRegistry {
 public:
  static LoweringRegistry& Get();

  // `functional` is a full overload name ("aten::add.Tensor"); `in_place` and `out` name the
  // variants that reuse it ("aten::add_.Tensor", "aten::add.out"), empty when there is none.
  void Register(const std::string& functional, LoweringFunction function,
                const std::string& in_place = "", const std::string& out = "");

  // Marks a registered op (all its variants) as drawing from the default generator.
  void MarkImplicitRandom(const std::string& functional);

  // Entry for any registered overload name (functional or variant); nullptr when not lowered.
  const LoweringEntry* Find(std::string_view overload_name) const;
  // The lowering registered under `overload_name`; throws when there is none.
  const LoweringFunction& Function(std::string_view overload_name) const;
  // All registered overload names, variants included (used to register eager kernels).
  std::vector<std::string> OverloadNames() const;

 private:
  std::unordered_map<std::string, std::unique_ptr<LoweringFunction>> functions_;
  std::unordered_map<std::string, LoweringEntry> entries_;
};

// Static registration of a file's lowerings:
//   TORCH_TPU_REGISTER_LOWERINGS(elementwise) {
//     registry.Register("aten::add.Tensor", LowerAdd, "aten::add_.Tensor", "aten::add.out");
//   }
#define TORCH_TPU_REGISTER_LOWERINGS(group)                                             \
  static void RegisterLowerings_##group(::torch_tpu::lowering::LoweringRegistry&);      \
  [[maybe_unused]] static const bool lowerings_registered_##group =                     \
      (RegisterLowerings_##group(::torch_tpu::lowering::LoweringRegistry::Get()), true); \
  static void RegisterLowerings_##group(::torch_tpu::lowering::LoweringRegistry& registry)

}  // namespace torch_tpu::lowering
