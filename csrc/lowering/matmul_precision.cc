#include "lowering/matmul_precision.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

namespace torch_tpu::lowering {
namespace {

// Precisions as int8 (MatmulPrecision's values), or kUnsignedMatmulPrecision.
std::vector<int8_t>& Overrides() {
  thread_local std::vector<int8_t> overrides;
  return overrides;
}

thread_local int unsigned_reads_setting = 0;

MatmulPrecision SettingPrecision() {
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGHEST:
      return MatmulPrecision::kHighest;
    case at::Float32MatmulPrecision::HIGH:
      return MatmulPrecision::kHigh;
    case at::Float32MatmulPrecision::MEDIUM:
      return MatmulPrecision::kDefault;
  }
  return MatmulPrecision::kHighest;
}

// The lowerings known to read the precision, by address: an open-addressing set that launches
// probe without a lock (a handful of entries: products, convolutions, attention). Should it
// ever fill, every launch signs the precision, as before this set existed.
class Readers {
 public:
  bool Contains(const void* lowering) const {
    if (full_.load(std::memory_order_acquire)) return true;
    for (size_t i = Start(lowering), probes = 0; probes < kSize; i = (i + 1) % kSize, ++probes) {
      const void* entry = entries_[i].load(std::memory_order_acquire);
      if (entry == lowering) return true;
      if (entry == nullptr) return false;
    }
    return false;
  }

  void Add(const void* lowering) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Contains(lowering)) return;
    if (count_ + 1 > kSize / 2) {
      full_.store(true, std::memory_order_release);
      return;
    }
    size_t i = Start(lowering);
    while (entries_[i].load(std::memory_order_relaxed) != nullptr) i = (i + 1) % kSize;
    entries_[i].store(lowering, std::memory_order_release);
    ++count_;
  }

 private:
  static constexpr size_t kSize = 256;
  static size_t Start(const void* lowering) {
    const auto bits = reinterpret_cast<uintptr_t>(lowering);
    return static_cast<size_t>((bits >> 4) * 0x9e3779b97f4a7c15ULL >> 56) % kSize;
  }
  std::array<std::atomic<const void*>, kSize> entries_{};
  std::atomic<bool> full_{false};
  std::mutex mutex_;
  size_t count_ = 0;
};

Readers& KnownReaders() {
  static Readers* readers = new Readers();  // never destroyed: launches may run during exit
  return *readers;
}

}  // namespace

MatmulPrecision CurrentMatmulPrecision() {
  const std::vector<int8_t>& overrides = Overrides();
  if (!overrides.empty()) {
    if (overrides.back() != kUnsignedMatmulPrecision) {
      return static_cast<MatmulPrecision>(overrides.back());
    }
    if (unsigned_reads_setting == 0) throw UnsignedMatmulPrecisionRead();
  }
  return SettingPrecision();
}

int8_t MatmulPrecisionToSign(const void* lowering) {
  const std::vector<int8_t>& overrides = Overrides();
  if (!overrides.empty() && overrides.back() != kUnsignedMatmulPrecision) return overrides.back();
  if (!KnownReaders().Contains(lowering)) return kUnsignedMatmulPrecision;
  return static_cast<int8_t>(SettingPrecision());
}

void MarkReadsMatmulPrecision(const void* lowering) { KnownReaders().Add(lowering); }

void PushMatmulPrecision(MatmulPrecision precision) {
  Overrides().push_back(static_cast<int8_t>(precision));
}

void PopMatmulPrecision() {
  std::vector<int8_t>& overrides = Overrides();
  TORCH_CHECK(!overrides.empty(), "torch.tpu.precision: no precision to restore on this thread");
  overrides.pop_back();
}

MatmulPrecisionScope::MatmulPrecisionScope(int8_t signed_precision) {
  Overrides().push_back(signed_precision);
}

UnsignedMatmulPrecisionReadsSetting::UnsignedMatmulPrecisionReadsSetting() {
  ++unsigned_reads_setting;
}

UnsignedMatmulPrecisionReadsSetting::~UnsignedMatmulPrecisionReadsSetting() {
  --unsigned_reads_setting;
}

MatmulPrecision MatmulPrecisionFor(c10::ScalarType dtype) {
  if (dtype == c10::kFloat || dtype == c10::kComplexFloat) return CurrentMatmulPrecision();
  return MatmulPrecision::kHighest;
}

const char* MatmulPrecisionName(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::kDefault:
      return "default";
    case MatmulPrecision::kHigh:
      return "high";
    case MatmulPrecision::kHighest:
      return "highest";
  }
  return "?";
}

}  // namespace torch_tpu::lowering
