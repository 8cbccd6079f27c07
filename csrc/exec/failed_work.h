// What work that failed leaves behind (docs/semantics.md, "What failures do to tensors"). Work
// that cannot run, or that the device failed, leaves a failed buffer carrying the error in every
// storage it would have written: reading such a storage raises the error, and programs reading
// it fail, as after a device fault. No storage keeps a stale value or reads as zeros.
#pragma once

#include <cstddef>
#include <string>

#include "pjrt/event.h"
#include "runtime/storage_buffer.h"
#include "stablehlo/element_type.h"

namespace torch_tpu::exec {

// Contents for a storage of `nbytes` (on `device`) that work failed to write: a failed buffer of
// `type` elements carrying `failure`. Throws when the plugin cannot create one.
runtime::StorageContents FailedContents(size_t nbytes, stablehlo::ElementType type, int device,
                                        const std::string& failure);

// An event on `device` that completes with `failure`, for failed work that reports through the
// same channel as a run (PendingWork in strict mode, the wait after each op in debug mode).
pjrt::PjrtEvent FailedEvent(int device, const std::string& failure);

}  // namespace torch_tpu::exec
