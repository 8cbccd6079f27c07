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

// The most loaded executables a cache may keep now: unbounded until mappings pass half the limit;
// then what fits in about 40% of it, at the mappings per executable measured then (at least 64),
// for the rest of the process. Caches use the smaller of this and their configured bound.
// Checks the mappings every 32 calls (reading /proc/self/maps costs about a microsecond per
// mapping); call it when a cache is about to hold one more executable, outside the cache's lock.
size_t LoadedExecutableCap();

}  // namespace torch_tpu::runtime
