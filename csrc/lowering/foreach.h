// torch._foreach_* ops (what torch.optim's default foreach steps and clip_grad_norm_ call): one
// program applies the element op's lowering to every element of the lists, instead of one
// program and one launch per tensor.
#pragma once

#include <string>
#include <string_view>

namespace torch_tpu::lowering {

// How a foreach overload maps onto its element op. `arguments` has one letter per argument of
// the element op, in its order; upper case ones consume the foreach op's arguments in order:
//   T  Tensor[]  element i of the list
//   L  Scalar[]  element i; in eager launches a Scalar[] arrives as one runtime scalar per
//                element, so a new learning rate or bias correction never recompiles
//   S  Scalar    the same runtime scalar for every element
//   X  Tensor    the same tensor for every element (a 0-d scaling factor)
//   C  static    the same static argument for every element (a dtype)
// lower case ones are element arguments the foreach op does not have: n None, f false.
struct ForeachForm {
  std::string element;           // functional element overload: "aten::add.Tensor"
  std::string element_in_place;  // its in-place overload ("aten::add_.Tensor"); "" when none
  std::string arguments;
};

// The form of a foreach overload (functional or in-place name); nullptr for other ops.
const ForeachForm* FindForeachForm(std::string_view overload_name);

}  // namespace torch_tpu::lowering
