// Debug mode (TORCH_TPU_LAUNCH_BLOCKING=1): index-taking ops (indexing, gather/scatter families,
// index_* ops, take/put, embedding and its backward, nll_loss targets with ignore_index skipped)
// check their indices on the device before running and raise IndexError naming the op, the
// offending index and the bound; integer division by zero raises CPU's "ZeroDivisionError".
// Strict mode never calls this, so it pays nothing. `op` is the schema name, overload optional.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace torch_tpu::aten {

void CheckIndicesInDebugMode(const std::string& op, const std::vector<c10::IValue>& arguments);

}  // namespace torch_tpu::aten
