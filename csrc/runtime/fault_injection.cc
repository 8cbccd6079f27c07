#include "runtime/fault_injection.h"

#include "runtime/metrics.h"

namespace torch_tpu::runtime {
namespace {

constexpr const char* kSiteNames[kFaultSiteCount] = {"compile", "execute", "transfer",
                                                      "store_read", "store_write"};

}  // namespace

namespace internal {
std::atomic<int64_t> armed_failures[kFaultSiteCount] = {};

bool ConsumeArmedFailure(FaultSite site) {
  std::atomic<int64_t>& armed = armed_failures[static_cast<int>(site)];
  int64_t left = armed.load();
  // Several threads may race for the last armed failure: exactly one of them gets it.
  while (left > 0) {
    if (armed.compare_exchange_weak(left, left - 1)) {
      Metrics::Get().RecordReason("injected_failures", FaultSiteName(site));
      return true;
    }
  }
  return false;
}
}  // namespace internal

std::optional<FaultSite> FaultSiteNamed(const std::string& name) {
  for (int i = 0; i < kFaultSiteCount; ++i) {
    if (name == kSiteNames[i]) return static_cast<FaultSite>(i);
  }
  return std::nullopt;
}

const char* FaultSiteName(FaultSite site) { return kSiteNames[static_cast<int>(site)]; }

void InjectFailures(FaultSite site, int64_t count) {
  std::atomic<int64_t>& armed = internal::armed_failures[static_cast<int>(site)];
  if (count <= 0) {
    armed.store(0);
  } else {
    armed.fetch_add(count);
  }
}

int64_t InjectedFailuresPending(FaultSite site) {
  return internal::armed_failures[static_cast<int>(site)].load();
}

std::string InjectedFailureMessage(FaultSite site) {
  return std::string("injected ") + FaultSiteName(site) + " failure (torch_tpu.testing)";
}

}  // namespace torch_tpu::runtime
