// The explicit CPU fallback: ops without a lowering run PyTorch's CPU kernel on copies of their
// tpu arguments, with a warning once per op and a count in torch_tpu.metrics()["fallback_ops"].
// TORCH_TPU_FALLBACK=error turns it into an error instead.
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>

#include "aten/fallback.h"
#include "aten/index_checks.h"
#include "aten/write_checks.h"
#include "exec/deferred_graph.h"
#include "exec/eager.h"
#include "runtime/metrics.h"

namespace torch_tpu::aten {
namespace {

bool FallbackForbidden() {
  const char* setting = std::getenv("TORCH_TPU_FALLBACK");
  return setting != nullptr && std::strcmp(setting, "error") == 0;
}

}  // namespace

void CpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.schema().operator_name();
  const std::string full_name =
      name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  TORCH_CHECK_NOT_IMPLEMENTED(!FallbackForbidden(), "tpu: ", full_name,
                              " has no tpu lowering, and TORCH_TPU_FALLBACK=error forbids running "
                              "it on the CPU");
  // The CPU kernel gets real inputs: the pending deferred graph runs first.
  exec::DeferredGraph::Get().Flush("fallback");
  if (runtime::Metrics::Get().RecordFallback(full_name)) {
    TORCH_WARN("tpu: ", full_name,
               " is not lowered to the device yet and runs on the CPU (its tensors are copied "
               "there and back). This is counted in torch_tpu.metrics()['fallback_ops'] and "
               "warned once per op.");
  }
  // The CPU kernel sees separate copies of aliased arguments, so it cannot see overlaps itself.
  const size_t count = op.schema().arguments().size();
  const std::vector<c10::IValue> arguments(stack->end() - count, stack->end());
  CheckWrites(op.schema(), arguments);
  if (exec::CurrentExecutionMode() == exec::ExecutionMode::kDebug) {
    CheckIndicesInDebugMode(full_name, arguments);
  }
  at::native::cpu_fallback(op, stack);
}

namespace {

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&CpuFallback>());
}

}  // namespace
}  // namespace torch_tpu::aten
