// Lowerings for copies and clones: values unchanged, broadcast to a shape.
#include "lowering/context.h"

namespace torch_tpu::lowering {
namespace {

// (source, sizes): the copy_/clone/materialize building block.
std::vector<Value> BroadcastTo(LoweringContext& context, std::span<const Operand> operands) {
  return {context.BroadcastTo(operands[0].value, context.IntList(operands[1]))};
}
TORCH_TPU_LOWERING(BroadcastTo, "torch_tpu::broadcast_to");

// clone(Tensor self, *, MemoryFormat? memory_format=None)
std::vector<Value> Clone(LoweringContext& context, std::span<const Operand> operands) {
  return {operands[0].value};
}
TORCH_TPU_LOWERING(Clone, "aten::clone");

}  // namespace

}  // namespace torch_tpu::lowering
