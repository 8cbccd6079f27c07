// Lowerings for copies and clones: values unchanged, broadcast to a shape.
#include "lowering/context.h"

namespace torch_tpu::lowering {
namespace {

using stablehlo::Value;

// (source, sizes): the copy_/clone/materialize building block.
std::vector<Value> BroadcastTo(LoweringContext& context, std::span<const Operand> operands) {
  return {context.BroadcastTo(operands[0].value, context.IntList(operands[1]))};
}

// clone(Tensor self, *, MemoryFormat? memory_format=None)
std::vector<Value> Clone(LoweringContext& context, std::span<const Operand> operands) {
  return {operands[0].value};
}

}  // namespace

TORCH_TPU_REGISTER_LOWERINGS(copy) {
  registry.Register("torch_tpu::broadcast_to", BroadcastTo);
  registry.Register("aten::clone", Clone);
}

}  // namespace torch_tpu::lowering
