// DeviceGuardImplInterface for tpu. Work is ordered by data dependencies through PJRT buffers, so
// streams are logical (ids only). An event stands for "everything launched so far": querying it
// answers whether all launched work has finished (conservative: never "done" too early), and
// waiting on it waits for all outstanding device work.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <memory>

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
  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::UNSAFE, device, current_stream_id());
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    static std::atomic<c10::StreamId> next{1};
    return c10::Stream(c10::Stream::UNSAFE, device, next++);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override {
    return getNewStream(device, 0);
  }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    const c10::Stream previous = getStream(stream.device());
    current_stream_id() = stream.id();
    return previous;
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

  static c10::StreamId& current_stream_id() {
    thread_local c10::StreamId id = 0;
    return id;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace torch_tpu::runtime
