// Warm-start preloading. Loading an executable from the shared or persistent tier costs the
// plugin about a millisecond and a half, so a warm process that needs a hundred programs spends
// most of its first step loading them one by one as its ops ask. A process therefore records
// which programs it used, in first-use order, as a manifest in the cache under a name that
// identifies the program run (command line, working directory, the environment that shapes the
// runtime; torch_tpu/_preload.py). The next run under the same name starts loading them on a
// background thread at import, while the script is still importing and building its model.
//
// No manifest, no runtime: a process without one starts nothing at import. A forked child of a
// process that started preloading cannot use the device (as after the runtime started).
#pragma once

#include <string>

namespace torch_tpu::cache {

// Starts preloading the programs recorded under `name`; at most once per process.
void StartPreloading(const std::string& name);

// At exit: stops preloading, and stores this process's programs as the manifest `name` when
// they differ from what was preloaded. Only the process that started preloading (not a forked
// child) stores a manifest, and only `store` says it may.
void FinishPreloading(bool store);

}  // namespace torch_tpu::cache
