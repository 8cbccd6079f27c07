// randperm on the device generator: the positions 0..n-1 sorted by 64-bit random keys (a stable
// sort, so the rare equal keys still give a permutation). Like CUDA's, the permutation differs from
// CPU's for the same seed; it depends only on the seed and the op order.
#include "lowering/context.h"
#include "lowering/registry.h"

namespace torch_tpu::lowering {
namespace {

// (int n): s64[n]; the caller writes it into `out` in out's dtype.
std::vector<Value> RandomPermutation(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const int64_t n = context.Int(operands[0]);
  Value keys = b.RngBitGenerator(context.rng_state(0), TensorType{ElementType::kU64, {n}},
                                 FunctionBuilder::RngAlgorithm::kThreeFry)
                   .second;
  Value positions = b.Iota(TensorType{ElementType::kS64, {n}}, 0);
  return {b.Sort({keys, positions}, 0, /*is_stable=*/true,
                 [](FunctionBuilder& body, std::span<const Value> args) {
                   return std::vector<Value>{body.Compare(args[0], args[1], Direction::kLt)};
                 })[1]};
}
TORCH_TPU_LOWERING(RandomPermutation, "torch_tpu::randperm");

}  // namespace
}  // namespace torch_tpu::lowering
