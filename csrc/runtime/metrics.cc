#include "runtime/metrics.h"

namespace torch_tpu::runtime {

Metrics& Metrics::Get() {
  static Metrics metrics;
  return metrics;
}

bool Metrics::RecordFallback(const std::string& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++fallback_ops_[op];
  // Warn once per op per process, even across reset_metrics(): the warning is for the user.
  return warned_.emplace(op, true).second;
}

std::map<std::string, int64_t> Metrics::fallback_ops() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fallback_ops_;
}

void Metrics::RecordReason(const std::string& counter, const std::string& reason,
                           int64_t amount) {
  std::lock_guard<std::mutex> lock(mutex_);
  reasons_[counter][reason] += amount;
}

std::map<std::string, std::map<std::string, int64_t>> Metrics::reasons() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reasons_;
}

void Metrics::Reset() {
  for (auto* counter : {&compile_count, &compile_nanoseconds, &quick_compiles, &tier_up_compiles,
                        &tier_up_nanoseconds, &tiered_up_programs, &execute_count,
                        &cache_hits_memory, &cache_hits_shared, &cache_hits_remote, &cache_misses,
                        &cache_corrupt_entries, &cache_preloaded, &transfer_to_device_bytes,
                        &transfer_to_host_bytes, &donated_buffers, &donated_bytes, &fused_graphs,
                        &fused_ops, &fused_programs, &fused_bucketed_ops, &fused_replays,
                        &device_collectives}) {
    counter->store(0);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  fallback_ops_.clear();
  reasons_.clear();
}

}  // namespace torch_tpu::runtime
