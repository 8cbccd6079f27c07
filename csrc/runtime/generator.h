// The tpu random generator: a counter-based (seed, offset) pair. Every random op reserves a range
// of the counter and the device draws its bits from rng_bit_generator keyed by that state, so
// results depend only on the seed and the sequence of ops, like CUDA's Philox generator.
//
// The (seed, offset) pair lives in a shared state object so that graph-safe RNG (PyTorch's
// functionalization of random ops under torch.compile, torch/_prims/rng_prims.py) can point the
// default generator at another generator's state for one op (graphsafe_set_state), as CUDA does.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <mutex>
#include <utility>

namespace torch_tpu::runtime {

struct TpuGeneratorState final : c10::intrusive_ptr_target {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

class TpuGenerator final : public c10::GeneratorImpl {
 public:
  explicit TpuGenerator(c10::DeviceIndex device_index);
  TpuGenerator(c10::DeviceIndex device_index, c10::intrusive_ptr<TpuGeneratorState> state);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  // From now on draw from (and advance) `new_state`'s state object, shared with it.
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& new_state) override;
  // A generator sharing this one's state object (not a copy: clone() copies).
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override;

  // (seed, offset) for one random op; advances the offset so the next op gets fresh bits.
  std::pair<uint64_t, uint64_t> Reserve();
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  TpuGenerator* clone_impl() const override;
  c10::intrusive_ptr<TpuGeneratorState> state_;
};

const at::Generator& DefaultGenerator(c10::DeviceIndex device_index);
// The generator an op should use: `generator` if given, else the default of the current device.
TpuGenerator* ResolveGenerator(const std::optional<at::Generator>& generator);

}  // namespace torch_tpu::runtime
