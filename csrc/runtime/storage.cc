#include "runtime/storage.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pjrt/error.h"
#include "runtime/device_work.h"
#include "runtime/device.h"
#include "runtime/memory_report.h"
#include "runtime/runtime.h"

namespace torch_tpu::runtime {
namespace {

// Memory statistics count buffers: recorded (DeferAndFuse) results get theirs first.
void LaunchRecordedWork() {
  if (const auto launch = GetDeviceWork().launch_recorded) launch();
}

using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr int kMaxDevices = 64;
// PyTorch's caching allocators split statistics into pools at 1 MiB; using the same boundary keeps
// small_pool/large_pool numbers comparable with CUDA's.
constexpr size_t kLargeBufferBytes = size_t{1} << 20;
// Allocations from this size on are checked against the free memory the device reports. Smaller
// ones are not: the query (a plugin call or reading /proc/meminfo) would cost more than they do,
// and they cannot exhaust memory on their own.
constexpr size_t kCapacityCheckBytes = size_t{16} << 20;

// Statistics of one device. Two quantities are counted:
//  - device buffers (allocation, segment, active, allocated/reserved/active bytes): the PJRT
//    buffers holding storage contents, at their real on-device size, from the moment a storage
//    takes one until the last holder lets go;
//  - requests (requested_bytes): the bytes of live storages, counted when the storage is
//    allocated, whether or not anything has been written to it yet.
// There is no cache of our own (PJRT frees a buffer when its last handle goes), so reserved
// mirrors allocated and every buffer is its own segment.
class DeviceMemory {
 public:
  // A buffer appears (`added`) or goes.
  void CountBuffer(size_t bytes, bool added) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const StatType pool : {StatType::AGGREGATE, PoolOf(bytes)}) {
      for (StatArray* count : {&stats_.allocation, &stats_.segment, &stats_.active}) {
        Change((*count)[Index(pool)], 1, added);
      }
      for (StatArray* sum :
           {&stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes}) {
        Change((*sum)[Index(pool)], bytes, added);
      }
    }
    ++(added ? stats_.num_device_alloc : stats_.num_device_free);
  }
  // A storage of `bytes` is allocated (`added`) or freed.
  void CountRequest(size_t bytes, bool added) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const StatType pool : {StatType::AGGREGATE, PoolOf(bytes)}) {
      Change(stats_.requested_bytes[Index(pool)], bytes, added);
    }
  }
  // A program holds `bytes` of temporaries while it runs: they raise the peaks of the byte
  // statistics the moment it is launched and are gone again when they are read.
  void CountTemporaries(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const StatType pool : {StatType::AGGREGATE, PoolOf(bytes)}) {
      for (StatArray* sum :
           {&stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes}) {
        auto& stat = (*sum)[Index(pool)];
        stat.increase(bytes);
        stat.decrease(bytes);
        // Temporaries are not allocations the user made: only the peak keeps them.
        stat.allocated -= static_cast<int64_t>(bytes);
        stat.freed -= static_cast<int64_t>(bytes);
      }
    }
    largest_temporaries_peak_ = std::max(largest_temporaries_peak_, static_cast<int64_t>(bytes));
  }
  int64_t LargestTemporariesPeak() {
    std::lock_guard<std::mutex> lock(mutex_);
    return largest_temporaries_peak_;
  }
  void CountOutOfMemory() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.num_ooms;
  }
  // What the device holds now, or will hold once every allocated storage is written: the larger of
  // live buffer bytes and live storage bytes.
  int64_t HeldOrPromised() {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t all = Index(StatType::AGGREGATE);
    return std::max(stats_.allocated_bytes[all].current, stats_.requested_bytes[all].current);
  }
  std::atomic<int64_t> limit_bytes{0};  // torch.tpu.set_per_process_memory_fraction; 0: none
  DeviceStats Snapshot() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void ResetPeak() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (StatArray* array : Arrays()) {
      for (auto& stat : *array) stat.reset_peak();
    }
    largest_temporaries_peak_ = 0;
  }
  void ResetAccumulated() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (StatArray* array : Arrays()) {
      for (auto& stat : *array) stat.reset_accumulated();
    }
    stats_.num_ooms = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
  }

 private:
  static StatType PoolOf(size_t bytes) {
    return bytes >= kLargeBufferBytes ? StatType::LARGE_POOL : StatType::SMALL_POOL;
  }
  static size_t Index(StatType type) { return static_cast<size_t>(type); }
  static void Change(c10::CachingAllocator::Stat& stat, size_t amount, bool increase) {
    if (increase) {
      stat.increase(amount);
    } else {
      stat.decrease(amount);
    }
  }
  std::array<StatArray*, 7> Arrays() {
    return {&stats_.allocation,      &stats_.segment,        &stats_.active,
            &stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
            &stats_.requested_bytes};
  }

  std::mutex mutex_;
  DeviceStats stats_;
  int64_t largest_temporaries_peak_ = 0;  // the most temporaries one program run held
};

