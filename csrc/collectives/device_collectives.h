// Cross-process collectives as programs on the device: the transport for plugins whose clients
// span processes (TPU; GPU created with node_id/num_nodes and a key-value store). Each process
// runs the same replicated program on its own device and the plugin moves the data; nothing is
// staged through the host.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collective_program.h"
#include "pjrt/client.h"
#include "pjrt/executable.h"

namespace torch_tpu::collectives {

class DeviceCollectives {
 public:
  // `replica_devices[r]` is the global device id of replica r (rank r's device); the client must
  // see all of them, and this process runs the replicas whose devices it can address.
  // Compiles a program (MLIR text) with compile options; the client's Compile by default.
  using Compiler = std::function<std::shared_ptr<pjrt::PjrtLoadedExecutable>(
      const std::string& text, const std::string& compile_options)>;
  DeviceCollectives(std::shared_ptr<const pjrt::PjrtClient> client,
                    std::vector<int64_t> replica_devices, Compiler compiler = nullptr);

  // One device per process of a multi-process client: the lowest-id device of each process, in
  // process order (rank r = process r).
  static std::vector<int64_t> OneDevicePerProcess(const pjrt::PjrtClient& client);

  int64_t world_size() const { return static_cast<int64_t>(replica_devices_.size()); }
  // The replicas this process runs, ascending; their inputs go to Run in this order.
  const std::vector<int64_t>& local_replicas() const { return local_replicas_; }

  // Enqueues `spec` (whose world_size must be world_size()) with one operand per local replica
  // and returns at once: one result per local replica, ready when its event completes. The
  // program is compiled on first use of a spec and reused after.
  std::vector<pjrt::ExecutionResult> Run(const CollectiveSpec& spec,
                                         const std::vector<PJRT_Buffer*>& operands);

  // Programs compiled so far (one per distinct spec).
  size_t programs_compiled() const;

 private:
  std::shared_ptr<const pjrt::PjrtLoadedExecutable> ProgramFor(const CollectiveSpec& spec);

  std::shared_ptr<const pjrt::PjrtClient> client_;
  std::vector<int64_t> replica_devices_;
  std::vector<int64_t> local_replicas_;
  std::string compile_options_;
  Compiler compiler_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const pjrt::PjrtLoadedExecutable>> programs_;
};

}  // namespace torch_tpu::collectives
