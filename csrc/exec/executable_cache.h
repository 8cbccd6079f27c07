// Compiling StableHLO modules and keeping the loaded executables in process memory (tier 1 of
// the compilation cache). Keyed by the module text's structural hash plus the text itself, so a
// hash collision can never run the wrong program.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "pjrt/executable.h"
#include "stablehlo/module.h"

namespace torch_tpu::exec {

class ExecutableCache {
 public:
  static ExecutableCache& Get();

  // Returns the executable for `module`, compiling it on a miss. Compile errors throw with the
  // module text dumped to a file (path in the message).
  std::shared_ptr<pjrt::PjrtLoadedExecutable> GetOrCompile(const stablehlo::Module& module);
  void Clear();
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<pjrt::PjrtLoadedExecutable>> executables_;
};

}  // namespace torch_tpu::exec
