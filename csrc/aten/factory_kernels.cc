// Factories whose size depends on argument values: the host computes the size (as PyTorch does),
// then the device fills the values.
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/pow.h>
#include <torch/library.h>

#include <cmath>

#include "exec/eager.h"
#include "lowering/registry.h"

namespace torch_tpu::aten {
namespace {

const lowering::LoweringFunction& Lowering(const char* name) {
  return lowering::LoweringRegistry::Get().Function(name);
}

at::Tensor& ArangeOut(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step,
                      at::Tensor& out) {
  const bool floating = c10::isFloatingType(out.scalar_type());
  const double start_value = start.toDouble(), end_value = end.toDouble();
  const double step_value = step.toDouble();
  TORCH_CHECK(step_value != 0, "arange: step must be nonzero");
  TORCH_CHECK(std::isfinite(start_value) && std::isfinite(end_value), "arange: unsupported range: ",
              start_value, " -> ", end_value);
  TORCH_CHECK((step_value > 0 && end_value >= start_value) ||
                  (step_value < 0 && end_value <= start_value),
              "arange: upper bound and larger bound inconsistent with step sign");
  int64_t size;
  if (floating) {
    size = static_cast<int64_t>(std::ceil((end_value - start_value) / step_value));
  } else {
    const int64_t first = start.toLong(), last = end.toLong(), stride = step.toLong();
    size = (last - first + stride - (stride > 0 ? 1 : -1)) / stride;
  }
  at::native::resize_output(out, {size});
  if (size == 0) return out;
  exec::EagerLaunch launch("aten::arange.start_out");
  launch.AddScalar(start);
  launch.AddScalar(step);
  launch.AddStatic(size);
  launch.AddStatic(floating);
  launch.WriteResultTo(0, out, /*check_cast=*/false);
  launch.Run(Lowering("torch_tpu::arange"));
  return out;
}

at::Tensor& LinspaceOut(const c10::Scalar& start, const c10::Scalar& end, int64_t steps,
                        at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "linspace: number of steps must be non-negative");
  at::native::resize_output(out, {steps});
  if (steps == 0) return out;
  exec::EagerLaunch launch("aten::linspace.out");
  launch.AddScalar(start);
  launch.AddScalar(end);
  launch.AddStatic(steps);
  launch.WriteResultTo(0, out, /*check_cast=*/false);
  launch.Run(Lowering("torch_tpu::linspace"));
  return out;
}

// logspace: base ** linspace(start, end, steps), computed on the device in double.
at::Tensor& LogspaceOut(const c10::Scalar& start, const c10::Scalar& end, int64_t steps,
                        double base, at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "logspace: number of steps must be non-negative");
  at::native::resize_output(out, {steps});
  if (steps == 0) return out;
  at::Tensor exponents = at::empty({steps}, out.options().dtype(at::kDouble));
  LinspaceOut(start, end, steps, exponents);
  out.copy_(at::pow(base, exponents));
  return out;
}

at::Tensor& EyeOut(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "eye: n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "eye: m must be greater or equal to 0, got ", m);
  at::native::resize_output(out, {n, m});
  if (n == 0 || m == 0) return out;
  exec::EagerLaunch launch("aten::eye.m_out");
  launch.AddStatic(n);
  launch.AddStatic(m);
  launch.WriteResultTo(0, out, /*check_cast=*/false);
  launch.Run(Lowering("torch_tpu::eye"));
  return out;
}

at::Tensor& EyeSquareOut(int64_t n, at::Tensor& out) { return EyeOut(n, n, out); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("arange.start_out", ArangeOut);
  m.impl("linspace.out", LinspaceOut);
  m.impl("logspace.out", LogspaceOut);
  m.impl("eye.m_out", EyeOut);
  m.impl("eye.out", EyeSquareOut);
}

}  // namespace
}  // namespace torch_tpu::aten
