// Reading and writing strided views of a flat storage buffer inside a StableHLO program.
//
// A tpu storage holds one immutable 1-D PJRT buffer; tensors are (sizes, strides, offset) views
// of it. Reads turn a view into a dense value; writes produce the storage's next flat buffer with
// the view's elements replaced. Both prefer slice/reshape/transpose (a "box": strides that nest,
// as in narrowing, slicing with steps, transposes, diagonals) and fall back to gather/scatter on
// computed linear indices for layouts that do not nest.
#pragma once

#include <cstdint>
#include <vector>

#include "stablehlo/builder.h"

namespace torch_tpu::exec {

struct StridedView {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // in elements of the view's element type
  int64_t offset = 0;
};

// Reinterprets a flat storage value as `type` (bitcast for equal widths, elementwise 0/1
// conversion for pred, regrouping bytes for different widths).
stablehlo::Value ReinterpretFlat(stablehlo::FunctionBuilder& builder, stablehlo::Value flat,
                                 stablehlo::ElementType type);

// Whether the view reads exactly every element of a flat buffer of `length` in order.
bool CoversWholeStorage(const StridedView& view, int64_t length);

stablehlo::Value ReadView(stablehlo::FunctionBuilder& builder, stablehlo::Value flat,
                          const StridedView& view);

// `values` has the view's sizes and the flat buffer's element type. Returns the new flat buffer.
stablehlo::Value WriteView(stablehlo::FunctionBuilder& builder, stablehlo::Value flat,
                           const StridedView& view, stablehlo::Value values);

}  // namespace torch_tpu::exec
