// The key-value store a multi-process PJRT client uses to find its peers (GPU plugin: topology
// and NCCL ids). The caller provides it (torch_tpu: the process group's store); the client hands
// it to the plugin as PJRT_Client_Create's callbacks.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace torch_tpu::pjrt {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // Implementations are called from the plugin's threads, so they must be thread-safe.
  virtual void Set(std::string_view key, std::string_view value) = 0;
  // Waits up to `timeout` for `key`; nullopt when it did not appear in time.
  virtual std::optional<std::string> Get(std::string_view key,
                                         std::chrono::milliseconds timeout) = 0;
  // The value when `key` is present now, else nullopt.
  virtual std::optional<std::string> TryGet(std::string_view key) = 0;
};

// Where this process sits among the processes of one multi-process client: `node_id` of
// `num_nodes`, and the store they share.
struct MultiProcessOptions {
  int node_id = 0;
  int num_nodes = 1;
  std::shared_ptr<KeyValueStore> store;
};

}  // namespace torch_tpu::pjrt
