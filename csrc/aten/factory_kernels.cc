// Factories whose size depends on argument values: the host computes the size (as PyTorch does),
// then the device fills the values.
#include <ATen/Dispatch.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "exec/eager.h"
#include "lowering/registry.h"
#include "runtime/generator.h"

namespace torch_tpu::aten {
namespace {

const lowering::LoweringFunction& Lowering(const char* name) {
  return lowering::LoweringRegistry::Get().Function(name);
}

at::Tensor& ArangeOut(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step,
                      at::Tensor& out) {
  TORCH_CHECK_NOT_IMPLEMENTED(out.scalar_type() != at::kBool && !out.is_complex(),
                              "arange: not implemented for '", c10::toString(out.scalar_type()),
                              "'");
  const bool floating = c10::isFloatingType(out.scalar_type());
  // PyTorch's own sizing: from the untruncated bounds in double, except for int64 results, whose
  // bounds are truncated first (doubles cannot hold every int64).
  const int64_t size = out.scalar_type() == at::kLong
                           ? at::native::compute_arange_size<int64_t>(start, end, step)
                           : at::native::compute_arange_size<double>(start, end, step);
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
  TORCH_CHECK_NOT_IMPLEMENTED(out.scalar_type() != at::kBool,
                              "linspace: not implemented for 'Bool'");
  at::native::resize_output(out, {steps});
  if (steps == 0) return out;
  // Integer results interpolate between the bounds converted to the result type first, as on CPU
  // (so linspace(0.6, 2.4, 4, dtype=int) steps from 0 to 2).
  c10::Scalar first = start, last = end;
  if (c10::isIntegralType(out.scalar_type(), /*includeBool=*/false)) {
    AT_DISPATCH_INTEGRAL_TYPES(out.scalar_type(), "linspace", [&] {
      first = c10::Scalar(static_cast<int64_t>(start.to<scalar_t>()));
      last = c10::Scalar(static_cast<int64_t>(end.to<scalar_t>()));
    });
  }
  exec::EagerLaunch launch("aten::linspace.out");
  launch.AddScalar(first);
  launch.AddScalar(last);
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

// randperm(n, generator, out): CPU's checks on n for out's dtype, then a device permutation.
at::Tensor& RandpermOut(int64_t n, std::optional<at::Generator> generator, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "randperm", [&] {
    if constexpr (std::is_integral_v<scalar_t>) {
      // CPU converts n - 1, the largest value, to the type.
      TORCH_CHECK(n == 0 || !c10::overflows<scalar_t>(n - 1), "value cannot be converted to type ",
                  std::is_signed_v<scalar_t> ? "int" : "uint", sizeof(scalar_t) * 8,
                  "_t without overflow");
    } else if constexpr (!std::is_same_v<scalar_t, at::BFloat16>) {  // CPU lets bf16 round
      constexpr int digits = std::numeric_limits<scalar_t>::digits;
      TORCH_CHECK(n <= (int64_t{1} << digits) + 1, "n cannot be greater than ",
                  digits == 11 ? "2049" : "2^" + std::to_string(digits) + "+1", " for ",
                  out.scalar_type(), " type.");
    }
  });
  at::native::resize_output(out, {n});
  if (n == 0) return out;
  exec::EagerLaunch launch("aten::randperm.generator_out");
  const auto [seed, offset] = runtime::ResolveGenerator(generator)->Reserve();
  launch.AddRngState(seed, offset);
  launch.AddStatic(n);
  launch.WriteResultTo(0, out, /*check_cast=*/false);
  launch.Run(Lowering("torch_tpu::randperm"));
  return out;
}

at::Tensor& EyeSquareOut(int64_t n, at::Tensor& out) { return EyeOut(n, n, out); }

// tril_indices / triu_indices: CPU's element count, then the coordinates computed on the device.
// `op_name` is "aten::tril_indices" or "aten::triu_indices".
at::Tensor TriangleIndices(const char* op_name, bool lower, int64_t row, int64_t col,
                           int64_t offset, std::optional<at::ScalarType> dtype,
                           std::optional<at::Layout> layout, std::optional<at::Device> device,
                           std::optional<bool> pin_memory) {
  at::native::check_args(row, col, layout);
  const int64_t size = lower ? at::native::get_tril_size(row, col, offset)
                             : row * col - at::native::get_tril_size(row, col, offset - 1);
  at::Tensor out = at::empty(
      {2, size},
      at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory));
  const at::ScalarType result_type = out.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(result_type == at::kInt || result_type == at::kLong, "\"",
                              op_name + 6, "\" not implemented for '", c10::toString(result_type),
                              "'");
  if (size == 0) return out;
  exec::EagerLaunch launch(op_name);
  launch.AddStatic(row);
  launch.AddStatic(col);
  launch.AddStatic(offset);
  launch.AddStatic(lower);
  launch.AddStatic(size);
  launch.WriteResultTo(0, out, /*check_cast=*/false);
  launch.Run(Lowering("torch_tpu::triangle_indices"));
  return out;
}

at::Tensor TrilIndices(int64_t row, int64_t col, int64_t offset,
                       std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                       std::optional<at::Device> device, std::optional<bool> pin_memory) {
  return TriangleIndices("aten::tril_indices", true, row, col, offset, dtype, layout, device,
                         pin_memory);
}

at::Tensor TriuIndices(int64_t row, int64_t col, int64_t offset,
                       std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                       std::optional<at::Device> device, std::optional<bool> pin_memory) {
  return TriangleIndices("aten::triu_indices", false, row, col, offset, dtype, layout, device,
                         pin_memory);
}

// Autograd's zero gradients (e.g. sgn's at 0). CPU and CUDA return a storage-less tensor under
// the ZeroTensor key; materialized zeros have the same values and need no ZeroTensor support in
// every kernel that may receive them.
at::Tensor EfficientZeroTensor(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory) {
  return at::zeros_symint(
      size, at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(
                pin_memory));
}

// scalar_tensor, which also makes the tensors Python writes by indexing (`x[i] = 1e10`): like
// CPU's, it checks conversions for overflow except to half types, which round (to inf).
at::Tensor ScalarTensor(const c10::Scalar& value, std::optional<at::ScalarType> dtype,
                        std::optional<at::Layout> layout, std::optional<at::Device> device,
                        std::optional<bool> pin_memory) {
  const auto options =
      at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory);
  c10::Scalar rounded = value;
  const at::ScalarType type = c10::typeMetaToScalarType(options.dtype());
  if (type == at::kHalf) {
    rounded = c10::Scalar(static_cast<double>(static_cast<c10::Half>(value.toDouble())));
  } else if (type == at::kBFloat16) {
    rounded = c10::Scalar(static_cast<double>(static_cast<c10::BFloat16>(value.toDouble())));
  }
  return at::empty({}, options).fill_(rounded);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("arange.start_out", ArangeOut);
  m.impl("scalar_tensor", ScalarTensor);
  m.impl("_efficientzerotensor", EfficientZeroTensor);
  m.impl("linspace.out", LinspaceOut);
  m.impl("logspace.out", LogspaceOut);
  m.impl("eye.m_out", EyeOut);
  m.impl("eye.out", EyeSquareOut);
  m.impl("randperm.generator_out", RandpermOut);
  m.impl("tril_indices", TrilIndices);
  m.impl("triu_indices", TriuIndices);
}

}  // namespace
}  // namespace torch_tpu::aten
