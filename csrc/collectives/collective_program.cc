#include "collective_program.h"

#include <stdexcept>

#include "stablehlo/module.h"

namespace torch_tpu::collectives {
namespace {

using stablehlo::ElementType;
using stablehlo::FunctionBuilder;
using stablehlo::Value;

std::string_view KindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kPermute: return "permute";
  }
  return "collective";
}

std::string_view ReduceName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProduct: return "product";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kBitwiseAnd: return "bitwise_and";
    case ReduceOp::kBitwiseOr: return "bitwise_or";
    case ReduceOp::kBitwiseXor: return "bitwise_xor";
    case ReduceOp::kAverage: return "average";
  }
  return "reduce";
}

bool Reduces(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter;
}

// The combiner of two scalars. Booleans reduce as CUDA backends do: sum and max are "any",
// product and min are "all".
FunctionBuilder::RegionBody Combiner(const CollectiveSpec& spec) {
  ElementType type = spec.element_type;
  bool logical = stablehlo::IsPred(type);
  bool integral = logical || stablehlo::IsInteger(type);
  auto fail = [&spec](const std::string& why) {
    throw std::invalid_argument(Describe(spec) + ": " + why);
  };
  if (stablehlo::IsComplex(type) && spec.reduce_op != ReduceOp::kSum &&
      spec.reduce_op != ReduceOp::kProduct && spec.reduce_op != ReduceOp::kAverage) {
    fail("complex numbers have no order");
  }
  ReduceOp op = spec.reduce_op;
  switch (op) {
    case ReduceOp::kBitwiseAnd:
    case ReduceOp::kBitwiseOr:
    case ReduceOp::kBitwiseXor:
      if (!integral) fail("bitwise reductions need integer or bool elements");
      break;
    case ReduceOp::kAverage:
      if (integral) fail("an average needs floating-point or complex elements");
      break;
    default:
      break;
  }
  return [op, logical](FunctionBuilder& body, std::span<const Value> args) {
    Value a = args[0], b = args[1];
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: return std::vector<Value>{logical ? body.Or(a, b) : body.Add(a, b)};
      case ReduceOp::kProduct:
        return std::vector<Value>{logical ? body.And(a, b) : body.Multiply(a, b)};
      case ReduceOp::kMin: return std::vector<Value>{logical ? body.And(a, b) : body.Minimum(a, b)};
      case ReduceOp::kMax: return std::vector<Value>{logical ? body.Or(a, b) : body.Maximum(a, b)};
      case ReduceOp::kBitwiseAnd: return std::vector<Value>{body.And(a, b)};
      case ReduceOp::kBitwiseOr: return std::vector<Value>{body.Or(a, b)};
      case ReduceOp::kBitwiseXor: return std::vector<Value>{body.Xor(a, b)};
    }
    return std::vector<Value>{};
  };
}

bool IsBitwise(ReduceOp op) {
  return op == ReduceOp::kBitwiseAnd || op == ReduceOp::kBitwiseOr || op == ReduceOp::kBitwiseXor;
}

// Bitwise reductions: all-reduce combiners are limited to arithmetic ones on XLA's CPU and GPU
// backends (NCCL has no bitwise reduction), so every replica gathers all operands and reduces
// them itself. Exact, at the cost of world_size times the data.
Value GatherAndReduce(FunctionBuilder& main, Value operand, const CollectiveSpec& spec,
                      const FunctionBuilder::ReplicaGroups& all) {
  FunctionBuilder::RegionBody combiner = Combiner(spec);
  std::vector<int64_t> stacked_dims = spec.dims;
  stacked_dims.insert(stacked_dims.begin(), 1);
  Value gathered = main.AllGather(main.Reshape(operand, stacked_dims), 0, all);
  Value zero = main.ConstantInt(spec.element_type, 0);
  Value init = spec.reduce_op == ReduceOp::kBitwiseAnd ? main.Not(zero) : zero;
  return main.Reduce({gathered}, {init}, {0}, combiner)[0];
}

