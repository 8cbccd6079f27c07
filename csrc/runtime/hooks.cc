// PrivateUse1HooksInterface: what PyTorch asks of the tpu backend outside of op kernels.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

#include "runtime/device.h"
#include "runtime/device_work.h"
#include "runtime/generator.h"
#include "runtime/pinned_memory.h"
#include "runtime/storage.h"

namespace torch_tpu::runtime {
namespace {

class TpuHooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return DeviceCount() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return DefaultGenerator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return at::make_generator<TpuGenerator>(device_index < 0 ? CurrentDevice() : device_index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    auto* buffer = static_cast<runtime::StorageBuffer*>(data);
    return at::Device(c10::DeviceType::PrivateUse1,
                      static_cast<c10::DeviceIndex>(buffer ? buffer->device_index() : 0));
  }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override { return true; }
  void init() const override {}
  c10::Allocator* getPinnedMemoryAllocator() const override { return PinnedHostAllocator(); }
  bool isPinnedPtr(const void* data) const override { return IsPinnedHostPointer(data); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_size) const override {
    TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
    runtime::StorageBuffer* old_buffer = GetStorageBuffer(storage);
    DeviceScope device(storage.device().index());  // the storage stays on its device
    c10::DataPtr data = TpuAllocator()->allocate(new_size);
    auto* new_buffer = static_cast<runtime::StorageBuffer*>(data.get_context());
    if (old_buffer != nullptr && new_buffer != nullptr) {
      new_buffer->set_contents(GetDeviceWork().resize(old_buffer->contents(), old_buffer->nbytes(),
                                                      new_size, old_buffer->device_index()));
    }
    const_cast<c10::Storage&>(storage).set_data_ptr_noswap(std::move(data));
    const_cast<c10::Storage&>(storage).set_nbytes(new_size);
  }
};

[[maybe_unused]] const bool hooks_registered = [] {
  static TpuHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
  return true;
}();

}  // namespace
}  // namespace torch_tpu::runtime
