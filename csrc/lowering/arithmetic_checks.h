// CPU's argument checks of add, sub and rsub (defined in elementwise.cc), shared by their
// lowerings so the messages stay one.
#pragma once

#include <span>

#include "lowering/context.h"

namespace torch_tpu::lowering {

// Bool tensors (a Python bool too) have no subtraction.
void CheckSubtractionOperands(LoweringContext& context, const Operand& self, const Operand& other);

// alpha (operands[2], when given) of an op computing in `dtype`: bool only for bool results, and
// no floating alpha for integral results.
void CheckAlpha(LoweringContext& context, std::span<const Operand> operands,
                c10::ScalarType dtype);

}  // namespace torch_tpu::lowering
