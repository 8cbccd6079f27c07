// Row gathers shared by lowerings that index a [rows, columns] matrix.
#pragma once

#include "lowering/context.h"

namespace torch_tpu::lowering {

// out[i..., :] = matrix[rows[i...], :] for an s32/s64 index tensor `rows` of any shape.
inline Value GatherRows(FunctionBuilder& b, Value matrix, Value rows) {
  FunctionBuilder::GatherDimensions dimensions;
  dimensions.offset_dims = {rows.rank()};
  dimensions.collapsed_slice_dims = {0};
  dimensions.start_index_map = {0};
  dimensions.index_vector_dim = rows.rank();
  return b.Gather(matrix, rows, dimensions, {1, matrix.dims()[1]});
}

}  // namespace torch_tpu::lowering
