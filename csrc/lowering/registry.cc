#include "lowering/registry.h"

#include <c10/util/Exception.h>

#include "lowering/float8.h"

namespace torch_tpu::lowering {

LoweringRegistry& LoweringRegistry::Get() {
  static LoweringRegistry registry;
  return registry;
}

void LoweringRegistry::Register(const std::string& functional, LoweringFunction function,
                                const std::string& in_place, const std::string& out) {
  // Registration runs during static initialization, where throwing would abort the process
  // while the library loads; conflicts are recorded and reported when the kernels register.
  for (const std::string* name : {&functional, &in_place, &out}) {
    if (!name->empty() && entries_.count(*name)) {
      errors_.push_back("lowering registered twice: " + *name);
      return;
    }
  }
  auto& stored = functions_[functional];
  stored = std::make_unique<LoweringFunction>(WithFloat8Rules(functional, std::move(function)));
  auto add = [&](const std::string& name, LoweringEntry::Variant variant) {
    if (!name.empty()) entries_[name] = LoweringEntry{functional, variant, stored.get()};
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

namespace {

// ATen names in-place operators with a trailing underscore (`add_`), except Python's dunder
// operators: `__lshift__` is functional, its in-place form is `__ilshift__`.
bool IsInPlaceOperator(std::string_view name) {
  if (const size_t separator = name.rfind("::"); separator != std::string_view::npos) {
    name.remove_prefix(separator + 2);
  }
  const bool dunder = name.size() > 4 && name.starts_with("__") && name.ends_with("__");
  return dunder ? name.starts_with("__i") : name.ends_with('_');
}

}  // namespace

LoweringRegistrar::LoweringRegistrar(LoweringFunction function,
                                     std::initializer_list<std::string_view> names,
                                     Randomness randomness) {
  LoweringRegistry& registry = LoweringRegistry::Get();
  if (names.size() == 0) {
    registry.RecordError("a lowering registered without an overload name");
    return;
  }
  const std::string functional(*names.begin());
  std::string in_place, out;
  for (auto it = names.begin() + 1; it != names.end(); ++it) {
    const std::string_view name = *it;
    const std::string_view operator_name = name.substr(0, name.find('.'));
    std::string& slot = IsInPlaceOperator(operator_name) ? in_place : out;
    if (!slot.empty()) {
      registry.RecordError(functional + " names two variants of one kind: " + slot + " and " +
                           std::string(name));
      return;
    }
    slot = name;
  }
  registry.Register(functional, std::move(function), in_place, out);
  if (randomness == Randomness::kImplicit) registry.MarkImplicitRandom(functional);
}

}  // namespace torch_tpu::lowering
