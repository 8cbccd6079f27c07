#include "runtime/program_memory.h"

#include <algorithm>
#include <mutex>

namespace torch_tpu::runtime {
namespace {

struct Entry {
  std::weak_ptr<pjrt::PjrtLoadedExecutable> executable;
  ProgramMemory memory;
};

class Registry {
 public:
  static Registry& Get() {
    static auto* registry = new Registry();  // never destroyed: programs may run at exit
    return *registry;
  }
  void Add(const std::shared_ptr<pjrt::PjrtLoadedExecutable>& executable,
           const std::string& description) {
    std::lock_guard<std::mutex> lock(mutex_);
    // Entries of evicted programs go when the list doubles, so it stays proportional to the
    // programs loaded (the caches bound those).
    if (entries_.size() >= 2 * live_after_prune_ + 64) {
      std::erase_if(entries_, [](const Entry& entry) { return entry.executable.expired(); });
      live_after_prune_ = entries_.size();
    }
    entries_.push_back(Entry{executable, ProgramMemory{description, *executable->memory_stats()}});
  }
  std::vector<ProgramMemory> Live(size_t limit) {
    std::vector<ProgramMemory> live;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const Entry& entry : entries_) {
        if (!entry.executable.expired()) live.push_back(entry.memory);
      }
    }
    std::stable_sort(live.begin(), live.end(), [](const ProgramMemory& a, const ProgramMemory& b) {
      return a.stats.temporaries > b.stats.temporaries;
    });
    if (limit != 0 && live.size() > limit) live.resize(limit);
    return live;
  }

 private:
  std::mutex mutex_;
  std::vector<Entry> entries_;
  size_t live_after_prune_ = 0;
};

}  // namespace

void RecordProgramMemory(const std::shared_ptr<pjrt::PjrtLoadedExecutable>& executable,
                         const std::string& description) {
  if (executable && executable->memory_stats()) Registry::Get().Add(executable, description);
}

std::vector<ProgramMemory> LiveProgramMemory(size_t limit) { return Registry::Get().Live(limit); }

}  // namespace torch_tpu::runtime
