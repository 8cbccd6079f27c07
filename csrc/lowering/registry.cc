#include "lowering/registry.h"

#include <c10/util/Exception.h>

namespace torch_tpu::lowering {

LoweringRegistry& LoweringRegistry::Get() {
  static LoweringRegistry registry;
  return registry;
}

void LoweringRegistry::Register(const std::string& functional, LoweringFunction function,
                                const std::string& in_place, const std::string& out) {
  TORCH_INTERNAL_ASSERT(!functions_.count(functional), "lowering registered twice: ", functional);
  auto& stored = functions_[functional];
  stored = std::make_unique<LoweringFunction>(std::move(function));
  auto add = [&](const std::string& name, LoweringEntry::Variant variant) {
    if (name.empty()) return;
    TORCH_INTERNAL_ASSERT(!entries_.count(name), "lowering registered twice: ", name);
    entries_[name] = LoweringEntry{functional, variant, stored.get()};
  };
  add(functional, LoweringEntry::Variant::kFunctional);
  add(in_place, LoweringEntry::Variant::kInPlace);
  add(out, LoweringEntry::Variant::kOut);
}

void LoweringRegistry::MarkImplicitRandom(const std::string& functional) {
  for (auto& [name, entry] : entries_) {
    if (entry.functional_name == functional) entry.implicit_random = true;
  }
}

const LoweringEntry* LoweringRegistry::Find(std::string_view overload_name) const {
  auto it = entries_.find(std::string(overload_name));
  return it == entries_.end() ? nullptr : &it->second;
}

const LoweringFunction& LoweringRegistry::Function(std::string_view overload_name) const {
  const LoweringEntry* entry = Find(overload_name);
  TORCH_INTERNAL_ASSERT(entry != nullptr, "no lowering registered for ", overload_name);
  return *entry->function;
}

std::vector<std::string> LoweringRegistry::OverloadNames() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

}  // namespace torch_tpu::lowering
