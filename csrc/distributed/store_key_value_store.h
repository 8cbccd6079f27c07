// The process group's c10d store as the key-value store of a multi-process PJRT client: how the
// processes of a TPU or GPU client find each other at creation.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>

#include "pjrt/key_value_store.h"

namespace torch_tpu::distributed {

class StoreKeyValueStore : public pjrt::KeyValueStore {
 public:
  // Keys live under `prefix`, apart from the group's own.
  StoreKeyValueStore(c10::intrusive_ptr<c10d::Store> store, std::string prefix);

  void Set(std::string_view key, std::string_view value) override;
  std::optional<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> TryGet(std::string_view key) override;

 private:
  std::string Key(std::string_view key) const { return prefix_ + std::string(key); }
  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
};

}  // namespace torch_tpu::distributed
