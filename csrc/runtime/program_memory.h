// The compiler's memory accounting of every program this process has run and still holds (its
// temporaries, outputs, arguments, code), named after the op or graph that first ran it: what
// torch.tpu.program_memory_stats(), memory_summary() and out-of-memory messages list.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pjrt/compiled_memory.h"
#include "pjrt/executable.h"

namespace torch_tpu::runtime {

struct ProgramMemory {
  std::string description;
  pjrt::CompiledMemoryStats stats;
};

// Called at a program's first run. Programs whose plugin reports no statistics are skipped.
void RecordProgramMemory(const std::shared_ptr<pjrt::PjrtLoadedExecutable>& executable,
                         const std::string& description);

// Programs still loaded, most temporaries first (at most `limit`; 0: all).
std::vector<ProgramMemory> LiveProgramMemory(size_t limit = 0);

}  // namespace torch_tpu::runtime
