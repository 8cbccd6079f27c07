// Host memory for tensor.pin_memory() / DataLoader(pin_memory=True). PJRT copies from any host
// memory, so "pinned" tensors are ordinary page-aligned CPU allocations that we track, so that
// is_pinned() answers truthfully and non_blocking copies work.
#pragma once

#include <c10/core/Allocator.h>

namespace torch_tpu::runtime {

c10::Allocator* PinnedHostAllocator();
bool IsPinnedHostPointer(const void* data);

}  // namespace torch_tpu::runtime
