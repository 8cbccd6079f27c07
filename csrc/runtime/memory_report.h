// Text for out-of-memory errors: what holds the device's memory (the largest live buffers and the
// op or graph that produced each) and the programs that need the most while they run.
#pragma once

#include <cstdint>
#include <string>

namespace torch_tpu::runtime {

// "64.00 MiB", "512 bytes".
std::string FormatBytes(int64_t bytes);

// `description` cut to one readable line (op signatures can list dozens of operands).
std::string ShortDescription(const std::string& description);

// "\nLargest live buffers on tpu:N: ...\nPrograms needing the most temporaries: ..." (empty when
// there is nothing to list), appended to every tpu out-of-memory message.
std::string OutOfMemoryDetails(int device);

}  // namespace torch_tpu::runtime
