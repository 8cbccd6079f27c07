#include "loops.h"

#include <string>

#include "builder_internal.h"

namespace torch_tpu::stablehlo {

std::vector<Value> ForLoop(FunctionBuilder& builder, int64_t start, int64_t limit,
                           std::vector<Value> carried, const ForLoopBody& body) {
  if (start >= limit) return carried;
  if (limit > INT32_MAX || start < INT32_MIN) {
    internal::Fail("ForLoop", "bounds [" + std::to_string(start) + ", " + std::to_string(limit) +
                                  ") do not fit the s32 trip counter");
  }
  std::vector<Value> initial = {builder.ConstantInt(ElementType::kS32, start)};
  initial.insert(initial.end(), carried.begin(), carried.end());
  std::vector<Value> final_values = builder.While(
      initial,
      [limit](FunctionBuilder& b, std::span<const Value> args) {
        return std::vector<Value>{b.Compare(args[0], b.ConstantInt(ElementType::kS32, limit),
                                            FunctionBuilder::ComparisonDirection::kLt)};
      },
      [&body](FunctionBuilder& b, std::span<const Value> args) {
        std::vector<Value> next = {b.Add(args[0], b.ConstantInt(ElementType::kS32, 1))};
        std::vector<Value> updated = body(b, args[0], args.subspan(1));
        next.insert(next.end(), updated.begin(), updated.end());
        return next;
      });
  return std::vector<Value>(final_values.begin() + 1, final_values.end());
}

}  // namespace torch_tpu::stablehlo
