#include "distributed/store_key_value_store.h"

#include <vector>

namespace torch_tpu::distributed {

StoreKeyValueStore::StoreKeyValueStore(c10::intrusive_ptr<c10d::Store> store, std::string prefix)
    : store_(std::move(store)), prefix_(std::move(prefix)) {}

void StoreKeyValueStore::Set(std::string_view key, std::string_view value) {
  store_->set(Key(key), std::vector<uint8_t>(value.begin(), value.end()));
}

std::optional<std::string> StoreKeyValueStore::Get(std::string_view key,
                                                   std::chrono::milliseconds timeout) {
  const std::string full = Key(key);
  try {
    store_->wait({full}, timeout);
  } catch (const c10::DistStoreError&) {
    return std::nullopt;  // the key did not appear in time
  }
  std::vector<uint8_t> value = store_->get(full);
  return std::string(value.begin(), value.end());
}

std::optional<std::string> StoreKeyValueStore::TryGet(std::string_view key) {
  const std::string full = Key(key);
  if (!store_->check({full})) return std::nullopt;
  std::vector<uint8_t> value = store_->get(full);
  return std::string(value.begin(), value.end());
}

}  // namespace torch_tpu::distributed
