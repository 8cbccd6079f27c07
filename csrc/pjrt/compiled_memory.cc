#include "compiled_memory.h"

#include <cstddef>

#include "error.h"

namespace torch_tpu::pjrt {

CompiledMemoryStats ReadCompiledMemoryStats(const PJRT_Api* api, PJRT_Executable* executable) {
  if (api->struct_size <= offsetof(PJRT_Api, PJRT_Executable_GetCompiledMemoryStats) ||
      api->PJRT_Executable_GetCompiledMemoryStats == nullptr) {
    throw PjrtError(PJRT_Error_Code_UNIMPLEMENTED,
                    "the PJRT plugin does not implement PJRT_Executable_GetCompiledMemoryStats");
  }
  PJRT_Executable_GetCompiledMemoryStats_Args args{};
  args.struct_size = PJRT_Executable_GetCompiledMemoryStats_Args_STRUCT_SIZE;
  args.executable = executable;
  ThrowIfError(api, api->PJRT_Executable_GetCompiledMemoryStats(&args),
               "PJRT_Executable_GetCompiledMemoryStats");
  CompiledMemoryStats stats;
  stats.generated_code = args.generated_code_size_in_bytes;
  stats.arguments = args.argument_size_in_bytes;
  stats.outputs = args.output_size_in_bytes;
  stats.aliased = args.alias_size_in_bytes;
  stats.temporaries = args.temp_size_in_bytes;
  // We pass our header's struct_size; a plugin built against an older header leaves the newer
  // field untouched, so it stays 0 (zero-initialized above).
  stats.peak = args.peak_memory_in_bytes;
  return stats;
}

}  // namespace torch_tpu::pjrt
