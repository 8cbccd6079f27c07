// Whole-storage operations that are not ops of any tensor: transfers and resizing.
#pragma once

#include <cstddef>
#include <functional>

#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

// Contents for a storage of `new_nbytes` holding the first bytes of `old` (zeros beyond).
// The resize runs on `device` and is tracked like any launch (synchronize() waits for it).
runtime::StorageContents ResizeStorage(const runtime::StorageContents& old, size_t old_nbytes,
                                       size_t new_nbytes, int device);

// Replaces the storage's contents with `nbytes` of host data of `type` (async: the host memory
// must stay valid until the returned contents' buffer is ready; we copy during the call). Throws
// when the transfer fails (torch_tpu.testing's "transfer" failures too).
runtime::StorageContents UploadStorage(const void* data, size_t nbytes, stablehlo::ElementType type,
                                       int device);

// Whether the storages of `device` hold their values in this process's memory (the XLA CPU
// plugin), so that host code can read them in place and lend them memory (LendHostMemory).
bool StoragesAreHostMemory(int device);

// Contents that use `nbytes` of host memory at `data` in place, without a copy (only where
// StoragesAreHostMemory): `release` runs when no buffer or execution uses the memory any more.
runtime::StorageContents LendHostMemory(void* data, size_t nbytes, stablehlo::ElementType type,
                                        int device, std::function<void()> release);

// The contents of a storage on another device, copied there (asynchronously).
runtime::StorageContents CopyStorageToDevice(const runtime::StorageContents& contents, int device);

// Copies the whole storage to host memory (blocking; throws device errors, failed transfers, and
// the first failed device-side check of launched work, since a host read is a synchronization
// point).
void DownloadStorage(const runtime::StorageContents& contents, void* destination, size_t nbytes);

}  // namespace torch_tpu::exec
