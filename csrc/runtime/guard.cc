// DeviceGuardImplInterface for tpu. Work is ordered by data dependencies through PJRT buffers, so
// streams are logical (ids only). An event stands for "everything launched so far": querying it
// answers whether all launched work has finished (conservative: never "done" too early), and
// waiting on it waits for all outstanding device work.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <memory>
#include <unordered_map>

#include "lowering/dtype.h"
#include "runtime/device.h"
#include "runtime/device_work.h"

namespace torch_tpu::runtime {
namespace {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

class TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kTpu; }
  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device previous = getDevice();
    if (device.index() != previous.index()) SetCurrentDevice(device.index());
    return previous;
  }
  c10::Device getDevice() const override {
    return c10::Device(kTpu, static_cast<c10::DeviceIndex>(CurrentDevice()));
  }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kTpu, "expected a tpu device, got ", device);
    SetCurrentDevice(device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    try {
      SetCurrentDevice(device.index());
    } catch (...) {
    }
  }
  // Streams are per thread and device, as CUDA's: a device without an index (torch.Stream("tpu"))
  // is the thread's current device.
  c10::Stream getStream(c10::Device device) const noexcept override {
    device = Resolved(device);
    return c10::Stream(c10::Stream::UNSAFE, device, CurrentStreamId(device.index()));
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, Resolved(device));
  }
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    static std::atomic<c10::StreamId> next{1};
    return c10::Stream(c10::Stream::UNSAFE, Resolved(device), next++);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override {
    return getNewStream(device, 0);
  }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    const c10::Stream previous = getStream(stream.device());
    CurrentStreamId(previous.device_index()) = stream.id();
    return previous;
  }
  // torch.accelerator.get_device_capability: the dtypes tpu tensors can hold.
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    c10::DeviceCapability capability;
    capability.capability_data.capability_bits = 0;
#define TORCH_TPU_SUPPORTED(_, name)                                         \
  capability.capability_data.supported_scalar_types.has_##name =            \
      lowering::ToElementType(c10::ScalarType::name).has_value();
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(TORCH_TPU_SUPPORTED)
#undef TORCH_TPU_SUPPORTED
    return capability;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(DeviceCount());
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    // The handle is owned by the c10::Event and returned through destroyEvent.
    if (*event == nullptr) *event = std::make_unique<RecordedEvent>().release();
    auto* recorded = static_cast<RecordedEvent*>(*event);
    // Timing events (torch.Event(enable_timing=True)) are timed on the host, like
    // torch.tpu.Event: recording waits for the work launched so far and stamps the clock.
    recorded->timed = flag == c10::EventFlag::BACKEND_DEFAULT;
    if (recorded->timed) {
      GetDeviceWork().synchronize_all();
      recorded->completed_at = std::chrono::steady_clock::now();
    }
  }
  void block(void* event, const c10::Stream& stream) const override {}
  bool queryEvent(void* event) const override { return GetDeviceWork().all_work_done(); }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    std::unique_ptr<RecordedEvent> owned(static_cast<RecordedEvent*>(event));
  }
  bool queryStream(const c10::Stream& stream) const override {
    return GetDeviceWork().all_work_done();
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    GetDeviceWork().synchronize_all();
  }
  void synchronizeEvent(void* event) const override { GetDeviceWork().synchronize_all(); }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    GetDeviceWork().synchronize_all();
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "tpu Event.elapsed_time: both events must be recorded first");
    const auto* first = static_cast<const RecordedEvent*>(start);
    const auto* second = static_cast<const RecordedEvent*>(end);
    TORCH_CHECK(first->timed && second->timed,
                "tpu Event.elapsed_time: both events must be created with enable_timing=True");
    return std::chrono::duration<double, std::milli>(second->completed_at - first->completed_at)
        .count();
  }

 private:
  struct RecordedEvent {
    bool timed = false;
    std::chrono::steady_clock::time_point completed_at;
  };

  static c10::Device Resolved(c10::Device device) {
    if (device.has_index()) return device;
    return c10::Device(kTpu, static_cast<c10::DeviceIndex>(CurrentDevice()));
  }
  static c10::StreamId& CurrentStreamId(c10::DeviceIndex device) {
    thread_local std::unordered_map<c10::DeviceIndex, c10::StreamId> ids;
    return ids[device];  // 0, the default stream, until set
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace torch_tpu::runtime
