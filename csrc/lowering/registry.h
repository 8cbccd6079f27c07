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
#include <initializer_list>
#include <memory>
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
  std::vector<c10::ScalarType> dtypes;                 // per element of `values` for kTensorList
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

  // Conflicts found while lowerings registered (a name registered twice, two variants of one
  // kind); the eager kernels refuse to register while there are any.
  const std::vector<std::string>& errors() const { return errors_; }
  void RecordError(std::string error) { errors_.push_back(std::move(error)); }

 private:
  std::unordered_map<std::string, std::unique_ptr<LoweringFunction>> functions_;
  std::unordered_map<std::string, LoweringEntry> entries_;
  std::vector<std::string> errors_;
};

// Registers one lowering during static initialization; TORCH_TPU_LOWERING places it right after
// the function it names. Names are full overload names; the first is the functional overload the
// lowering implements, any further ones are variants that reuse it: in-place when the operator
// name ends in '_' (aten::mul_.Tensor), out= otherwise (aten::mul.out, aten::max.dim_max).
// aten::register_lowered_kernels checks each name and variant kind against the dispatcher.
class LoweringRegistrar {
 public:
  enum class Randomness { kNone, kImplicit };
  LoweringRegistrar(LoweringFunction function, std::initializer_list<std::string_view> names,
                    Randomness randomness = Randomness::kNone);
};

#define TORCH_TPU_LOWERING_CONCAT_INNER_(a, b) a##b
#define TORCH_TPU_LOWERING_CONCAT_(a, b) TORCH_TPU_LOWERING_CONCAT_INNER_(a, b)

//   TORCH_TPU_LOWERING(Multiply, "aten::mul.Tensor", "aten::mul_.Tensor", "aten::mul.out");
// A template instance with several arguments goes in parentheses: (Class<true, false>).
#define TORCH_TPU_LOWERING(function, ...)                                \
  [[maybe_unused]] static const ::torch_tpu::lowering::LoweringRegistrar \
  TORCH_TPU_LOWERING_CONCAT_(lowering_registrar_, __COUNTER__)(function, {__VA_ARGS__})

// For ops that draw random bits without a Generator argument (native_dropout): the executor
// passes the default generator's state.
#define TORCH_TPU_IMPLICIT_RANDOM_LOWERING(function, ...)                \
  [[maybe_unused]] static const ::torch_tpu::lowering::LoweringRegistrar \
  TORCH_TPU_LOWERING_CONCAT_(lowering_registrar_, __COUNTER__)(          \
      function, {__VA_ARGS__}, ::torch_tpu::lowering::LoweringRegistrar::Randomness::kImplicit)

}  // namespace torch_tpu::lowering
