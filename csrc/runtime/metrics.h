// Process-wide counters behind torch_tpu.metrics(). Names are stable: tests and tools rely on them.
// A counter is declared together with the code that increments it, so metrics() never shows one
// that nothing counts.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace torch_tpu::runtime {

class Metrics {
 public:
  static Metrics& Get();

  std::atomic<int64_t> compile_count{0};
  std::atomic<int64_t> compile_nanoseconds{0};
  // Tiered compilation (exec/tiered_compilation.h): compiles at the quick tier (counted in
  // compile_count too); optimized compiles of programs already running quickly, which are not
  // (the program compiled once already); and programs whose runs switched to those.
  std::atomic<int64_t> quick_compiles{0};
  std::atomic<int64_t> tier_up_compiles{0};
  std::atomic<int64_t> tier_up_nanoseconds{0};
  std::atomic<int64_t> tiered_up_programs{0};
  std::atomic<int64_t> execute_count{0};
  // Compilation cache (csrc/cache): hits per tier, misses (programs found in no tier, so
  // compiled) and stored entries rejected as truncated, corrupted or foreign.
  std::atomic<int64_t> cache_hits_memory{0};
  std::atomic<int64_t> cache_hits_shared{0};
  std::atomic<int64_t> cache_hits_remote{0};
  std::atomic<int64_t> cache_misses{0};
  std::atomic<int64_t> cache_corrupt_entries{0};
  // Executables loaded ahead of their first use by warm-start preloading (cache/preload.h).
  std::atomic<int64_t> cache_preloaded{0};
  std::atomic<int64_t> transfer_to_device_bytes{0};
  std::atomic<int64_t> transfer_to_host_bytes{0};
  // Program inputs whose device buffer the program reused for an output (no copy, no second
  // buffer alive while it runs), and their bytes.
  std::atomic<int64_t> donated_buffers{0};
  std::atomic<int64_t> donated_bytes{0};
  // Defer-and-fuse: graphs run as one program, and the ops they held.
  std::atomic<int64_t> fused_graphs{0};
  std::atomic<int64_t> fused_ops{0};
  // Fused graphs whose program had to be built (no graph with their signature ran before in
  // this process), and ops recorded in their growing family's bucketed form
  // (exec/growing_shapes.h), which keeps a generation loop's graphs the same across lengths.
  std::atomic<int64_t> fused_programs{0};
  std::atomic<int64_t> fused_bucketed_ops{0};
  // Fused graphs that followed a step seen before to its end and ran its program without a
  // lookup (exec/deferred_replay.cc); the replays that did not are counted by kind in the
  // reasons of "fused_replay_divergences".
  std::atomic<int64_t> fused_replays{0};
  // tpu_dist collectives that ran as device programs (distributed/device_transport.h) rather
  // than through the host transport.
  std::atomic<int64_t> device_collectives{0};

  // One compilation that took `elapsed`.
  void RecordCompile(std::chrono::steady_clock::duration elapsed) {
    compile_nanoseconds += std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
    ++compile_count;
  }
  void RecordTierUp(std::chrono::steady_clock::duration elapsed) {
    tier_up_nanoseconds += std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
    ++tier_up_compiles;
  }

  // Returns true the first time `op` falls back (so the caller warns once per op).
  bool RecordFallback(const std::string& op);
  std::map<std::string, int64_t> fallback_ops() const;

  // Counters that say why: metrics()[counter] is a dict reason -> count (e.g.
  // "injected_failures": {"compile": 1}, "cache_rejected_entries": {"unsigned": 2}). A counter
  // appears in metrics() once something counted it. `amount` counts things other than events
  // (the padding elements of bucketed dynamic shapes).
  void RecordReason(const std::string& counter, const std::string& reason, int64_t amount = 1);
  std::map<std::string, std::map<std::string, int64_t>> reasons() const;
  void Reset();

 private:
  mutable std::mutex mutex_;
  std::map<std::string, int64_t> fallback_ops_;
  std::map<std::string, bool> warned_;
  std::map<std::string, std::map<std::string, int64_t>> reasons_;
};

}  // namespace torch_tpu::runtime
