// rrelu_with_noise writes its `noise` argument, which the generic lowered kernel cannot express
// (a functional schema that writes). As on CPU: in training, noise gets each element's random
// slope (1 for x > 0) in the same device program that computes the output; in evaluation it is
// left alone and the output is leaky_relu with the mean slope (lower + upper) / 2.
#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "exec/eager.h"
#include "lowering/registry.h"
#include "runtime/generator.h"

namespace torch_tpu::aten {
namespace {

// Writes into `out` when given (the out= and in-place forms), else returns a new tensor.
at::Tensor RreluWithNoiseInto(const at::Tensor& self, const at::Tensor& noise,
                              const c10::Scalar& lower, const c10::Scalar& upper, bool training,
                              const std::optional<at::Generator>& generator,
                              const at::Tensor* out) {
  TORCH_CHECK(self.sizes() == noise.sizes(),
              "noise tensor shape must match self tensor shape. Got self.shape = ", self.sizes(),
              " noise.shape = ", noise.sizes());
  if (!training) {
    // CPU's slope: the mean of the bounds computed as host 0-d tensors.
    const c10::Scalar slope =
        ((at::scalar_to_tensor(lower) + at::scalar_to_tensor(upper)) / 2).item();
    if (out == nullptr) return at::leaky_relu(self, slope);
    at::Tensor destination = *out;
    at::leaky_relu_out(destination, self, slope);
    return destination;
  }
  exec::EagerLaunch launch("aten::rrelu_with_noise");
  launch.AddTensor(self);
  launch.AddScalar(lower);
  launch.AddScalar(upper);
  const auto [seed, offset] = runtime::ResolveGenerator(generator)->Reserve();
  launch.AddRngState(seed, offset);
  if (out != nullptr) launch.WriteResultTo(0, *out);
  launch.WriteResultTo(1, noise);
  return launch.Run(lowering::LoweringRegistry::Get().Function("torch_tpu::rrelu_with_noise"))[0];
}

at::Tensor RreluWithNoise(const at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                          const c10::Scalar& upper, bool training,
                          std::optional<at::Generator> generator) {
  return RreluWithNoiseInto(self, noise, lower, upper, training, generator, nullptr);
}

at::Tensor& RreluWithNoiseInPlace(at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                                  const c10::Scalar& upper, bool training,
                                  std::optional<at::Generator> generator) {
  RreluWithNoiseInto(self, noise, lower, upper, training, generator, &self);
  return self;
}

at::Tensor& RreluWithNoiseOut(const at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                              const c10::Scalar& upper, bool training,
                              std::optional<at::Generator> generator, at::Tensor& out) {
  at::native::resize_output(out, self.sizes());
  RreluWithNoiseInto(self, noise, lower, upper, training, generator, &out);
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("rrelu_with_noise", RreluWithNoise);
  m.impl("rrelu_with_noise_", RreluWithNoiseInPlace);
  m.impl("rrelu_with_noise.out", RreluWithNoiseOut);
}

}  // namespace
}  // namespace torch_tpu::aten
