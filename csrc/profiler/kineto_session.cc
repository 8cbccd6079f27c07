#include "profiler/kineto_session.h"

#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <libkineto.h>
#include <output_base.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "profiler/device_trace.h"

namespace torch_tpu::profiler {
namespace {

using libkineto::ActivityType;

// One row per kind on each device's process.
struct Row {
  int32_t resource;
  const char* name;
  ActivityType type;
};

// Executions and collectives are device time (PyTorch adds them to the launching op's device
// time); transfers are memcpys; compiles are host work done for the device (a runtime row).
Row RowOf(EventKind kind) {
  switch (kind) {
    case EventKind::kExecution:
      return {0, "programs", ActivityType::CONCURRENT_KERNEL};
    case EventKind::kTransfer:
      return {1, "transfers", ActivityType::GPU_MEMCPY};
    case EventKind::kCompile:
      return {2, "compiles (cache tier)", ActivityType::PRIVATEUSE1_RUNTIME};
    case EventKind::kCollective:
      return {3, "collectives", ActivityType::CONCURRENT_KERNEL};
  }
  return {0, "programs", ActivityType::CONCURRENT_KERNEL};
}

const std::set<ActivityType>& SupportedActivities() {
  static const std::set<ActivityType> activities{
      ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
      ActivityType::PRIVATEUSE1_RUNTIME};
  return activities;
}

std::string DeviceLabel(int device) { return "tpu:" + std::to_string(device); }

class TpuSession : public libkineto::IActivityProfilerSession {
 public:
  explicit TpuSession(std::set<ActivityType> types) : types_(std::move(types)) {}
  ~TpuSession() override {
    if (started_) EndRecording();
  }

  void start() override {
    started_ = true;
    status_ = libkineto::TraceStatus::RECORDING;
    StartRecording();
  }

  void stop() override {
    EndRecording();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0,
                 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t start_time,
                    int64_t end_time) override {
    // torch.profiler synchronizes the device before it stops; completion callbacks may still be
    // on their way from the plugin's threads.
    const std::vector<DeviceEvent> events = TakeEvents(std::chrono::seconds(5));
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_time, end_time, "tpu");
    buffer_->gpuOpCount = -1;
    for (const DeviceEvent& event : events) {
      const Row row = RowOf(event.kind);
      if (!types_.contains(row.type)) continue;
      devices_.insert(event.device);
      rows_.try_emplace({event.device, row.resource}, row.name);
      const libkineto::ITraceActivity* launcher =
          event.correlation != 0 ? linked_activity(static_cast<int32_t>(event.correlation))
                                 : nullptr;
      // A compile knows only its module: it is named after the op it was made for.
      buffer_->emplace_activity(
          buffer_->span, row.type,
          event.kind == EventKind::kCompile && launcher != nullptr
              ? event.name + ": " + launcher->name()
              : event.name);
      libkineto::GenericTraceActivity& activity = *buffer_->activities.back();
      activity.device = event.device;
      activity.resource = row.resource;
      activity.threadId = row.resource;
      activity.startTime = event.start_ns;
      activity.endTime = event.end_ns >= 0 ? event.end_ns : std::max(end_time, event.start_ns);
      // Compiles are host work: they stay out of the launching op's device time, so they carry
      // neither the link nor the op's id (PyTorch adds device time to events by id too).
      if (event.kind != EventKind::kCompile) {
        activity.id = static_cast<int32_t>(event.correlation);
        activity.linked = launcher;
      }
      activity.addMetadataQuoted("device", DeviceLabel(event.device));
      if (event.kind == EventKind::kCompile) {
        activity.addMetadataQuoted("cache tier", event.detail);
      } else if (!event.detail.empty()) {
        activity.addMetadataQuoted("program", event.detail);
      }
      if (event.bytes > 0) activity.addMetadata("bytes", event.bytes);
      if (event.kind == EventKind::kExecution && event.start_ns > event.issued_ns) {
        activity.addMetadata("queued us", (event.start_ns - event.issued_ns) / 1000.0);
      }
      if (event.end_ns < 0) activity.addMetadata("finished", "false");
      if (!event.error.empty()) activity.addMetadataQuoted("error", event.error);
      logger.handleActivity(activity);
    }
    // Names for every device's process but the first, which getDeviceInfo() reports.
    for (int device : devices_) {
      if (device == *devices_.begin()) continue;
      logger.handleDeviceInfo(Info(device), start_time);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    if (devices_.empty()) return nullptr;
    return std::make_unique<libkineto::DeviceInfo>(Info(*devices_.begin()));
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> infos;
    for (const auto& [row, name] : rows_) {
      infos.push_back({row.second, row.second, row.first, name});
    }
    return infos;
  }

  // Kineto keeps the activities (and the links PyTorch reads) alive with the trace.
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override { PushCorrelation(id); }
  void popCorrelationId() override { PopCorrelation(); }
  void pushUserCorrelationId(uint64_t id) override { PushUserCorrelation(id); }
  void popUserCorrelationId() override { PopUserCorrelation(); }

 private:
  // Below the host's process in the viewer, in device order.
  static libkineto::DeviceInfo Info(int device) {
    constexpr int64_t kBelowProcesses = 1 << 28;
    return {device, kBelowProcesses + device, DeviceLabel(device), DeviceLabel(device)};
  }

  std::set<ActivityType> types_;
  bool started_ = false;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::set<int> devices_;
  std::map<std::pair<int, int32_t>, const char*> rows_;  // (device, resource) -> row name
};

class TpuActivityProfiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override {
    return SupportedActivities();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activity_types, const libkineto::Config& config) override {
    // A CPU-only profile asks for runtime rows too but never for device work: no session, so
    // nothing is recorded.
    if (!activity_types.contains(ActivityType::CONCURRENT_KERNEL) &&
        !activity_types.contains(ActivityType::GPU_MEMCPY)) {
      return nullptr;
    }
    std::set<ActivityType> types;
    for (ActivityType type : SupportedActivities()) {
      if (activity_types.contains(type)) types.insert(type);
    }
    return std::make_unique<TpuSession>(std::move(types));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t ts_ms, int64_t duration_ms, const std::set<ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_ = "torch_tpu";
};

}  // namespace

void RegisterKinetoProfiler() {
  static const bool registered = [] {
    torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
        []() -> std::unique_ptr<libkineto::IActivityProfiler> {
          return std::make_unique<TpuActivityProfiler>();
        });
    return true;
  }();
  (void)registered;
}

bool KinetoProfilerRegistered() {
  return torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().isRegisteredWithKineto();
}

}  // namespace torch_tpu::profiler
