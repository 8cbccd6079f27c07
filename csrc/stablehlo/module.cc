#include "module.h"

#include <utility>

namespace torch_tpu::stablehlo {
namespace {

bool IsBareIdentifier(const std::string& name) {
  if (name.empty()) return false;
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!letter(name[0])) return false;
  for (char c : name) {
    if (!letter(c) && !(c >= '0' && c <= '9') && c != '$' && c != '.') return false;
  }
  return true;
}

}  // namespace

Module::Module(std::string name)
    : name_(std::move(name)), main_(std::make_unique<FunctionBuilder>()) {
  if (!IsBareIdentifier(name_)) {
    throw BuilderError("Module: name \"" + name_ +
                       "\" is not a valid MLIR symbol name ([A-Za-z_][A-Za-z0-9_$.]*)");
  }
}

std::string Module::TextWithoutName() const {
  // One partition: sharding is decided by torch_tpu, not by SPMD partitioning. Several replicas
  // only for cross-process collective programs.
  std::string text = " attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = " +
                     std::to_string(num_replicas_) + " : i32} {\n" +
                     main_->FunctionText("main", 2);
  for (const auto& linked : main_->linked_functions()) text += linked->text + "\n";
  return text + "}\n";
}

void Module::set_num_replicas(int64_t count) {
  if (count < 1) {
    throw BuilderError("Module: num_replicas must be positive, got " + std::to_string(count));
  }
  num_replicas_ = count;
}

std::string Module::ToText() const { return "module @" + name_ + TextWithoutName(); }

uint64_t Module::StructuralHash() const {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : TextWithoutName()) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::vector<TensorType> Module::ResultTypes() const {
  if (!main_->returned()) throw BuilderError("Module::ResultTypes: @main has no Return yet");
  return main_->result_types();
}

}  // namespace torch_tpu::stablehlo
