// Fault injection for tests (torch_tpu.testing.inject_failure): makes the next N steps of one kind
// fail exactly as the plugin or a cache store would, so tests can check that every mode keeps
// working, names what failed, counts it and never lets a tensor read a value it should not have.
// The check is one relaxed atomic load when nothing is armed, so it may sit on hot paths.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

namespace torch_tpu::runtime {

enum class FaultSite { kCompile, kExecute, kTransfer, kStoreRead, kStoreWrite };
inline constexpr int kFaultSiteCount = 5;

// "compile", "execute", "transfer", "store_read", "store_write"; nullopt for other names.
std::optional<FaultSite> FaultSiteNamed(const std::string& name);
const char* FaultSiteName(FaultSite site);

// Arms `count` failures of `site` (added to what is armed already); count 0 disarms it.
void InjectFailures(FaultSite site, int64_t count);
// Failures of `site` still armed.
int64_t InjectedFailuresPending(FaultSite site);

namespace internal {
extern std::atomic<int64_t> armed_failures[kFaultSiteCount];
bool ConsumeArmedFailure(FaultSite site);
}  // namespace internal

// True (and one armed failure used up, counted in metrics()["injected_failures"]) when the
// current step of `site` must fail.
inline bool ShouldInjectFailure(FaultSite site) {
  if (internal::armed_failures[static_cast<int>(site)].load(std::memory_order_relaxed) <= 0) {
    return false;
  }
  return internal::ConsumeArmedFailure(site);
}

// The message an injected failure carries: "injected <site> failure (torch_tpu.testing)".
std::string InjectedFailureMessage(FaultSite site);

}  // namespace torch_tpu::runtime
