// Deviceless ahead-of-time compilation: a plugin's description of a device topology (e.g. libtpu's
// "v5e:2x2") and programs compiled for it without a client, so nothing opens a device. The result
// is an unloaded executable: its serialized bytes load later on a machine that has the devices.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client.h"
#include "compiled_memory.h"
#include "pjrt_c_api.h"
#include "plugin.h"

namespace torch_tpu::pjrt {

// Owns a PJRT_Executable that no client has loaded (the result of PJRT_Compile).
class PjrtExecutable {
 public:
  PjrtExecutable(std::shared_ptr<const PjrtPlugin> plugin, PJRT_Executable* executable);
  ~PjrtExecutable();
  PjrtExecutable(const PjrtExecutable&) = delete;
  PjrtExecutable& operator=(const PjrtExecutable&) = delete;

  const std::string& name() const { return name_; }
  size_t num_outputs() const { return num_outputs_; }
  // Bytes a client of the same plugin version turns back into a loaded executable.
  std::string Serialize() const;
  // Throws PjrtError(UNIMPLEMENTED) when the plugin does not report memory statistics.
  CompiledMemoryStats MemoryStats() const;
  // The plugin's cost analysis (e.g. "flops", "bytes accessed"), numbers only; empty when the
  // plugin offers none.
  std::vector<std::pair<std::string, double>> CostAnalysis() const;

 private:
  void Destroy();
  std::shared_ptr<const PjrtPlugin> plugin_;
  PJRT_Executable* executable_;
  std::string name_;
  size_t num_outputs_ = 0;
};

// Owns a PJRT_TopologyDescription created by name, with no devices behind it.
class PjrtTopology {
 public:
  // Throws PjrtError with the plugin's message when it does not know `name` or cannot describe
  // topologies (the CPU plugin: UNIMPLEMENTED).
  static std::shared_ptr<PjrtTopology> Create(std::shared_ptr<const PjrtPlugin> plugin,
                                              std::string_view name,
                                              const std::vector<CreateOption>& options = {});
  ~PjrtTopology();
  PjrtTopology(const PjrtTopology&) = delete;
  PjrtTopology& operator=(const PjrtTopology&) = delete;

  const std::shared_ptr<const PjrtPlugin>& plugin() const { return plugin_; }
  const std::string& name() const { return name_; }
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  // One entry per device of the topology: its kind ("TPU v5 lite").
  const std::vector<std::string>& device_kinds() const { return device_kinds_; }

  // Compiles a StableHLO/MHLO module (MLIR text or bytecode) for this topology with no client.
  // Throws PjrtError carrying the compiler's diagnostic when it rejects the program.
  std::unique_ptr<PjrtExecutable> Compile(std::string_view mlir_module,
                                          std::string_view compile_options) const;

 private:
  PjrtTopology(std::shared_ptr<const PjrtPlugin> plugin, std::string name,
               PJRT_TopologyDescription* topology);
  std::shared_ptr<const PjrtPlugin> plugin_;
  std::string name_;
  PJRT_TopologyDescription* topology_;
  std::string platform_name_;
  std::string platform_version_;
  std::vector<std::string> device_kinds_;
};

}  // namespace torch_tpu::pjrt
