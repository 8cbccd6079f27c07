#include "lowering/linalg_common.h"

#include <c10/util/Exception.h>

#include <limits>
#include <numeric>
#include <string>

namespace torch_tpu::lowering::linalg {

void CheckLinalgInput(LoweringContext& context, const Operand& operand, const char* what) {
  TORCH_CHECK(operand.dtype == c10::kFloat || operand.dtype == c10::kDouble, context.op_name(),
              ": Low precision dtypes not supported. Got ", c10::toString(operand.dtype), " for ",
              what, " of shape ", operand.value.type().ToString(), " on the tpu device");
  const auto& dims = operand.value.dims();
  TORCH_CHECK(dims.size() >= 2, context.op_name(), ": The input tensor ", what,
              " must have at least 2 dimensions, got shape ", operand.value.type().ToString());
}

void CheckSquare(LoweringContext& context, const Operand& operand, const char* what) {
  CheckLinalgInput(context, operand, what);
  const auto& dims = operand.value.dims();
  TORCH_CHECK(dims[dims.size() - 1] == dims[dims.size() - 2], context.op_name(), ": ", what,
              " must be batches of square matrices, but they are ", dims[dims.size() - 2], " by ",
              dims[dims.size() - 1], " matrices");
}

void CheckLinalgInput(const Operand& operand, const char* what, const CpuLinalgNames& names) {
  const auto& dims = operand.value.dims();
  TORCH_CHECK(dims.size() >= 2, names.function, ": The input tensor ", what,
              " must have at least 2 dimensions.");
  const c10::ScalarType dtype = operand.dtype;
  if (!c10::isFloatingType(dtype)) {
    TORCH_CHECK_NOT_IMPLEMENTED(names.integer_kernel == nullptr, "\"", names.integer_kernel,
                                "\" not implemented for '", c10::toString(dtype), "'");
    TORCH_CHECK(false, names.function,
                ": Expected a floating point or complex tensor as input. Got ",
                c10::toString(dtype));
  }
  if (dtype != c10::kFloat && dtype != c10::kDouble) {
    TORCH_CHECK_NOT_IMPLEMENTED(names.half_kernel == nullptr, "\"", names.half_kernel,
                                "\" not implemented for '", c10::toString(dtype), "'");
    TORCH_CHECK(false, names.function, ": Low precision dtypes not supported. Got ",
                c10::toString(dtype));
  }
}

void CheckSquare(const Operand& operand, const char* what, const CpuLinalgNames& names) {
  CheckLinalgInput(operand, what, names);
  const auto& dims = operand.value.dims();
  TORCH_CHECK(dims[dims.size() - 1] == dims[dims.size() - 2], names.function, ": ", what,
              " must be batches of square matrices, but they are ", dims[dims.size() - 2], " by ",
              dims[dims.size() - 1], " matrices");
}

bool IsEmpty(const Value& value) { return value.type().NumElements() == 0; }

double Epsilon(ElementType type) {
  return type == ElementType::kF64 ? std::numeric_limits<double>::epsilon()
                                   : std::numeric_limits<float>::epsilon();
}

std::vector<int64_t> BatchDims(const Value& value) {
  return std::vector<int64_t>(value.dims().begin(), value.dims().end() - 2);
}

Value FlattenBatch(FunctionBuilder& b, Value x) {
  const std::vector<int64_t> batch = BatchDims(x);
  const int64_t count =
      std::accumulate(batch.begin(), batch.end(), int64_t{1}, std::multiplies<>());
  return b.Reshape(x, {count, x.dims()[x.rank() - 2], x.dims().back()});
}

Value UnflattenBatch(FunctionBuilder& b, Value x, const std::vector<int64_t>& batch) {
  std::vector<int64_t> dims = batch;
  dims.insert(dims.end(), x.dims().begin() + 1, x.dims().end());
  return b.Reshape(x, dims);
}

Value MatrixTranspose(FunctionBuilder& b, Value x) {
  std::vector<int64_t> permutation(x.rank());
  std::iota(permutation.begin(), permutation.end(), 0);
  std::swap(permutation[x.rank() - 1], permutation[x.rank() - 2]);
  return b.Transpose(x, permutation);
}

Value IndexIota(FunctionBuilder& b, const std::vector<int64_t>& dims, int64_t dim) {
  return b.Iota(TensorType{ElementType::kS32, dims}, dim);
}

Value Splat(FunctionBuilder& b, Value scalar, const std::vector<int64_t>& dims) {
  return b.BroadcastInDim(scalar, dims, {});
}

Value KeepTriangle(FunctionBuilder& b, Value x, bool lower, int64_t offset) {
  Value row = IndexIota(b, x.dims(), x.rank() - 2), column = IndexIota(b, x.dims(), x.rank() - 1);
  Value shifted = b.Add(row, b.ConstantInt(ElementType::kS32, offset, x.dims()));
  Value keep = b.Compare(column, shifted, lower ? Direction::kLe : Direction::kGe);
  return b.Select(keep, x, b.Constant(x.element_type(), 0.0, x.dims()));
}

Value Eye(FunctionBuilder& b, ElementType type, const std::vector<int64_t>& dims) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  return b.Convert(
      b.Compare(IndexIota(b, dims, rank - 2), IndexIota(b, dims, rank - 1), Direction::kEq), type);
}

