#include "device_collectives.h"

#include <algorithm>
#include <set>

#include "pjrt/error.h"

namespace torch_tpu::collectives {

using pjrt::PjrtError;

DeviceCollectives::DeviceCollectives(std::shared_ptr<const pjrt::PjrtClient> client,
                                     std::vector<int64_t> replica_devices, Compiler compiler)
    : client_(std::move(client)),
      replica_devices_(std::move(replica_devices)),
      compiler_(std::move(compiler)) {
  if (!compiler_) {
    compiler_ = [client = client_](const std::string& text, const std::string& options) {
      return client->Compile(text, options);
    };
  }
  if (replica_devices_.empty()) {
    throw PjrtError(PJRT_Error_Code_INVALID_ARGUMENT, "device collectives need a replica");
  }
  std::set<int64_t> addressable;
  for (const pjrt::PjrtDevice& device : client_->addressable_devices()) {
    addressable.insert(device.id);
  }
  std::set<int64_t> known, seen;
  for (const pjrt::PjrtGlobalDevice& device : client_->global_devices()) known.insert(device.id);
  for (size_t r = 0; r < replica_devices_.size(); ++r) {
    int64_t id = replica_devices_[r];
    if (!known.count(id) || !seen.insert(id).second) {
      const char* problem = known.count(id) ? " is used twice" : " is unknown";
      throw PjrtError(PJRT_Error_Code_INVALID_ARGUMENT,
                      "device collectives: replica " + std::to_string(r) + "'s device " +
                          std::to_string(id) + problem + " (the " + client_->platform_name() +
                          " client has " + std::to_string(client_->global_devices().size()) +
                          " devices)");
    }
    if (addressable.count(id)) local_replicas_.push_back(static_cast<int64_t>(r));
  }
  compile_options_ = pjrt::ReplicatedCompileOptions(replica_devices_);
}

std::vector<int64_t> DeviceCollectives::OneDevicePerProcess(const pjrt::PjrtClient& client) {
  std::map<int, int64_t> first;
  for (const pjrt::PjrtGlobalDevice& device : client.global_devices()) {
    auto [it, inserted] = first.emplace(device.process_index, device.id);
    if (!inserted) it->second = std::min<int64_t>(it->second, device.id);
  }
  std::vector<int64_t> devices;
  for (const auto& [process, id] : first) devices.push_back(id);
  return devices;
}

std::shared_ptr<const pjrt::PjrtLoadedExecutable> DeviceCollectives::ProgramFor(
    const CollectiveSpec& spec) {
  std::string text = CollectiveModuleText(spec);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = programs_.find(text);
    if (it != programs_.end()) return it->second;
  }
  // Compiled outside the lock: compiling takes long and other specs need not wait for it.
  std::shared_ptr<const pjrt::PjrtLoadedExecutable> program = compiler_(text, compile_options_);
  std::lock_guard<std::mutex> lock(mutex_);
  return programs_.emplace(std::move(text), std::move(program)).first->second;
}

size_t DeviceCollectives::programs_compiled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return programs_.size();
}

std::vector<pjrt::ExecutionResult> DeviceCollectives::Run(
    const CollectiveSpec& spec, const std::vector<PJRT_Buffer*>& operands) {
  if (spec.world_size != world_size()) {
    throw PjrtError(PJRT_Error_Code_INVALID_ARGUMENT,
                    Describe(spec) + ": the group has " + std::to_string(world_size()) +
                        " replicas");
  }
  if (operands.size() != local_replicas_.size()) {
    throw PjrtError(PJRT_Error_Code_INVALID_ARGUMENT,
                    Describe(spec) + ": " + std::to_string(operands.size()) +
                        " operands for " + std::to_string(local_replicas_.size()) +
                        " local replicas");
  }
  std::shared_ptr<const pjrt::PjrtLoadedExecutable> program = ProgramFor(spec);
  std::vector<std::vector<PJRT_Buffer*>> argument_lists;
  for (PJRT_Buffer* operand : operands) argument_lists.push_back({operand});
  return program->ExecuteOnAssignedDevices(argument_lists);
}

}  // namespace torch_tpu::collectives
