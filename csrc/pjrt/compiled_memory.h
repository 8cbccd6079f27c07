// What the compiler reports about a program's device memory (xla::CompiledMemoryStats), read
// through PJRT_Executable_GetCompiledMemoryStats. Used for honest peak statistics (a program's
// temporaries count while it runs) and by ahead-of-time compilation for TPU targets.
#pragma once

#include <cstdint>

#include "pjrt_c_api.h"

namespace torch_tpu::pjrt {

// In bytes.
struct CompiledMemoryStats {
  int64_t generated_code = 0;
  int64_t arguments = 0;
  int64_t outputs = 0;
  int64_t aliased = 0;  // argument bytes reused for outputs (donation)
  int64_t temporaries = 0;
  // The compiler's own peak; 0 when the plugin's struct predates the field.
  int64_t peak = 0;
};

// The statistics of `executable`. Throws PjrtError (UNIMPLEMENTED when the plugin lacks the call
// or does not report them).
CompiledMemoryStats ReadCompiledMemoryStats(const PJRT_Api* api, PJRT_Executable* executable);

}  // namespace torch_tpu::pjrt