// Broadcast as a sum of bit patterns to which only the root contributes: exact for every value
// (signed zeros and NaN payloads included) and an all-reduce is what every plugin has
// (collective_broadcast is missing on XLA:CPU).
Value Broadcast(FunctionBuilder& main, Value operand, const CollectiveSpec& spec,
                const FunctionBuilder::ReplicaGroups& all) {
  if (spec.root < 0 || spec.root >= spec.world_size) {
    throw std::invalid_argument(Describe(spec) + ": root " + std::to_string(spec.root) +
                                " is not a replica");
  }
  ElementType type = spec.element_type;
  if (stablehlo::IsComplex(type)) {
    throw std::invalid_argument(Describe(spec) +
                                ": complex elements are broadcast as their real view");
  }
  int bits = stablehlo::BitWidth(type);
  ElementType wide = bits > 32 ? ElementType::kU64 : ElementType::kU32;
  ElementType same_width = bits <= 8 ? ElementType::kU8
                           : bits == 16 ? ElementType::kU16
                           : bits == 32 ? ElementType::kU32
                                        : ElementType::kU64;
  Value pattern = stablehlo::IsPred(type)
                      ? main.Convert(operand, wide)
                      : main.Convert(main.BitcastConvert(operand, same_width), wide);
  Value root = main.ConstantUnsigned(ElementType::kU32, static_cast<uint64_t>(spec.root));
  Value is_root =
      main.Compare(main.ReplicaId(), root, FunctionBuilder::ComparisonDirection::kEq);
  Value contribution = main.Select(main.BroadcastInDim(is_root, spec.dims, {}), pattern,
                                   main.ConstantUnsigned(wide, 0, spec.dims));
  Value summed = main.AllReduce(contribution, all, [](FunctionBuilder& body,
                                                      std::span<const Value> args) {
    return std::vector<Value>{body.Add(args[0], args[1])};
  });
  if (stablehlo::IsPred(type)) return main.Convert(summed, type);
  return main.BitcastConvert(main.Convert(summed, same_width), type);
}

}  // namespace

std::string Describe(const CollectiveSpec& spec) {
  std::string text(KindName(spec.kind));
  if (Reduces(spec.kind)) text += "(" + std::string(ReduceName(spec.reduce_op)) + ")";
  text += " " + std::string(stablehlo::MlirName(spec.element_type)) + "[";
  for (size_t i = 0; i < spec.dims.size(); ++i) {
    text += (i ? "," : "") + std::to_string(spec.dims[i]);
  }
  return text + "] over " + std::to_string(spec.world_size) + " replicas";
}

std::string CollectiveModuleText(const CollectiveSpec& spec) {
  if (spec.world_size < 1) throw std::invalid_argument(Describe(spec) + ": no replicas");
  stablehlo::Module module("collective");
  module.set_num_replicas(spec.world_size);
  FunctionBuilder& main = module.main();
  Value operand = main.Argument({spec.element_type, spec.dims});
  FunctionBuilder::ReplicaGroups all(1);
  for (int64_t r = 0; r < spec.world_size; ++r) all[0].push_back(r);
  Value result;
  try {
    switch (spec.kind) {
      case CollectiveKind::kAllReduce:
        result = IsBitwise(spec.reduce_op) ? GatherAndReduce(main, operand, spec, all)
                                           : main.AllReduce(operand, all, Combiner(spec));
        break;
      case CollectiveKind::kReduceScatter:
        result = main.ReduceScatter(operand, spec.dimension, all, Combiner(spec));
        break;
      case CollectiveKind::kAllGather:
        result = main.AllGather(operand, spec.dimension, all);
        break;
      case CollectiveKind::kAllToAll:
        result = main.AllToAll(operand, spec.dimension, spec.dimension, all);
        break;
      case CollectiveKind::kBroadcast:
        result = Broadcast(main, operand, spec, all);
        break;
      case CollectiveKind::kPermute:
        result = main.CollectivePermute(operand, spec.pairs);
        break;
    }
    if (Reduces(spec.kind) && spec.reduce_op == ReduceOp::kAverage) {
      Value count = main.Constant(spec.element_type, static_cast<double>(spec.world_size));
      result = main.Divide(result, main.BroadcastInDim(count, result.dims(), {}));
    }
  } catch (const stablehlo::BuilderError& error) {
    throw std::invalid_argument(Describe(spec) + ": " + error.what());
  }
  main.Return({result});
  return module.ToText();
}

}  // namespace torch_tpu::collectives
