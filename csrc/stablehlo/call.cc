// func.call of functions linked into the module from outside the builder (traced JAX kernels).
#include "builder.h"
#include "builder_internal.h"

namespace torch_tpu::stablehlo {

using internal::Fail;
using internal::TypeList;

std::vector<Value> FunctionBuilder::Call(const std::shared_ptr<const LinkedFunction>& callee,
                                         const std::vector<Value>& operands) {
  constexpr std::string_view kOp = "func.call";
  CheckOpen(kOp);
  if (callee == nullptr) Fail(kOp, "no function to call");
  // Regions are isolated from the module's symbol table in our builder, and a linked function's
  // text is attached to the top-level function: calls from a region could not link it.
  if (kind_ != Kind::kFunction) Fail(kOp, "calls are only supported in top-level functions");
  if (callee->result_types.empty()) Fail(kOp, "@" + callee->entry + " returns nothing");
  std::vector<TensorType> operand_types;
  for (const Value& operand : operands) operand_types.push_back(Check(operand, kOp).type);
  if (operand_types != callee->argument_types) {
    Fail(kOp, "@" + callee->entry + " takes (" + TypeList(callee->argument_types) + "), got (" +
                  TypeList(operand_types) + ")");
  }
  bool known = false;
  for (const auto& linked : linked_functions_) {
    if (linked->entry != callee->entry) continue;
    // One symbol, two bodies would make the module ambiguous; symbols encode the text's hash.
    if (linked->text != callee->text) Fail(kOp, "@" + callee->entry + " linked with two bodies");
    known = true;
  }
  if (!known) linked_functions_.push_back(callee);
  return Emit(kOp, operands, "callee = @" + callee->entry, callee->result_types);
}

}  // namespace torch_tpu::stablehlo
