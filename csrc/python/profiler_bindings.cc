#include "python/profiler_bindings.h"

#include "profiler/device_trace.h"
#include "profiler/kineto_session.h"

namespace torch_tpu::python {

void BindProfiler(pybind11::module_& module) {
  profiler::RegisterKinetoProfiler();
  module.def("_profiler_registered_with_kineto", &profiler::KinetoProfilerRegistered,
             "Whether PyTorch handed the tpu activity profiler to Kineto (after the first "
             "profile with ProfilerActivity.PrivateUse1 began).");
  module.def("_profiler_recording", &profiler::Active,
             "Whether a torch.profiler session records tpu device work now.");
}

}  // namespace torch_tpu::python
