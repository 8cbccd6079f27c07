// Cross-replica collective ops of FunctionBuilder (all_reduce, all_gather, reduce_scatter,
// all_to_all, collective_permute, collective_broadcast): what cross-process collective programs
// are made of.
#include <set>
#include <utility>

#include "builder.h"
#include "builder_internal.h"

namespace torch_tpu::stablehlo {

using internal::Fail;
using internal::Scalar;
using internal::TypeList;

namespace {

std::string GroupsText(const FunctionBuilder::ReplicaGroups& groups) {
  std::string text = "dense<[";
  for (size_t g = 0; g < groups.size(); ++g) {
    text += g ? ", [" : "[";
    for (size_t i = 0; i < groups[g].size(); ++i) {
      if (i) text += ", ";
      text += std::to_string(groups[g][i]);
    }
    text += "]";
  }
  return text + "]> : tensor<" + std::to_string(groups.size()) + "x" +
         std::to_string(groups.empty() ? 0 : groups[0].size()) + "xi64>";
}

// Groups must be non-empty, of one size, and name each replica once. Returns the group size.
int64_t CheckGroups(std::string_view op, const FunctionBuilder::ReplicaGroups& groups) {
  if (groups.empty() || groups[0].empty()) Fail(op, "needs at least one non-empty replica group");
  std::set<int64_t> seen;
  for (const auto& group : groups) {
    if (group.size() != groups[0].size()) Fail(op, "replica groups differ in size");
    for (int64_t replica : group) {
      if (replica < 0) Fail(op, "replica ids must be non-negative");
      if (!seen.insert(replica).second) {
        Fail(op, "replica " + std::to_string(replica) + " is in more than one group");
      }
    }
  }
  return static_cast<int64_t>(groups[0].size());
}

void CheckDimension(std::string_view op, const Value& operand, int64_t dimension,
                    std::string_view what) {
  if (dimension < 0 || dimension >= operand.rank()) {
    Fail(op, std::string(what) + " " + std::to_string(dimension) + " is out of range for " +
                 operand.type().ToString());
  }
}

void CheckDivisible(std::string_view op, const Value& operand, int64_t dimension, int64_t count) {
  if (operand.dims()[dimension] % count != 0) {
    Fail(op, "dimension " + std::to_string(dimension) + " of " + operand.type().ToString() +
                 " does not divide into " + std::to_string(count) + " blocks");
  }
}

}  // namespace

Value FunctionBuilder::AllReduce(Value operand, const ReplicaGroups& groups,
                                 const RegionBody& body) {
  constexpr std::string_view kOp = "stablehlo.all_reduce";
  CheckOpen(kOp);
  Check(operand, kOp);
  CheckGroups(kOp, groups);
  TensorType scalar = Scalar(operand.element_type());
  Region region = BuildRegion(kOp, {scalar, scalar}, body);
  if (region.result_types != std::vector<TensorType>{scalar}) {
    Fail(kOp, "region body returned (" + TypeList(region.result_types) + ") but must return " +
                  scalar.ToString());
  }
  return Emit(kOp, {operand}, "replica_groups = " + GroupsText(groups), {operand.type()},
              &region)[0];
}

Value FunctionBuilder::AllGather(Value operand, int64_t dimension, const ReplicaGroups& groups) {
  constexpr std::string_view kOp = "stablehlo.all_gather";
  CheckOpen(kOp);
  Check(operand, kOp);
  int64_t size = CheckGroups(kOp, groups);
  CheckDimension(kOp, operand, dimension, "all_gather_dim");
  TensorType result = operand.type();
  result.dims[dimension] *= size;
  return EmitOne(kOp, {operand},
                 "all_gather_dim = " + std::to_string(dimension) +
                     " : i64, replica_groups = " + GroupsText(groups),
                 std::move(result));
}

Value FunctionBuilder::ReduceScatter(Value operand, int64_t dimension,
                                     const ReplicaGroups& groups, const RegionBody& body) {
  constexpr std::string_view kOp = "stablehlo.reduce_scatter";
  CheckOpen(kOp);
  Check(operand, kOp);
  int64_t size = CheckGroups(kOp, groups);
  CheckDimension(kOp, operand, dimension, "scatter_dimension");
  CheckDivisible(kOp, operand, dimension, size);
  TensorType scalar = Scalar(operand.element_type());
  Region region = BuildRegion(kOp, {scalar, scalar}, body);
  if (region.result_types != std::vector<TensorType>{scalar}) {
    Fail(kOp, "region body returned (" + TypeList(region.result_types) + ") but must return " +
                  scalar.ToString());
  }
  TensorType result = operand.type();
  result.dims[dimension] /= size;
  return Emit(kOp, {operand},
              "replica_groups = " + GroupsText(groups) +
                  ", scatter_dimension = " + std::to_string(dimension) + " : i64",
              {std::move(result)}, &region)[0];
}

Value FunctionBuilder::AllToAll(Value operand, int64_t split_dimension, int64_t concat_dimension,
                                const ReplicaGroups& groups) {
  constexpr std::string_view kOp = "stablehlo.all_to_all";
  CheckOpen(kOp);
  Check(operand, kOp);
  int64_t size = CheckGroups(kOp, groups);
  CheckDimension(kOp, operand, split_dimension, "split_dimension");
  CheckDimension(kOp, operand, concat_dimension, "concat_dimension");
  CheckDivisible(kOp, operand, split_dimension, size);
  TensorType result = operand.type();
  result.dims[split_dimension] /= size;
  result.dims[concat_dimension] *= size;
  return EmitOne(kOp, {operand},
                 "concat_dimension = " + std::to_string(concat_dimension) +
                     " : i64, replica_groups = " + GroupsText(groups) +
                     ", split_count = " + std::to_string(size) +
                     " : i64, split_dimension = " + std::to_string(split_dimension) + " : i64",
                 std::move(result));
}

Value FunctionBuilder::CollectivePermute(Value operand,
                                         const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  constexpr std::string_view kOp = "stablehlo.collective_permute";
  CheckOpen(kOp);
  Check(operand, kOp);
  if (pairs.empty()) Fail(kOp, "needs at least one (source, target) pair");
  std::set<int64_t> sources, targets;
  std::string text = "source_target_pairs = dense<[";
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto [source, target] = pairs[i];
    if (source < 0 || target < 0) Fail(kOp, "replica ids must be non-negative");
    if (!sources.insert(source).second) Fail(kOp, "two pairs share a source");
    if (!targets.insert(target).second) Fail(kOp, "two pairs share a target");
    text += (i ? ", [" : "[") + std::to_string(source) + ", " + std::to_string(target) + "]";
  }
  text += "]> : tensor<" + std::to_string(pairs.size()) + "x2xi64>";
  return EmitOne(kOp, {operand}, text, operand.type());
}

Value FunctionBuilder::CollectiveBroadcast(Value operand, const ReplicaGroups& groups) {
  constexpr std::string_view kOp = "stablehlo.collective_broadcast";
  CheckOpen(kOp);
  Check(operand, kOp);
  CheckGroups(kOp, groups);
  return EmitOne(kOp, {operand}, "replica_groups = " + GroupsText(groups), operand.type());
}

Value FunctionBuilder::ReplicaId() {
  constexpr std::string_view kOp = "stablehlo.replica_id";
  CheckOpen(kOp);
  return EmitOne(kOp, {}, "", TensorType{ElementType::kU32, {}});
}

}  // namespace torch_tpu::stablehlo