DeviceMemory& MemoryOf(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "invalid tpu device index ", device);
  // Never destroyed: storages and buffers may outlive static destruction at exit.
  static auto* devices = new std::array<DeviceMemory, kMaxDevices>();
  return (*devices)[device];
}

// The description of the program whose outputs this thread is publishing (ProducerScope).
thread_local const std::shared_ptr<const std::string>* current_producer = nullptr;

// --- counted buffers -----------------------------------------------------------------------------

// Owns one reference to a buffer on behalf of every storage (and every program argument list)
// holding it; its lifetime is exactly the time the buffer counts as allocated.
struct CountedBuffer {
  CountedBuffer(std::shared_ptr<pjrt::PjrtBuffer> counted, int device_index, size_t byte_count,
                std::shared_ptr<const std::string> producer_description)
      : buffer(std::move(counted)),
        device(device_index),
        bytes(byte_count),
        producer(std::move(producer_description)) {
    MemoryOf(device).CountBuffer(bytes, /*added=*/true);
  }
  ~CountedBuffer();
  CountedBuffer(const CountedBuffer&) = delete;
  CountedBuffer& operator=(const CountedBuffer&) = delete;

  const std::shared_ptr<pjrt::PjrtBuffer> buffer;
  const int device;
  const size_t bytes;
  // The op or graph whose run produced it (null: a copy from the host or another device).
  const std::shared_ptr<const std::string> producer;
  std::atomic<bool> donated{false};  // its memory went to a program output: no longer counted
};

// Which buffers are counted, so that a buffer handed from one storage to another counts once.
class CountedBuffers {
 public:
  static CountedBuffers& Get() {
    static auto* registry = new CountedBuffers();  // never destroyed, like the statistics
    return *registry;
  }
  std::shared_ptr<CountedBuffer> Find(const pjrt::PjrtBuffer* buffer) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(buffer);
    return it == entries_.end() ? nullptr : it->second.weak.lock();
  }
  void Insert(const std::shared_ptr<CountedBuffer>& counted) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_[counted->buffer.get()] = Entry{counted.get(), counted};
  }
  std::vector<LiveBuffer> Live(int device) {
    // The references taken here are dropped after the lock is released: another thread may
    // release a buffer meanwhile, and if ours is its last reference, its destructor erases the
    // entry (Erase takes the lock; under it, that would be a second lock of the same mutex).
    std::vector<std::pair<uintptr_t, std::shared_ptr<CountedBuffer>>> held;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held.reserve(entries_.size());
      for (const auto& [address, entry] : entries_) {
        if (std::shared_ptr<CountedBuffer> counted = entry.weak.lock()) {
          held.emplace_back(reinterpret_cast<uintptr_t>(address), std::move(counted));
        }
      }
    }
    std::vector<LiveBuffer> live;
    for (const auto& [address, counted] : held) {
      if (counted->device != device || counted->donated.load()) continue;
      live.push_back(LiveBuffer{address, static_cast<int64_t>(counted->bytes), counted->producer});
    }
    return live;
  }
  void Erase(const CountedBuffer* counted) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(counted->buffer.get());
    // A racing Insert for the same buffer may have replaced the entry; leave that one alone.
    if (it != entries_.end() && it->second.owner == counted) entries_.erase(it);
  }

 private:
  struct Entry {
    const CountedBuffer* owner;
    std::weak_ptr<CountedBuffer> weak;
  };
  std::mutex mutex_;
  std::unordered_map<const pjrt::PjrtBuffer*, Entry> entries_;
};

