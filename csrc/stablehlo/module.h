// A StableHLO module with a single public @main function, rendered as MLIR text for the PJRT
// "mlir" program format.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "builder.h"
#include "tensor_type.h"

namespace torch_tpu::stablehlo {

class Module {
 public:
  // `name` must be a bare MLIR identifier ([A-Za-z_][A-Za-z0-9_$.]*); anything else throws.
  explicit Module(std::string name = "torch_tpu");

  // Movable: @main lives on the heap, so Values stay valid across a move.
  Module(Module&&) noexcept = default;
  Module& operator=(Module&&) noexcept = default;

  const std::string& name() const { return name_; }
  // Replicas the program runs as (mhlo.num_replicas): 1 except for cross-replica collectives.
  void set_num_replicas(int64_t count);
  int64_t num_replicas() const { return num_replicas_; }
  FunctionBuilder& main() { return *main_; }
  const FunctionBuilder& main() const { return *main_; }

  // Full module text. Throws BuilderError until main().Return(...) has been called.
  std::string ToText() const;
  // FNV-1a of the text with the module name left out, so identical graphs built under different
  // names share a compilation-cache key. Stable across processes and platforms.
  uint64_t StructuralHash() const;

  std::vector<TensorType> ArgumentTypes() const { return main_->argument_types(); }
  // Throws BuilderError until main().Return(...) has been called.
  std::vector<TensorType> ResultTypes() const;

 private:
  // Everything after "module @<name>".
  std::string TextWithoutName() const;

  std::string name_;
  int64_t num_replicas_ = 1;
  std::unique_ptr<FunctionBuilder> main_;
};

}  // namespace torch_tpu::stablehlo