Value Diagonal(FunctionBuilder& b, Value x) {
  const int64_t m = x.dims()[x.rank() - 2], n = x.dims().back(), k = std::min(m, n);
  std::vector<int64_t> batch = BatchDims(x);
  std::vector<int64_t> square = batch;
  square.push_back(k);
  square.push_back(k);
  std::vector<int64_t> zeros(x.rank(), 0), ones(x.rank(), 1);
  Value top = b.Slice(x, zeros, square, ones);
  std::vector<int64_t> flat = batch;
  flat.push_back(k * k);
  std::vector<int64_t> start(flat.size(), 0), steps(flat.size(), 1);
  steps.back() = k + 1;
  return b.Slice(b.Reshape(top, flat), start, flat, steps);
}

Value DynamicColumn(FunctionBuilder& b, Value x, Value j) {
  const auto& d = x.dims();
  Value zero = b.ConstantInt(ElementType::kS32, 0);
  return b.Reshape(b.DynamicSlice(x, {zero, zero, j}, {d[0], d[1], 1}), {d[0], d[1]});
}

Value DynamicRow(FunctionBuilder& b, Value x, Value i) {
  const auto& d = x.dims();
  Value zero = b.ConstantInt(ElementType::kS32, 0);
  return b.Reshape(b.DynamicSlice(x, {zero, i, zero}, {d[0], 1, d[2]}), {d[0], d[2]});
}

Value DynamicEntry(FunctionBuilder& b, Value x, Value i) {
  const auto& d = x.dims();
  Value zero = b.ConstantInt(ElementType::kS32, 0);
  return b.Reshape(b.DynamicSlice(x, {zero, i}, {d[0], 1}), {d[0]});
}

Value GatherRows(FunctionBuilder& b, Value x, Value rows) {
  const auto& d = x.dims();
  const int64_t count = rows.dims()[1];
  FunctionBuilder::GatherDimensions dimensions;
  dimensions.offset_dims = {2};
  dimensions.collapsed_slice_dims = {1};
  dimensions.operand_batching_dims = {0};
  dimensions.start_indices_batching_dims = {0};
  dimensions.start_index_map = {1};
  dimensions.index_vector_dim = 2;
  return b.Gather(x, b.Reshape(rows, {d[0], count, 1}), dimensions, {1, 1, d[2]});
}

Value Outer(FunctionBuilder& b, Value u, Value v) {
  std::vector<int64_t> dims = {u.dims()[0], u.dims()[1], v.dims()[1]};
  return b.Multiply(b.BroadcastInDim(u, dims, {0, 1}), b.BroadcastInDim(v, dims, {0, 2}));
}

std::pair<Value, Value> FirstLargestMagnitude(FunctionBuilder& b, Value x, Value eligible) {
  const std::vector<int64_t>& dims = x.dims();
  const ElementType type = x.element_type();
  Value magnitude = b.Select(eligible, b.Abs(x), b.Constant(type, -1.0, dims));
  std::vector<Value> best =
      b.Reduce({magnitude, IndexIota(b, dims, 1)},
               {b.Constant(type, -2.0), b.ConstantInt(ElementType::kS32, 0)}, {1},
               [](FunctionBuilder& body, std::span<const Value> args) {
                 // args: best value, best index, candidate value, candidate index.
                 Value greater = body.Compare(args[2], args[0], Direction::kGt);
                 Value tie = body.And(body.Compare(args[2], args[0], Direction::kEq),
                                      body.Compare(args[3], args[1], Direction::kLt));
                 Value take = body.Or(greater, tie);
                 return std::vector<Value>{body.Select(take, args[2], args[0]),
                                           body.Select(take, args[3], args[1])};
               });
  return {best[0], best[1]};
}

Value Sum(FunctionBuilder& b, Value x, std::vector<int64_t> dims) {
  return b.Reduce({x}, {b.Constant(x.element_type(), 0.0)}, std::move(dims),
                  [](FunctionBuilder& body, std::span<const Value> args) {
                    return std::vector<Value>{body.Add(args[0], args[1])};
                  })[0];
}

Value BatchMatmul(FunctionBuilder& b, Value lhs, Value rhs) {
  FunctionBuilder::DotDimensions dimensions{{0}, {0}, {2}, {1}};
  return b.DotGeneral(lhs, rhs, dimensions, std::nullopt, FunctionBuilder::Precision::kHighest);
}

Value Any(FunctionBuilder& b, Value x) {
  if (x.rank() == 0) return x;
  std::vector<int64_t> all(x.rank());
  std::iota(all.begin(), all.end(), 0);
  return b.Reduce({x}, {b.Constant(ElementType::kPred, 0.0)}, all,
                  [](FunctionBuilder& body, std::span<const Value> args) {
                    return std::vector<Value>{body.Or(args[0], args[1])};
                  })[0];
}

std::pair<Value, Value> BroadcastBatch(LoweringContext& context, Value a, Value b) {
  std::vector<std::vector<int64_t>> shapes = {BatchDims(a), BatchDims(b)};
  std::vector<int64_t> batch = context.BroadcastShape(shapes);
  auto with_matrix = [&](const Value& v) {
    std::vector<int64_t> dims = batch;
    dims.push_back(v.dims()[v.rank() - 2]);
    dims.push_back(v.dims()[v.rank() - 1]);
    return context.BroadcastTo(v, dims);
  };
  return {with_matrix(a), with_matrix(b)};
}

void CheckInfoIsZero(LoweringContext& context, Value info, const std::string& what) {
  auto& b = context.builder();
  Value failed = b.Compare(info, b.ConstantInt(ElementType::kS32, 0, info.dims()), Direction::kNe);
  context.CheckNotViolated(Any(b, failed), what);
}

}  // namespace torch_tpu::lowering::linalg
