// How many loaded executables the caches may keep: their configured bound, lowered for good once
// the process's memory mappings near the kernel's per-process limit (vm.max_map_count).
//
// Why: every loaded XLA:CPU executable holds JIT code in several mappings of its own (code,
// constants, data, a few per object file), so a long-lived process with thousands of cached
// programs reaches the limit. Past it, the JIT's mmap/mprotect fail with "Cannot allocate
// memory", and on that error path the JIT frees code whose .eh_frame stays registered with the
// unwinder: the next C++ exception anywhere in the process then reads unmapped memory and
// crashes. The only safe answer is never to get there: unload programs first (an evicted program
// is rebuilt from the cache tiers at its next use).
#pragma once

#include <cstddef>

namespace torch_tpu::runtime {

// `configured`, or less once mappings pass half the limit: then the cap keeps loaded executables
// at what fits in about 40% of the limit, at the mappings per executable measured then (never
// below kMinLoadedExecutables). Checks the mappings every kCheckEvery calls (reading
// /proc/self/maps costs about a microsecond per mapping); call it when a cache is about to hold
// one more executable, outside the cache's lock.
size_t LoadedExecutableCap(size_t configured);

constexpr size_t kMinLoadedExecutables = 64;

// The process's mappings now, and the kernel's limit on them (65530 when unreadable).
size_t ProcessMappingCount();
size_t ProcessMappingLimit();

}  // namespace torch_tpu::runtime