CountedBuffer::~CountedBuffer() {
  CountedBuffers::Get().Erase(this);
  if (!donated.exchange(true)) MemoryOf(device).CountBuffer(bytes, /*added=*/false);
}

// The bytes the buffer occupies on the device (layout padding included); the storage's size when
// the plugin cannot say (a buffer whose producer failed, say).
size_t DeviceBytes(const pjrt::PjrtBuffer& buffer, size_t fallback_nbytes) {
  try {
    return buffer.on_device_size_bytes();
  } catch (const pjrt::PjrtError&) {
    return fallback_nbytes;
  }
}

// --- capacity ------------------------------------------------------------------------------------

// MemAvailable and MemTotal of /proc/meminfo, in bytes; zeros (unknown) when unreadable.
MemoryCapacity HostCapacity() {
  MemoryCapacity capacity;
  capacity.host_memory = true;
  std::ifstream meminfo("/proc/meminfo");
  std::string name;
  int64_t kilobytes = 0;
  std::string unit;
  while (meminfo >> name >> kilobytes) {
    std::getline(meminfo, unit);
    if (name == "MemTotal:") capacity.total_bytes = kilobytes * 1024;
    if (name == "MemAvailable:") capacity.free_bytes = kilobytes * 1024;
  }
  return capacity;
}

// The plugin's view of `device`, when it implements PJRT_Device_MemoryStats and reports a limit.
std::optional<MemoryCapacity> PluginCapacity(const Runtime& device_runtime, int device) {
  // Plugins that lack the call answer UNIMPLEMENTED every time; ask once.
  static std::atomic<bool> unsupported{false};
  if (unsupported.load()) return std::nullopt;
  const PJRT_Api* api = device_runtime.plugin().api();
  if (api->struct_size <= offsetof(PJRT_Api, PJRT_Device_MemoryStats) ||
      api->PJRT_Device_MemoryStats == nullptr) {
    unsupported = true;
    return std::nullopt;
  }
  PJRT_Device_MemoryStats_Args args{};
  args.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
  args.device = device_runtime.device(static_cast<size_t>(device)).handle;
  PJRT_Error_Code code = PJRT_Error_Code_OK;
  const std::string error = pjrt::ConsumeError(api, api->PJRT_Device_MemoryStats(&args), &code);
  if (!error.empty() || !args.bytes_limit_is_set || args.bytes_limit <= 0) {
    if (!error.empty() && code == PJRT_Error_Code_UNIMPLEMENTED) unsupported = true;
    if (error.empty() && !args.bytes_limit_is_set) unsupported = true;
    return std::nullopt;
  }
  MemoryCapacity capacity;
  capacity.total_bytes = args.bytes_limit;
  capacity.free_bytes = std::max<int64_t>(args.bytes_limit - args.bytes_in_use, 0);
  return capacity;
}

// " for <the op or graph being run>" when this thread is running one.
std::string ForWhat(const std::string& what) {
  if (!what.empty()) return " for " + ShortDescription(what);
  if (current_producer != nullptr && *current_producer != nullptr) {
    return " for " + ShortDescription(**current_producer);
  }
  return "";
}

// Raises torch.OutOfMemoryError when `bytes` more would pass this process's limit on `device`
// (torch.tpu.set_per_process_memory_fraction). `what` names the program needing them, if any.
void CheckMemoryLimit(int device, int64_t bytes, const std::string& what) {
  DeviceMemory& memory = MemoryOf(device);
  const int64_t limit = memory.limit_bytes.load(std::memory_order_relaxed);
  if (limit <= 0) return;
  // On top of every buffer held now, and every storage allocated that will hold one (its launch
  // may still wait for a compile).
  const int64_t held = memory.HeldOrPromised();
  if (held + bytes <= limit) return;
  memory.CountOutOfMemory();
  TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu out of memory: ",
                   what.empty() ? "tried to allocate " : "a run needs ", FormatBytes(bytes), " (",
                   bytes, " bytes) on tpu:", device, ForWhat(what),
                   what.empty() ? "" : " (outputs and the compiler's temporaries)",
                   ", past this process's limit of ", FormatBytes(limit),
                   " (torch.tpu.set_per_process_memory_fraction), of which ",
                   FormatBytes(std::max<int64_t>(limit - held, 0)), " are free; tpu tensors hold ",
                   FormatBytes(held), ".", OutOfMemoryDetails(device));
}

