#include "runtime/generator.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <vector>

#include "runtime/device.h"

namespace torch_tpu::runtime {
namespace {

constexpr uint64_t kDefaultSeed = 67280421310721ull;  // PyTorch's default seed
// Each op may draw up to 2^32 counter blocks: far more than any single tensor needs.
constexpr uint64_t kOffsetStep = uint64_t{1} << 32;

}  // namespace

TpuGenerator::TpuGenerator(c10::DeviceIndex device_index)
    : TpuGenerator(device_index, c10::make_intrusive<TpuGeneratorState>()) {
  state_->seed = kDefaultSeed;
}

TpuGenerator::TpuGenerator(c10::DeviceIndex device_index,
                           c10::intrusive_ptr<TpuGeneratorState> state)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device_index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      state_(std::move(state)) {}

void TpuGenerator::set_current_seed(uint64_t seed) {
  state_->seed = seed;
  state_->offset = 0;
}
uint64_t TpuGenerator::current_seed() const { return state_->seed; }
uint64_t TpuGenerator::seed() {
  const uint64_t random = c10::detail::getNonDeterministicRandom(/*is_cuda=*/true);
  set_current_seed(random);
  return random;
}
void TpuGenerator::set_offset(uint64_t offset) { state_->offset = offset; }
uint64_t TpuGenerator::get_offset() const { return state_->offset; }

// State layout (a CPU uint8 tensor of 16 bytes, like CUDA's): seed then offset.
void TpuGenerator::set_state(const c10::TensorImpl& new_state) {
  // CUDA's checks and messages: a CPU ByteTensor (TypeError otherwise, a tpu tensor included),
  // contiguous, of the state's size or the seed's alone (offset 0), as CUDA's older states are.
  at::detail::check_rng_state(new_state);
  const int64_t size = new_state.numel();
  TORCH_CHECK(size == 16 || size == 8, "RNG state is wrong size");
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&state_->seed, bytes, 8);
  state_->offset = 0;
  if (size == 16) std::memcpy(&state_->offset, bytes + 8, 8);
}

c10::intrusive_ptr<c10::TensorImpl> TpuGenerator::get_state() const {
  // A real CPU tensor even under FakeTensorMode or FunctionalTensorMode (empty_cpu does not
  // dispatch), as CUDA's generator does: graph-safe RNG asks for the state while tracing, and the
  // state describes the generator, not a traced value.
  at::Tensor state = at::detail::empty_cpu({16}, at::kByte, /*pin_memory=*/false,
                                           /*memory_format_opt=*/std::nullopt);
  std::memcpy(state.data_ptr<uint8_t>(), &state_->seed, 8);
  std::memcpy(state.data_ptr<uint8_t>() + 8, &state_->offset, 8);
  return state.getIntrusivePtr();
}

void TpuGenerator::graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& new_state) {
  const auto* tpu = dynamic_cast<const TpuGenerator*>(new_state.get());
  TORCH_CHECK(tpu != nullptr, "graphsafe_set_state: expected a tpu generator, got one for ",
              new_state ? new_state->device() : c10::Device(c10::DeviceType::CPU));
  state_ = tpu->state_;
}

c10::intrusive_ptr<c10::GeneratorImpl> TpuGenerator::graphsafe_get_state() const {
  return c10::make_intrusive<TpuGenerator>(device().index(), state_);
}

std::pair<uint64_t, uint64_t> TpuGenerator::Reserve() {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::pair<uint64_t, uint64_t> state{state_->seed, state_->offset};
  state_->offset += kOffsetStep;
  return state;
}

TpuGenerator* TpuGenerator::clone_impl() const {
  auto copy = c10::make_intrusive<TpuGeneratorState>();
  copy->seed = state_->seed;
  copy->offset = state_->offset;
  return new TpuGenerator(device().index(), std::move(copy));
}

const at::Generator& DefaultGenerator(c10::DeviceIndex device_index) {
  static std::vector<at::Generator> generators = [] {
    std::vector<at::Generator> all;
    const int count = std::max(DeviceCount(), 1);
    for (int i = 0; i < count; ++i) {
      all.push_back(at::make_generator<TpuGenerator>(static_cast<c10::DeviceIndex>(i)));
    }
    return all;
  }();
  const c10::DeviceIndex index = device_index < 0 ? CurrentDevice() : device_index;
  TORCH_CHECK(index < static_cast<c10::DeviceIndex>(generators.size()),
              "tpu: no generator for device ", index);
  return generators[index];
}

TpuGenerator* ResolveGenerator(const std::optional<at::Generator>& generator) {
  const at::Generator& chosen =
      generator.has_value() && generator->defined() ? *generator : DefaultGenerator(-1);
  TORCH_CHECK(chosen.device().is_privateuseone(), "expected a tpu generator, got one for ",
              chosen.device());
  return at::check_generator<TpuGenerator>(chosen);
}

}  // namespace torch_tpu::runtime
