#include "python/distributed_bindings.h"

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "distributed/tpu_dist_backend.h"

namespace py = pybind11;

namespace torch_tpu::python {

void BindDistributed(py::module& module) {
  // Store and Backend arrive as the objects torch.distributed made (its pybind types); the
  // result is handed back as a torch.distributed Backend.
  module.def(
      "_create_tpu_dist_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout,
         const c10::intrusive_ptr<c10d::Backend>& host) -> c10::intrusive_ptr<c10d::Backend> {
        return c10::make_intrusive<distributed::TpuDistBackend>(store, rank, size, timeout, host);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("host"),
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace torch_tpu::python
