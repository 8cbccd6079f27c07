// Eager execution of one op: collect operands, find (or build and compile) the program for this
// exact signature, run it asynchronously, and wrap or write back its results.
//
// The program reads every operand through its view of its storage, applies the op's lowering and
// writes results either to fresh storages (out-of-place results) or into existing tensor views
// (in-place ops, out=, copy_). Runtime scalars are program arguments, so changing them never
// recompiles; only shapes, dtypes, layouts and static arguments are part of the signature.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>
#include <vector>

#include "lowering/registry.h"

namespace torch_tpu::exec {

enum class ExecutionMode { kStrict, kDebug };
ExecutionMode CurrentExecutionMode();

class EagerLaunch {
 public:
  explicit EagerLaunch(std::string op_name);

  // A tpu tensor, or a zero-dim CPU tensor (passed as a runtime scalar argument).
  void AddTensor(const at::Tensor& tensor);
  void AddScalar(const c10::Scalar& scalar);
  void AddTensorList(const std::vector<at::Tensor>& tensors);
  // Tensor?[] (indices of index/index_put): None entries become invalid values in the operand.
  void AddOptionalTensorList(const std::vector<std::optional<at::Tensor>>& tensors);
  // Part of the compiled program (ints, lists, bools, dtypes, None, ...).
  void AddStatic(const c10::IValue& value);
  // Device random state (seed, offset) as a runtime u64[2] argument.
  void AddRngState(uint64_t seed, uint64_t offset);

  // Result `index` is converted to the destination's dtype and written into its view instead of
  // becoming a new tensor. The result's shape must equal the destination's.
  // With `check_cast`, a result dtype that PyTorch would not cast into the destination's
  // (float into an integer tensor in add_, say) is an error, as for in-place ops; copies pass
  // false.
  void WriteResultTo(size_t index, const at::Tensor& destination, bool check_cast = true);

  // Runs `function` (the op's lowering). Returns one tensor per result: the new tensor, or the
  // destination it was written to.
  std::vector<at::Tensor> Run(const lowering::LoweringFunction& function);

 private:
  std::string op_name_;
  std::vector<c10::IValue> operands_;  // tensors, scalars, lists, statics, in order
  std::vector<int> operand_kinds_;
  std::vector<std::pair<size_t, at::Tensor>> destinations_;
  bool check_cast_ = true;
  std::vector<std::pair<uint64_t, uint64_t>> rng_states_;
};

// Blocks until all launched device work is done; throws the first device error, if any.
void SynchronizeAll();
// Whether all device work launched so far has finished (never blocks).
bool AllWorkDone();

}  // namespace torch_tpu::exec