// Raises torch.OutOfMemoryError when `nbytes` exceed what `device` has free. Checked when the
// storage is allocated rather than when it is first written, so torch.empty fails like
// torch.zeros does instead of handing out a storage that can never be filled.
void CheckCapacity(int device, size_t nbytes) {
  CheckMemoryLimit(device, static_cast<int64_t>(nbytes), "");
  if (nbytes < kCapacityCheckBytes) return;
  const MemoryCapacity capacity = QueryMemoryCapacity(device);
  // Unknown capacity (no plugin limit, no /proc/meminfo): leave the refusal to the plugin.
  if (capacity.total_bytes <= 0) return;
  if (nbytes <= static_cast<size_t>(capacity.free_bytes)) return;
  MemoryOf(device).CountOutOfMemory();
  const int64_t allocated =
      MemoryOf(device).Snapshot().allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].current;
  TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu out of memory: tried to allocate ",
                   FormatBytes(static_cast<int64_t>(nbytes)), " (", nbytes, " bytes) on tpu:",
                   device, ForWhat(""), ", which has ", FormatBytes(capacity.free_bytes),
                   " free of ", FormatBytes(capacity.total_bytes),
                   capacity.host_memory ? " of host memory (the plugin's buffers live in host RAM)"
                                        : " of device memory",
                   "; tpu tensors hold ", FormatBytes(allocated), ".",
                   OutOfMemoryDetails(device));
}

// --- the allocator -------------------------------------------------------------------------------

void DeleteStorageBuffer(void* context) {
  auto* buffer = static_cast<runtime::StorageBuffer*>(context);
  MemoryOf(buffer->device_index()).CountRequest(buffer->nbytes(), /*added=*/false);
  // Owned by the DataPtr: this is its deleter (unless a queued launch still uses it).
  if (buffer->ReleaseNowOrWhenUnqueued()) delete buffer;
}

void DeleteNothing(void*) {}

int ResolveDevice(c10::DeviceIndex device) { return device < 0 ? CurrentDevice() : device; }

// The DataPtr's data is the StorageBuffer itself: a unique, stable address per storage, which
// is all PyTorch uses device pointers for (identity, overlap checks within one storage). It is
// never dereferenced: device bytes live in the PJRT buffer. Being a c10::DeviceAllocator makes
// torch.accelerator.memory_* work for tpu.
class Allocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    // A device whose runtime cannot start raises its startup error here, at the first tensor,
    // rather than holding tensors whose work can only fail later (or read as never written).
    Runtime::Get();
    const int device = CurrentDevice();
    const c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
    if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &DeleteNothing, where);
    CheckCapacity(device, nbytes);
    auto buffer = std::make_unique<runtime::StorageBuffer>(nbytes, device);
    MemoryOf(device).CountRequest(nbytes, /*added=*/true);
    void* raw = buffer.release();
    return c10::DataPtr(raw, raw, &DeleteStorageBuffer, where);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* destination, const void* source, std::size_t count) const override {
    TORCH_CHECK(false, "tpu storages cannot be copied byte-wise on the host; use tensor.copy_()");
  }

  bool initialized() override { return true; }
  // Nothing is cached: a buffer's memory returns to the plugin when its last holder lets go.
  void emptyCache(c10::MempoolId_t) override {}
  // Work is ordered by its data dependencies, so a buffer never needs holding for a stream.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    LaunchRecordedWork();
    return MemoryOf(ResolveDevice(device)).Snapshot();
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    ResetAccumulatedMemoryStats(ResolveDevice(device));
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    ResetPeakMemoryStats(ResolveDevice(device));
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    LaunchRecordedWork();
    const MemoryCapacity capacity = QueryMemoryCapacity(ResolveDevice(device));
    return {static_cast<size_t>(capacity.free_bytes), static_cast<size_t>(capacity.total_bytes)};
  }
};

