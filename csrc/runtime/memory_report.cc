#include "runtime/memory_report.h"

#include <cstdio>
#include <iterator>
#include <map>
#include <vector>

#include "runtime/program_memory.h"
#include "runtime/storage.h"

namespace torch_tpu::runtime {
namespace {

constexpr size_t kListed = 5;
constexpr size_t kDescriptionCharacters = 96;

}  // namespace

std::string FormatBytes(int64_t bytes) {
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
  return text;
}

std::string ShortDescription(const std::string& description) {
  std::string line = description.substr(0, description.find('\n'));
  if (line.size() > kDescriptionCharacters) line = line.substr(0, kDescriptionCharacters - 3) + "...";
  return line;
}

std::string OutOfMemoryDetails(int device) {
  std::string text;
  // Buffers of the same producer and size are listed once with a count: a model's parameters
  // would otherwise fill the list with one line each.
  const std::vector<LiveBuffer> buffers = LiveBuffers(device, /*launch_recorded_work=*/false);
  if (!buffers.empty()) {
    std::map<std::pair<int64_t, std::string>, int, std::greater<>> groups;
    int64_t total = 0;
    for (const LiveBuffer& buffer : buffers) {
      total += buffer.bytes;
      const std::string producer = buffer.producer ? ShortDescription(*buffer.producer)
                                                   : std::string("a copy to the device");
      ++groups[{buffer.bytes, producer}];
    }
    text += "\nLargest live buffers on tpu:" + std::to_string(device) + " (" +
            std::to_string(buffers.size()) + " hold " + FormatBytes(total) + "):";
    size_t listed = 0;
    for (const auto& [key, count] : groups) {
      if (listed++ == kListed) break;
      text += "\n  " + FormatBytes(key.first) + (count > 1 ? " x" + std::to_string(count) : "") +
              " from " + key.second;
    }
  }
  const std::vector<ProgramMemory> programs = LiveProgramMemory(kListed);
  bool header = false;
  for (const ProgramMemory& program : programs) {
    if (program.stats.temporaries <= 0) continue;
    if (!header) text += "\nPrograms needing the most temporaries while they run:";
    header = true;
    text += "\n  " + FormatBytes(program.stats.temporaries) + " " +
            ShortDescription(program.description);
  }
  if (!text.empty()) {
    text += "\nFree tensors (del, or set_to_none gradients) and retry; torch.tpu.memory_summary() "
            "lists the rest.";
  }
  return text;
}

}  // namespace torch_tpu::runtime
