// torch.profiler integration: a Kineto activity profiler for the PrivateUse1 device, registered
// through PyTorch's PrivateUse1ProfilerRegistry. When a profile asks for
// ProfilerActivity.PrivateUse1, Kineto opens a session of it: recording of device work
// (profiler/device_trace.h) is on from the session's start to its stop, and the recorded events
// become Kineto activities on one process per device ("tpu:N"), one row per kind (programs,
// transfers, compiles, collectives), each linked to the CPU op that launched it. PyTorch turns
// those links into the device time of key_averages() and the "External id" of the Chrome trace.
#pragma once

namespace torch_tpu::profiler {

// Registers the activity profiler with PyTorch (once; at module import).
void RegisterKinetoProfiler();

// Whether PyTorch has handed our profiler to Kineto (after the first profile starts).
bool KinetoProfilerRegistered();

}  // namespace torch_tpu::profiler