Allocator allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator);

}  // namespace

namespace {
// Registered once each at load or first use and never removed: a fixed array read without a lock.
constexpr size_t kMaxMaterializeFunctions = 4;
std::array<std::atomic<MaterializeFunction>, kMaxMaterializeFunctions> materialize_functions{};
std::atomic<size_t> materialize_function_count{0};
}  // namespace

void AddMaterializeFunction(MaterializeFunction function) {
  // A reader that sees the count before the function skips the empty entry.
  const size_t index = materialize_function_count.fetch_add(1);
  TORCH_INTERNAL_ASSERT(index < kMaxMaterializeFunctions, "too many materialize functions");
  materialize_functions[index] = function;
}

void MaterializeDeferred() {
  const size_t count = std::min(materialize_function_count.load(), kMaxMaterializeFunctions);
  for (size_t i = 0; i < count; ++i) {
    if (MaterializeFunction function = materialize_functions[i].load()) function();
  }
}

std::shared_ptr<pjrt::PjrtBuffer> CountBufferMemory(std::shared_ptr<pjrt::PjrtBuffer> buffer,
                                                    int device, size_t fallback_nbytes) {
  CountedBuffers& registry = CountedBuffers::Get();
  std::shared_ptr<CountedBuffer> counted = registry.Find(buffer.get());
  if (counted == nullptr) {
    const size_t bytes = DeviceBytes(*buffer, fallback_nbytes);
    counted = std::make_shared<CountedBuffer>(
        std::move(buffer), device, bytes,
        current_producer != nullptr ? *current_producer : std::shared_ptr<const std::string>());
    registry.Insert(counted);
  }
  // Shares ownership with the counter, so the buffer is uncounted when the last copy goes.
  return std::shared_ptr<pjrt::PjrtBuffer>(counted, counted->buffer.get());
}

void UncountDonatedBuffer(const pjrt::PjrtBuffer* buffer) {
  std::shared_ptr<CountedBuffer> counted = CountedBuffers::Get().Find(buffer);
  if (counted != nullptr && !counted->donated.exchange(true)) {
    MemoryOf(counted->device).CountBuffer(counted->bytes, /*added=*/false);
  }
}

runtime::StorageBuffer* GetStorageBuffer(const c10::Storage& storage) {
  if (!storage) return nullptr;
  return static_cast<runtime::StorageBuffer*>(storage.data_ptr().get_context());
}

c10::Allocator* TpuAllocator() { return &allocator; }

void GrowStorage(const c10::Storage& storage, size_t new_nbytes) {
  StorageBuffer* buffer = GetStorageBuffer(storage);
  TORCH_CHECK(buffer != nullptr && new_nbytes >= buffer->nbytes(),
              "GrowStorage: a tpu storage only grows (", storage.nbytes(), " to ", new_nbytes,
              " bytes)");
  const size_t old_nbytes = buffer->nbytes();
  const int device = buffer->device_index();
  CheckCapacity(device, new_nbytes - old_nbytes);
  buffer->GrowTo(new_nbytes,
                 GetDeviceWork().resize(buffer->contents(), old_nbytes, new_nbytes, device));
  MemoryOf(device).CountRequest(old_nbytes, /*added=*/false);
  MemoryOf(device).CountRequest(new_nbytes, /*added=*/true);
  const_cast<c10::Storage&>(storage).set_nbytes(new_nbytes);
}

ProducerScope::ProducerScope(const std::shared_ptr<const std::string>& description)
    : previous_(current_producer) {
  current_producer = &description;
}
ProducerScope::~ProducerScope() { current_producer = previous_; }

void CountProgramTemporaries(int device, int64_t temporary_bytes) {
  if (temporary_bytes > 0) MemoryOf(device).CountTemporaries(static_cast<size_t>(temporary_bytes));
}

void CheckProgramFits(int device, int64_t bytes, const std::string& description) {
  CheckMemoryLimit(device, bytes, description.empty() ? std::string("a program") : description);
}

void SetMemoryLimit(int device, int64_t bytes) {
  MemoryOf(device).limit_bytes.store(std::max<int64_t>(bytes, 0));
}

int64_t MemoryLimit(int device) { return MemoryOf(device).limit_bytes.load(); }

std::vector<LiveBuffer> LiveBuffers(int device, bool launch_recorded_work) {
  if (launch_recorded_work) LaunchRecordedWork();
  std::vector<LiveBuffer> live = CountedBuffers::Get().Live(device);
  std::stable_sort(live.begin(), live.end(),
                   [](const LiveBuffer& a, const LiveBuffer& b) { return a.bytes > b.bytes; });
  return live;
}

std::map<std::string, int64_t> MemoryStats(int device) {
  LaunchRecordedWork();
  const DeviceStats stats = MemoryOf(device).Snapshot();
  std::map<std::string, int64_t> flat;
  const auto add = [&flat](const std::string& name, const StatArray& array) {
    static const char* pools[] = {"all", "small_pool", "large_pool"};
    for (size_t pool = 0; pool < array.size(); ++pool) {
      const std::string prefix = name + "." + pools[pool] + ".";
      flat[prefix + "current"] = array[pool].current;
      flat[prefix + "peak"] = array[pool].peak;
      flat[prefix + "allocated"] = array[pool].allocated;
      flat[prefix + "freed"] = array[pool].freed;
    }
  };
  add("allocation", stats.allocation);
  add("segment", stats.segment);
  add("active", stats.active);
  add("inactive_split", stats.inactive_split);
  add("allocated_bytes", stats.allocated_bytes);
  add("reserved_bytes", stats.reserved_bytes);
  add("active_bytes", stats.active_bytes);
  add("inactive_split_bytes", stats.inactive_split_bytes);
  add("requested_bytes", stats.requested_bytes);
  for (const auto& [name, stat] : {std::pair<const char*, const c10::CachingAllocator::Stat&>{
                                       "oversize_allocations", stats.oversize_allocations},
                                   {"oversize_segments", stats.oversize_segments}}) {
    for (const auto& [metric, value] : {std::pair<const char*, int64_t>{"current", stat.current},
                                        {"peak", stat.peak},
                                        {"allocated", stat.allocated},
                                        {"freed", stat.freed}}) {
      flat[std::string(name) + "." + metric] = value;
    }
  }
  flat["max_split_size"] = stats.max_split_size;
  flat["num_alloc_retries"] = stats.num_alloc_retries;
  flat["num_ooms"] = stats.num_ooms;
  flat["num_sync_all_streams"] = stats.num_sync_all_streams;
  flat["num_device_alloc"] = stats.num_device_alloc;
  flat["num_device_free"] = stats.num_device_free;
  // Not in CUDA's statistics: the most temporaries one program run held since the last reset
  // (they count in the byte peaks above while the program runs).
  flat["program_temporary_bytes.all.peak"] = MemoryOf(device).LargestTemporariesPeak();
  flat["memory_limit_bytes"] = MemoryOf(device).limit_bytes.load();
  return flat;
}

void ResetPeakMemoryStats(int device) {
  LaunchRecordedWork();
  MemoryOf(device).ResetPeak();
}

void ResetAccumulatedMemoryStats(int device) {
  LaunchRecordedWork();
  MemoryOf(device).ResetAccumulated();
}

MemoryCapacity QueryMemoryCapacity(int device) {
  const Runtime& device_runtime = Runtime::Get();
  TORCH_CHECK(device >= 0 && static_cast<size_t>(device) < device_runtime.device_count(),
              "invalid tpu device index ", device, " (", device_runtime.device_count(),
              " devices)");
  if (auto capacity = PluginCapacity(device_runtime, device)) return *capacity;
  return HostCapacity();
}

}  // namespace torch_tpu::runtime
