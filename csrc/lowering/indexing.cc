// Index-taking ops: index_select, gather, scatter(_add/_reduce), index_add/_reduce/_copy/_fill,
// embedding, embedding_bag, take, put, advanced indexing (index.Tensor) and index_put. All become
// StableHLO gather/scatter, which clamp or drop out-of-range indices instead of failing, so every
// lowering declares the indices it consumes (LoweringContext::CheckIndicesInRange) and the executor
// turns a violation into an error.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

#include "lowering/context.h"
#include "lowering/extremum.h"
#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {
namespace {

void CheckIndexDtype(LoweringContext& context, const Operand& index) {
  TORCH_CHECK_INDEX(index.dtype == c10::kLong || index.dtype == c10::kInt, context.op_name(),
                    ": expected index to have dtype int64 or int32, but got ", index.dtype);
}

// True (0-d pred) when any element of the pred `values` is.
Value ReduceAny(LoweringContext& context, Value values) {
  std::vector<int64_t> all(values.rank());
  for (int64_t d = 0; d < values.rank(); ++d) all[d] = d;
  return context.builder().Reduce({values}, {context.builder().Constant(ElementType::kPred, 0.0)},
                                  all, [](FunctionBuilder& body, std::span<const Value> args) {
                                    return std::vector<Value>{body.Or(args[0], args[1])};
                                  })[0];
}

// Indices as s64; negative ones wrapped by `size` where PyTorch allows them.
Value NormalizeIndex(LoweringContext& context, Value index, int64_t size, bool wrap_negative) {
  auto& builder = context.builder();
  index = context.Convert(index, c10::kLong);
  if (!wrap_negative) return index;
  Value zero = builder.ConstantInt(ElementType::kS64, 0, index.dims());
  Value negative = builder.Compare(index, zero, FunctionBuilder::ComparisonDirection::kLt);
  return builder.Select(
      negative, builder.Add(index, builder.ConstantInt(ElementType::kS64, size, index.dims())),
      index);
}

// StableHLO's gather needs every slice to fit inside the operand. An operand without elements
// has nothing to gather (any index into it is out of range, which the index check reports), so
// the gather reads zeros of the smallest shape the slices fit instead; the result keeps its shape.
Value GatherFrom(LoweringContext& context, Value operand, Value indices,
                 const FunctionBuilder::GatherDimensions& dimensions,
                 const std::vector<int64_t>& slice_sizes) {
  auto& builder = context.builder();
  if (operand.type().NumElements() == 0) {
    std::vector<int64_t> dims = operand.dims();
    for (size_t d = 0; d < dims.size(); ++d) dims[d] = std::max(dims[d], slice_sizes[d]);
    operand = builder.Constant(operand.element_type(), 0.0, dims);
  }
  return builder.Gather(operand, indices, dimensions, slice_sizes);
}

// Full coordinates for gather/scatter along `dim`: coordinate d is `index` for d == dim and the
// position itself otherwise; stacked on a trailing axis of size rank.
Value CoordinatesAlong(LoweringContext& context, Value index, int64_t dim) {
  auto& builder = context.builder();
  const auto& dims = index.dims();
  std::vector<int64_t> column = dims;
  column.push_back(1);
  std::vector<Value> coordinates;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    Value coordinate = d == dim ? index : builder.Iota(TensorType{ElementType::kS64, dims}, d);
    coordinates.push_back(builder.Reshape(coordinate, column));
  }
  return builder.Concatenate(coordinates, static_cast<int64_t>(dims.size()));
}

// index_select(self, int dim, Tensor index)
std::vector<Value> IndexSelect(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const Operand& index_operand = operands[2];
  CheckIndexDtype(context, index_operand);
  const int64_t rank = self.value.rank();
  const int64_t dim = context.WrapDim(context.Int(operands[1]), rank);
  TORCH_CHECK_INDEX(index_operand.value.rank() <= 1, context.op_name(),
                    ": index_select(): Index is supposed to be a vector");
  auto& builder = context.builder();
  Value index = NormalizeIndex(context, index_operand.value, 0, false);
  TORCH_CHECK(rank == 0 || self.value.dims()[dim] > 0 || index.type().NumElements() == 0,
              context.op_name(), ": index_select(): self indexing axis dim should be positive");
  context.CheckIndicesInRange(index, rank == 0 ? 1 : self.value.dims()[dim], false);
  if (index.rank() == 0) index = builder.Reshape(index, {1});
  if (rank == 0)
    return {builder.Reshape(builder.Gather1D(builder.Reshape(self.value, {1}), index), {})};
  FunctionBuilder::GatherDimensions dimensions;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim) dimensions.offset_dims.push_back(d);
  }
  dimensions.collapsed_slice_dims = {dim};
  dimensions.start_index_map = {dim};
  dimensions.index_vector_dim = 1;
  std::vector<int64_t> slice_sizes = self.value.dims();
  slice_sizes[dim] = 1;
  return {GatherFrom(context, self.value, index, dimensions, slice_sizes)};
}
TORCH_TPU_LOWERING(IndexSelect, "aten::index_select", "aten::index_select.out");

// gather(self, int dim, Tensor index, *, bool sparse_grad=False)
std::vector<Value> Gather(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  CheckIndexDtype(context, operands[2]);
  const int64_t rank = self.value.rank();
  const int64_t dim = context.WrapDim(context.Int(operands[1]), rank);
  Value index = NormalizeIndex(context, operands[2].value, 0, false);
  TORCH_CHECK(index.rank() == rank || (rank == 0 && index.rank() <= 1), context.op_name(),
              ": Index tensor must have the same number of dimensions as input tensor");
  context.CheckIndicesInRange(index, rank == 0 ? 1 : self.value.dims()[dim], false);
  auto& builder = context.builder();
  if (rank == 0)
    return {
        builder.Reshape(builder.Gather1D(builder.Reshape(self.value, {1}), index), index.dims())};
  FunctionBuilder::GatherDimensions dimensions;
  for (int64_t d = 0; d < rank; ++d) {
    dimensions.collapsed_slice_dims.push_back(d);
    dimensions.start_index_map.push_back(d);
  }
  dimensions.index_vector_dim = rank;
  return {GatherFrom(context, self.value, CoordinatesAlong(context, index, dim), dimensions,
                     std::vector<int64_t>(rank, 1))};
}
TORCH_TPU_LOWERING(Gather, "aten::gather", "aten::gather.out");

FunctionBuilder::RegionBody AddBody() {
  return [](FunctionBuilder& body, std::span<const Value> args) {
    return std::vector<Value>{body.Add(args[0], args[1])};
  };
}

// Scatter geometry for updates shaped like self except along `dim`, addressed by a 1-D index
// (index_add, index_reduce).
FunctionBuilder::ScatterDimensions AlongDim(int64_t rank, int64_t dim) {
  FunctionBuilder::ScatterDimensions dimensions;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim) dimensions.update_window_dims.push_back(d);
  }
  dimensions.inserted_window_dims = {dim};
  dimensions.scatter_dims_to_operand_dims = {dim};
  dimensions.index_vector_dim = 1;
  return dimensions;
}

// Scatter geometry for one update per full coordinate (scatter, scatter_add, scatter_reduce).
FunctionBuilder::ScatterDimensions PerElement(int64_t rank) {
  FunctionBuilder::ScatterDimensions dimensions;
  for (int64_t d = 0; d < rank; ++d) {
    dimensions.inserted_window_dims.push_back(d);
    dimensions.scatter_dims_to_operand_dims.push_back(d);
  }
  dimensions.index_vector_dim = rank;
  return dimensions;
}

// Shared by scatter.src/.value and scatter_add: write (or add) `updates` at coordinates.
Value ScatterAlong(LoweringContext& context, const Operand& self, int64_t dim, Value index,
                   Value updates, bool add) {
  auto& builder = context.builder();
  const int64_t rank = self.value.rank();
  const FunctionBuilder::ScatterDimensions dimensions = PerElement(rank);
  return builder.Scatter({self.value}, CoordinatesAlong(context, index, dim), {updates}, dimensions,
                         add ? AddBody() : FunctionBuilder::RegionBody())[0];
}

// Elements of `source` at the positions `index` covers (source may be larger than index).
Value CropTo(LoweringContext& context, Value source, const std::vector<int64_t>& dims) {
  if (source.dims() == dims) return source;
  std::vector<int64_t> start(dims.size(), 0), steps(dims.size(), 1);
  return context.builder().Slice(source, start, dims, steps);
}

// Index ops accept a 0-d self, but gather/scatter need a dimension to index: run `lowering` with
// self as a 1-element vector (dim 0) and the operands at `flatten` flattened, then drop the
// dimension again.
template <typename Lowering>
std::vector<Value> OnZeroDimSelf(LoweringContext& context, std::span<const Operand> operands,
                                 std::initializer_list<size_t> flatten, Lowering lowering) {
  auto& b = context.builder();
  std::vector<Operand> vector(operands.begin(), operands.end());
  vector[0].value = b.Reshape(operands[0].value, {1});
  for (size_t index : flatten) {
    vector[index].value =
        b.Reshape(operands[index].value, {operands[index].value.type().NumElements()});
  }
  vector[1].ivalue = c10::IValue(int64_t{0});
  return {b.Reshape(lowering(context, vector)[0], {})};
}

// scatter.src(self, dim, index, Tensor src), scatter.value(self, dim, index, Scalar value),
// scatter_add(self, dim, index, src)
template <bool kAdd>
std::vector<Value> Scatter(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  CheckIndexDtype(context, operands[2]);
  const int64_t rank = self.value.rank();
  const int64_t dim = context.WrapDim(context.Int(operands[1]), rank);
  TORCH_CHECK(operands[2].value.rank() == rank, context.op_name(),
              ": Index tensor must have the same number of dimensions as self tensor");
  if (rank == 0) return OnZeroDimSelf(context, operands, {2, 3}, Scatter<kAdd>);
  Value index = NormalizeIndex(context, operands[2].value, 0, false);
  context.CheckIndicesInRange(index, self.value.dims()[dim], false);
  Value updates = context.Convert(operands[3].value, self.dtype);
  updates = operands[3].value.rank() == 0 && operands[3].kind == Operand::Kind::kScalar
                ? context.BroadcastTo(updates, index.dims())
                : CropTo(context, updates, index.dims());
  return {ScatterAlong(context, self, dim, index, updates, kAdd)};
}
TORCH_TPU_LOWERING(Scatter<false>, "aten::scatter.src", "aten::scatter_.src",
                   "aten::scatter.src_out");
TORCH_TPU_LOWERING(Scatter<false>, "aten::scatter.value", "aten::scatter_.value",
                   "aten::scatter.value_out");
TORCH_TPU_LOWERING(Scatter<true>, "aten::scatter_add", "aten::scatter_add_",
                   "aten::scatter_add.out");

// index_add(self, int dim, Tensor index, Tensor source, *, Scalar alpha=1)
std::vector<Value> IndexAdd(LoweringContext& context, std::span<const Operand> operands) {
  CheckIndexDtype(context, operands[2]);
  auto& builder = context.builder();
  if (operands[0].value.rank() == 0) return OnZeroDimSelf(context, operands, {3}, IndexAdd);
  const Operand& self = operands[0];
  const int64_t rank = self.value.rank();
  const int64_t dim = context.WrapDim(context.Int(operands[1]), rank);
  const Value& given_source = operands[3].value;
  TORCH_CHECK(dim == 0 || dim < given_source.rank(), "index_add_(): Indexing dim ", dim,
              " is out of bounds of the source tensor with dim ", given_source.rank());
  const int64_t indices = operands[2].value.type().NumElements();
  const int64_t source_along = given_source.rank() == 0 ? 1 : given_source.dims()[dim];
  TORCH_CHECK(indices == source_along, "index_add_(): Number of indices (", indices,
              ") should be equal to source.size(dim): (", source_along, "), for dim: ", dim);
  Value index = NormalizeIndex(context, operands[2].value, 0, false);
  context.CheckIndicesInRange(index, self.value.dims()[dim], false);
  if (index.rank() == 0) index = builder.Reshape(index, {1});
  Value source = context.Convert(given_source, self.dtype);
  if (source.rank() < rank) source = builder.Reshape(source, self.value.dims());
  if (operands.size() > 4 && operands[4].is_value()) {
    source = builder.Multiply(
        source, context.BroadcastTo(context.Convert(operands[4].value, self.dtype), source.dims()));
  }
  const FunctionBuilder::ScatterDimensions dimensions = AlongDim(rank, dim);
  return {builder.Scatter({self.value}, index, {source}, dimensions, AddBody())[0]};
}
TORCH_TPU_LOWERING(IndexAdd, "aten::index_add", "aten::index_add_", "aten::index_add.out");

// index_copy(self, int dim, Tensor index, Tensor source): self with source's slices written at
// index along dim.
std::vector<Value> IndexCopy(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const Operand& index_operand = operands[2];
  const Operand& source = operands[3];
  const std::string& op = context.op_name();
  TORCH_CHECK(index_operand.dtype == c10::kLong, op,
              ": index_copy_(): Expected a long tensor for index, but got ", index_operand.dtype);
  TORCH_CHECK_INDEX(index_operand.value.rank() <= 1, op,
                    ": index_copy_(): Index should have dimension 1 or 0 (got ",
                    index_operand.value.rank(), ")");
  TORCH_CHECK(self.dtype == source.dtype, op,
              ": index_copy_(): self and source expected to have the same dtype, but got (self) ",
              self.dtype, " and (source) ", source.dtype);
  if (self.value.rank() == 0) return OnZeroDimSelf(context, operands, {3}, IndexCopy);
  const int64_t rank = self.value.rank();
  const int64_t dim = context.WrapDim(context.Int(operands[1]), rank);
  const int64_t count = index_operand.value.type().NumElements();
  Value updates = source.value;
  if (updates.rank() == 0) updates = context.builder().Reshape(updates, {1});
  TORCH_CHECK_INDEX(updates.rank() == rank, op,
                    ": index_copy_(): When source and destination are not scalars, their "
                    "dimensionality must match. Source dimensionality (",
                    source.value.rank(), "), destination dimensionality (", rank, ")");
  TORCH_CHECK_INDEX(count == updates.dims()[dim], op, ": index_copy_(): Number of indices (", count,
                    ") should be equal to source.size(dim) (", updates.dims()[dim], ")");
  for (int64_t d = 0; d < rank; ++d) {
    TORCH_CHECK(d == dim || updates.dims()[d] == self.value.dims()[d], op,
                ": index_copy_(): Source/destination tensor must have same slice shapes. "
                "Destination slice shape: ",
                self.value.dims()[d], " at dimension ", d,
                " and source slice shape: ", updates.dims()[d], " at dimension ", d, ".");
  }
  Value index = NormalizeIndex(context, index_operand.value, 0, false);
  context.CheckIndicesInRange(index, self.value.dims()[dim], false);
  index = context.builder().Reshape(index, {count});
  return {context.builder().Scatter({self.value}, index, {updates}, AlongDim(rank, dim),
                                    FunctionBuilder::RegionBody())[0]};
}
TORCH_TPU_LOWERING(IndexCopy, "aten::index_copy", "aten::index_copy_", "aten::index_copy.out");

// index_fill.int_Scalar / .int_Tensor(self, int dim, Tensor index, value): self with the slices
// at index along dim set to value; negative indices count from the end.
std::vector<Value> IndexFill(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const Operand& index_operand = operands[2];
  const Operand& value = operands[3];
  const std::string& op = context.op_name();
  TORCH_CHECK_INDEX(index_operand.dtype == c10::kLong, op,
                    ": index_fill_(): Expected dtype int64 for index.");
  TORCH_CHECK(index_operand.value.rank() <= 1, op, ": Index has to be a vector/scalar");
  TORCH_CHECK(value.value.rank() == 0, op,
              ": index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.value.rank(), " dimension(s).");
  auto& builder = context.builder();
  const int64_t rank = self.value.rank();
  const int64_t dim = context.WrapDim(context.Int(operands[1]), rank);
  const int64_t size = rank == 0 ? 1 : self.value.dims()[dim];
  const int64_t count = index_operand.value.type().NumElements();
  context.CheckIndicesInRange(index_operand.value, size, true);
  Value index = builder.Reshape(NormalizeIndex(context, index_operand.value, size, true), {count});
  Value target = rank == 0 ? builder.Reshape(self.value, {1}) : self.value;
  std::vector<int64_t> update_dims = target.dims();
  update_dims[rank == 0 ? 0 : dim] = count;
  Value fill = context.BroadcastTo(context.Convert(value.value, self.dtype), update_dims);
  Value result =
      builder.Scatter({target}, index, {fill}, AlongDim(target.rank(), rank == 0 ? 0 : dim),
                      FunctionBuilder::RegionBody())[0];
  return {rank == 0 ? builder.Reshape(result, {}) : result};
}
TORCH_TPU_LOWERING(IndexFill, "aten::index_fill.int_Scalar", "aten::index_fill_.int_Scalar",
                   "aten::index_fill.int_Scalar_out");
TORCH_TPU_LOWERING(IndexFill, "aten::index_fill.int_Tensor", "aten::index_fill_.int_Tensor",
                   "aten::index_fill.int_Tensor_out");

// put(self, Tensor index, Tensor source, bool accumulate=False): writes (or adds) source into
// the flattened self at index; negative indices count from the end.
std::vector<Value> Put(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const Operand& index_operand = operands[1];
  const Operand& source = operands[2];
  const std::string& op = context.op_name();
  TORCH_CHECK(index_operand.dtype == c10::kLong, op,
              ": put_(): Expected a long tensor for index, but got ", index_operand.dtype);
  TORCH_CHECK(self.dtype == source.dtype, op,
              ": put_(): self and source expected to have the same dtype, but got self.dtype = ",
              self.dtype, " and source.dtype = ", source.dtype);
  const int64_t count = index_operand.value.type().NumElements();
  const int64_t source_count = source.value.type().NumElements();
  TORCH_CHECK_INDEX(source_count == count, op,
                    ": put_(): Expected source and index to have the same number of elements, "
                    "but got source.numel() = ",
                    source_count, ", index.numel() = ", count);
  const int64_t numel = self.value.type().NumElements();
  TORCH_CHECK_INDEX(numel > 0 || count == 0, op,
                    ": put_(): Tried to put elements into an empty tensor");
  if (count == 0) return {self.value};
  auto& builder = context.builder();
  context.CheckIndicesInRange(index_operand.value, numel, true);
  Value index = builder.Reshape(NormalizeIndex(context, index_operand.value, numel, true), {count});
  Value flat = builder.Reshape(self.value, {numel});
  Value updates = builder.Reshape(source.value, {count});
  FunctionBuilder::ScatterDimensions dimensions;
  dimensions.inserted_window_dims = {0};
  dimensions.scatter_dims_to_operand_dims = {0};
  dimensions.index_vector_dim = 1;
  const bool accumulate = context.Bool(operands[3]);
  Value result = builder.Scatter({flat}, index, {updates}, dimensions,
                                 accumulate ? AddBody() : FunctionBuilder::RegionBody())[0];
  return {builder.Reshape(result, self.value.dims())};
}
TORCH_TPU_LOWERING(Put, "aten::put", "aten::put_", "aten::put.out");

// Scatter with a named reduction ("sum", "prod", "mean", "amax", "amin"), optionally ignoring
// the existing values at scattered positions (include_self=False); shared by scatter_reduce and
// index_reduce, which differ only in how indices address self.
Value ScatterReduce(LoweringContext& context, Value self, Value indices, Value updates,
                    const FunctionBuilder::ScatterDimensions& dimensions, const std::string& reduce,
                    bool include_self) {
  auto& b = context.builder();
  const ElementType type = self.element_type();
  const bool is_float = stablehlo::IsFloat(type);
  TORCH_CHECK(reduce == "sum" || reduce == "prod" || reduce == "mean" || reduce == "amax" ||
                  reduce == "amin",
              context.op_name(),
              ": reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
  double identity = 0.0;
  if (reduce == "prod") identity = 1.0;
  if (reduce == "amax") identity = is_float ? -INFINITY : -9.2e18;
  if (reduce == "amin") identity = is_float ? INFINITY : 9.2e18;
  auto splat = [&](double value, const std::vector<int64_t>& dims) {
    if (is_float || (value > -1e18 && value < 1e18)) return b.Constant(type, value, dims);
    return b.BroadcastInDim(ExtremeIdentity(b, type, /*maximum=*/value < 0), dims, {});
  };
  Value base = self;
  if (!include_self) {
    base = b.Scatter({self}, indices, {splat(identity, updates.dims())}, dimensions,
                     FunctionBuilder::RegionBody())[0];
  }
  const std::string kind = reduce;
  Value reduced = b.Scatter(
      {base}, indices, {updates}, dimensions,
      [kind](FunctionBuilder& body, std::span<const Value> args) {
        if (kind == "prod") return std::vector<Value>{body.Multiply(args[0], args[1])};
        if (kind == "amax" || kind == "amin") {
          return std::vector<Value>{NanPropagatingExtremum(body, args[0], args[1], kind == "amax")};
        }
        return std::vector<Value>{body.Add(args[0], args[1])};
      })[0];
  if (reduce != "mean") return reduced;
  Value counts = b.Scatter({splat(include_self ? 1.0 : 0.0, self.dims())}, indices,
                           {splat(1.0, updates.dims())}, dimensions,
                           [](FunctionBuilder& body, std::span<const Value> args) {
                             return std::vector<Value>{body.Add(args[0], args[1])};
                           })[0];
  counts = b.Maximum(counts, splat(1.0, self.dims()));
  Value mean = b.Divide(reduced, counts);
  if (!is_float) {
    // Integer means round toward negative infinity, like PyTorch.
    Value zero = splat(0.0, self.dims());
    Value adjust = b.And(
        b.Compare(b.Remainder(reduced, counts), zero, FunctionBuilder::ComparisonDirection::kNe),
        b.Compare(reduced, zero, FunctionBuilder::ComparisonDirection::kLt));
    mean = b.Select(adjust, b.Subtract(mean, splat(1.0, self.dims())), mean);
  }
  return mean;
}

// scatter_reduce.two(self, int dim, Tensor index, Tensor src, str reduce, *, bool
// include_self=True)
std::vector<Value> ScatterReduceOp(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  CheckIndexDtype(context, operands[2]);
  auto& b = context.builder();
  if (self.value.rank() == 0) return OnZeroDimSelf(context, operands, {2, 3}, ScatterReduceOp);
  const int64_t rank = self.value.rank();
  const int64_t dim = context.WrapDim(context.Int(operands[1]), rank);
  Value index = NormalizeIndex(context, operands[2].value, 0, false);
  context.CheckIndicesInRange(index, self.value.dims()[dim], false);
  Value updates = CropTo(context, context.Convert(operands[3].value, self.dtype), index.dims());
  const FunctionBuilder::ScatterDimensions dimensions = PerElement(rank);
  return {ScatterReduce(context, self.value, CoordinatesAlong(context, index, dim), updates,
                        dimensions, operands[4].ivalue.toStringRef(), context.Bool(operands[5]))};
}
TORCH_TPU_LOWERING(ScatterReduceOp, "aten::scatter_reduce.two", "aten::scatter_reduce_.two",
                   "aten::scatter_reduce.two_out");

// scatter.reduce / scatter.value_reduce(self, dim, index, src or value, *, str reduce): the older
// interface of scatter_reduce (self included), whose reductions are named add and multiply.
std::vector<Value> ScatterWithReduce(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  CheckIndexDtype(context, operands[2]);
  const std::string& reduce = operands[4].ivalue.toStringRef();
  TORCH_CHECK(reduce == "add" || reduce == "multiply", context.op_name(),
              ": reduce argument must be either add or multiply.");
  if (self.value.rank() == 0) return OnZeroDimSelf(context, operands, {2, 3}, ScatterWithReduce);
  const int64_t rank = self.value.rank();
  const int64_t dim = context.WrapDim(context.Int(operands[1]), rank);
  Value index = NormalizeIndex(context, operands[2].value, 0, false);
  context.CheckIndicesInRange(index, self.value.dims()[dim], false);
  Value updates = context.Convert(operands[3].value, self.dtype);
  updates = operands[3].kind == Operand::Kind::kScalar ? context.BroadcastTo(updates, index.dims())
                                                       : CropTo(context, updates, index.dims());
  return {ScatterReduce(context, self.value, CoordinatesAlong(context, index, dim), updates,
                        PerElement(rank), reduce == "add" ? "sum" : "prod", true)};
}
TORCH_TPU_LOWERING(ScatterWithReduce, "aten::scatter.reduce", "aten::scatter_.reduce",
                   "aten::scatter.reduce_out");
TORCH_TPU_LOWERING(ScatterWithReduce, "aten::scatter.value_reduce", "aten::scatter_.value_reduce",
                   "aten::scatter.value_reduce_out");

// index_reduce(self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True)
std::vector<Value> IndexReduceOp(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  CheckIndexDtype(context, operands[2]);
  auto& b = context.builder();
  if (self.value.rank() == 0) return OnZeroDimSelf(context, operands, {3}, IndexReduceOp);
  const int64_t rank = self.value.rank();
  const int64_t dim = context.WrapDim(context.Int(operands[1]), rank);
  Value index = NormalizeIndex(context, operands[2].value, 0, false);
  context.CheckIndicesInRange(index, self.value.dims()[dim], false);
  if (index.rank() == 0) index = b.Reshape(index, {1});
  Value source = context.Convert(operands[3].value, self.dtype);
  if (source.rank() < rank) source = b.Reshape(source, self.value.dims());
  const FunctionBuilder::ScatterDimensions dimensions = AlongDim(rank, dim);
  return {ScatterReduce(context, self.value, index, source, dimensions,
                        operands[4].ivalue.toStringRef(), context.Bool(operands[5]))};
}
TORCH_TPU_LOWERING(IndexReduceOp, "aten::index_reduce", "aten::index_reduce_",
                   "aten::index_reduce.out");

// embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False)
std::vector<Value> Embedding(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& weight = operands[0];
  CheckIndexDtype(context, operands[1]);
  TORCH_CHECK(weight.value.rank() == 2, context.op_name(), ": 'weight' must be 2-D");
  Value indices = NormalizeIndex(context, operands[1].value, 0, false);
  TORCH_CHECK(weight.value.dims()[0] > 0 || indices.type().NumElements() == 0, context.op_name(),
              ": index_select(): self indexing axis dim should be positive");
  context.CheckIndicesInRange(indices, weight.value.dims()[0], false);
  const int64_t batch_rank = indices.rank();
  FunctionBuilder::GatherDimensions dimensions;
  dimensions.offset_dims = {batch_rank};
  dimensions.collapsed_slice_dims = {0};
  dimensions.start_index_map = {0};
  dimensions.index_vector_dim = batch_rank;
  return {GatherFrom(context, weight.value, indices, dimensions, {1, weight.value.dims()[1]})};
}
TORCH_TPU_LOWERING(Embedding, "aten::embedding");

// ---- embedding_bag ------------------------------------------------------------------------
// Bags are runs of `indices` that start at `offsets`; a bag reduces its rows of `weight` by sum
// (optionally weighted per sample), mean or max. Positions whose index is padding_idx (when it is
// not negative) take part in no bag, nor do positions after the last offset when it closes the
// last bag (include_last_offset). Results follow the meta kernel's shapes: offset2bag has one
// entry per index, bag_size one per offset, max_indices (bags, D) in max mode and none otherwise.

enum EmbeddingBagMode : int64_t { kBagSum = 0, kBagMean = 1, kBagMax = 2 };

int64_t BagMode(LoweringContext& context, const Operand& mode) {
  const int64_t value = context.Int(mode);
  TORCH_CHECK(value >= kBagSum && value <= kBagMax, context.op_name(),
              ": `mode` must be sum, mean, or max.");
  return value;
}

void CheckBagIndexDtype(LoweringContext& context, const Operand& tensor, int argument,
                        const char* name) {
  TORCH_CHECK(tensor.dtype == c10::kLong || tensor.dtype == c10::kInt, context.op_name(),
              ": Expected tensor for argument #", argument, " '", name,
              "' to have one of the following scalar types: Long, Int; but got ", tensor.dtype,
              " instead (while checking arguments for embedding_bag)");
}

Value Flat(LoweringContext& context, Value value) {
  return context.builder().Reshape(value, {value.type().NumElements()});
}

// (count, width) rows of a 2-D table at s64 `index` (count).
Value RowsOf(LoweringContext& context, Value table, Value index) {
  FunctionBuilder::GatherDimensions dimensions;
  dimensions.offset_dims = {1};
  dimensions.collapsed_slice_dims = {0};
  dimensions.start_index_map = {0};
  dimensions.index_vector_dim = 1;
  return GatherFrom(context, table, index, dimensions, {1, table.dims()[1]});
}

// Adds each row of `rows` (count, ...) into row index[i] of `zeros`: a segment sum.
Value AddRows(LoweringContext& context, Value zeros, Value index, Value rows) {
  FunctionBuilder::ScatterDimensions dimensions;
  for (int64_t d = 1; d < rows.rank(); ++d) dimensions.update_window_dims.push_back(d);
  dimensions.inserted_window_dims = {0};
  dimensions.scatter_dims_to_operand_dims = {0};
  dimensions.index_vector_dim = 1;
  return context.builder().Scatter({zeros}, index, {rows}, dimensions, AddBody())[0];
}

// `value` (count) broadcast along a trailing dim to (count, width).
Value PerRow(LoweringContext& context, Value value, int64_t width) {
  const int64_t count = value.dims()[0];
  return context.builder().BroadcastInDim(value, {count, width}, {0});
}

// Which positions count: a pred (count), false where the index is padding_idx.
Value NotPadding(LoweringContext& context, Value index, int64_t padding_idx) {
  const int64_t count = index.dims()[0];
  if (padding_idx < 0) return context.builder().Constant(ElementType::kPred, 1.0, {count});
  return context.builder().Compare(index, context.ConstantInt(padding_idx, c10::kLong, {count}),
                                   FunctionBuilder::ComparisonDirection::kNe);
}

// The bag of each of `count` positions: the number of bag starts at or before it, minus one.
// Also declares CPU's checks on offsets: offsets[0] == 0, non-decreasing, at most `count`.
Value OffsetToBag(LoweringContext& context, Value offsets, int64_t bags, int64_t count) {
  auto& b = context.builder();
  const int64_t total = offsets.dims()[0];
  if (total > 0) {
    Value first = b.Reshape(b.Slice(offsets, {0}, {1}, {1}), {});
    context.CheckNotViolated(
        b.Compare(first, context.ConstantInt(0, c10::kLong), Direction::kNe),
        "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
        "position 0");
    Value last = b.Reshape(b.Slice(offsets, {total - 1}, {total}, {1}), {});
    context.CheckNotViolated(
        b.Compare(last, context.ConstantInt(count, c10::kLong), Direction::kGt),
        "offsets[-1] can not be greater than input's length " + std::to_string(count));
  }
  if (total > 1) {
    Value decreasing = b.Compare(b.Slice(offsets, {1}, {total}, {1}),
                                 b.Slice(offsets, {0}, {total - 1}, {1}), Direction::kLt);
    context.CheckNotViolated(ReduceAny(context, decreasing), "offsets must be non-decreasing");
  }
  if (bags == 0 || count == 0) return context.ConstantInt(0, c10::kLong, {count});
  Value starts = b.BroadcastInDim(b.Slice(offsets, {0}, {bags}, {1}), {count, bags}, {1});
  Value positions = b.Iota(TensorType{ElementType::kS64, {count, bags}}, 0);
  Value started = context.Convert(b.Compare(starts, positions, Direction::kLe), c10::kLong);
  Value sum = b.Reduce({started}, {context.ConstantInt(0, c10::kLong)}, {1},
                       [](FunctionBuilder& body, std::span<const Value> args) {
                         return std::vector<Value>{body.Add(args[0], args[1])};
                       })[0];
  // Positions before offsets[0] (an error reported above) stay in bag 0.
  return b.Maximum(b.Subtract(sum, context.ConstantInt(1, c10::kLong, {count})),
                   context.ConstantInt(0, c10::kLong, {count}));
}

// _embedding_bag / _embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq,
//   mode, sparse, Tensor? per_sample_weights, include_last_offset, padding_idx)
//   -> (output, offset2bag, bag_size, max_indices)
std::vector<Value> EmbeddingBag(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const Operand& weight = operands[0];
  CheckBagIndexDtype(context, operands[1], 1, "indices");
  CheckBagIndexDtype(context, operands[2], 2, "offsets");
  TORCH_CHECK(weight.value.rank() == 2, context.op_name(),
              ": weight has to be a 2D Tensor, but got Tensor of dimension ", weight.value.rank());
  TORCH_CHECK(operands[2].value.rank() == 1, context.op_name(),
              ": offsets has to be a 1D Tensor, but got Tensor of dimension ",
              operands[2].value.rank());
  const int64_t mode = BagMode(context, operands[4]);
  const Operand& sample_weights = operands[6];
  const bool include_last_offset = context.Bool(operands[7]);
  const int64_t padding_idx = context.Int(operands[8]);
  Value index = Flat(context, context.Convert(operands[1].value, c10::kLong));
  Value offsets = context.Convert(operands[2].value, c10::kLong);
  const int64_t count = index.dims()[0];
  const int64_t width = weight.value.dims()[1];
  const int64_t total = offsets.dims()[0];
  TORCH_CHECK(!include_last_offset || total >= 1, context.op_name(),
              ": include_last_offset: number of offset should be at least 1");
  if (!sample_weights.is_none()) {
    TORCH_CHECK(mode == kBagSum, context.op_name(),
                ": embedding_bag: per_sample_weights only supported with mode='sum'");
    TORCH_CHECK(sample_weights.value.type().NumElements() == count, context.op_name(),
                ": Expected per_sample_weights.value().numel() == indices.numel() to be true, "
                "but got false.");
  }
  const int64_t bags = include_last_offset ? total - 1 : total;
  context.CheckIndicesInRange(index, weight.value.dims()[0], false);
  Value bag = OffsetToBag(context, offsets, bags, count);
  Value keep = NotPadding(context, index, padding_idx);
  if (include_last_offset && count > 0) {
    // The last offset closes the last bag: positions from it on belong to no bag.
    Value end = b.BroadcastInDim(b.Slice(offsets, {total - 1}, {total}, {1}), {count}, {0});
    Value positions = b.Iota(TensorType{ElementType::kS64, {count}}, 0);
    keep = b.And(keep, b.Compare(positions, end, Direction::kLt));
  }
  Value bag_size = AddRows(context, context.ConstantInt(0, c10::kLong, {bags}), bag,
                           context.Convert(keep, c10::kLong));
  const c10::ScalarType compute = ComputeDtype(weight.dtype);
  Value rows = context.Convert(RowsOf(context, weight.value, index), compute);
  Value output, max_indices = context.ConstantInt(0, c10::kLong, {0});
  if (mode == kBagMax) {
    // Each bag keeps, per column, the largest value and the first position that holds it
    // (CPU's strict `>` scan); padding positions carry -inf at position `count`, which never
    // wins, so empty bags keep position `count` and become zeros with max index 0.
    Value positions = b.Iota(TensorType{ElementType::kS64, {count, width}}, 0);
    Value none = context.ConstantInt(count, c10::kLong, {count, width});
    Value wide_keep = PerRow(context, keep, width);
    Value values = b.Select(wide_keep, rows, context.Constant(-INFINITY, compute, {count, width}));
    positions = b.Select(wide_keep, positions, none);
    FunctionBuilder::ScatterDimensions dimensions;
    dimensions.update_window_dims = {1};
    dimensions.inserted_window_dims = {0};
    dimensions.scatter_dims_to_operand_dims = {0};
    dimensions.index_vector_dim = 1;
    auto best = b.Scatter({context.Constant(-INFINITY, compute, {bags, width}),
                           context.ConstantInt(count, c10::kLong, {bags, width})},
                          bag, {values, positions}, dimensions,
                          [](FunctionBuilder& body, std::span<const Value> args) {
                            Value greater = body.Compare(args[2], args[0], Direction::kGt);
                            Value earlier_tie =
                                body.And(body.Compare(args[2], args[0], Direction::kEq),
                                         body.Compare(args[3], args[1], Direction::kLt));
                            Value take = body.Or(greater, earlier_tie);
                            return std::vector<Value>{body.Select(take, args[2], args[0]),
                                                      body.Select(take, args[3], args[1])};
                          });
    Value empty =
        b.Compare(best[1], context.ConstantInt(count, c10::kLong, {bags, width}), Direction::kEq);
    output = b.Select(empty, context.Constant(0.0, compute, {bags, width}), best[0]);
    Value padded = b.Concatenate({index, context.ConstantInt(0, c10::kLong, {1})}, 0);
    max_indices = b.Gather1D(padded, best[1]);
  } else {
    if (!sample_weights.is_none()) {
      Value scale = Flat(context, context.Convert(sample_weights.value, compute));
      rows = b.Multiply(rows, PerRow(context, scale, width));
    }
    rows = b.Select(PerRow(context, keep, width), rows,
                    context.Constant(0.0, compute, {count, width}));
    output = AddRows(context, context.Constant(0.0, compute, {bags, width}), bag, rows);
    if (mode == kBagMean) {
      Value divisor =
          b.Maximum(context.Convert(bag_size, compute), context.Constant(1.0, compute, {bags}));
      output = b.Divide(output, PerRow(context, divisor, width));
    }
  }
  // bag_size has one entry per offset, the meta kernel's shape: a last offset that only closes
  // the last bag (include_last_offset) has an empty bag of its own.
  if (bags < total) {
    bag_size = b.Concatenate({bag_size, context.ConstantInt(0, c10::kLong, {total - bags})}, 0);
  }
  return {context.Convert(output, weight.dtype), bag, bag_size, max_indices};
}
TORCH_TPU_LOWERING(EmbeddingBag, "aten::_embedding_bag", "aten::_embedding_bag.out");
TORCH_TPU_LOWERING(EmbeddingBag, "aten::_embedding_bag_forward_only",
                   "aten::_embedding_bag_forward_only.out");

// The weight gradient of embedding_bag, shared by the two backward ops: grad (bags, D) flows to
// the rows each bag read, scaled as the forward scaled them.
Value EmbeddingBagWeightGrad(LoweringContext& context, const Operand& grad_operand, Value index,
                             Value bag, Value bag_size, Value max_indices, int64_t num_weights,
                             bool scale_grad_by_freq, int64_t mode, const Operand& sample_weights,
                             int64_t padding_idx) {
  auto& b = context.builder();
  const c10::ScalarType compute = ComputeDtype(grad_operand.dtype);
  Value grad = context.Convert(grad_operand.value, compute);
  TORCH_CHECK(grad.rank() == 2, context.op_name(), ": expected a 2-D grad, got ", grad.rank(),
              "-D");
  const int64_t bags = grad.dims()[0];
  const int64_t width = grad.dims()[1];
  const int64_t count = index.dims()[0];
  Value zeros = context.Constant(0.0, compute, {num_weights, width});
  if (mode == kBagMax) {
    // Each (bag, column) sends its gradient to the row that won it; empty bags send nothing.
    context.CheckIndicesInRange(max_indices, num_weights, false);
    Value sizes = b.Slice(bag_size, {0}, {bags}, {1});
    Value filled = PerRow(context,
                          b.Compare(sizes, context.ConstantInt(0, c10::kLong, {bags}),
                                    FunctionBuilder::ComparisonDirection::kGt),
                          width);
    grad = b.Select(filled, grad, context.Constant(0.0, compute, {bags, width}));
    Value columns = b.Iota(TensorType{ElementType::kS64, {bags, width}}, 1);
    Value coordinates = b.Concatenate(
        {b.Reshape(max_indices, {bags, width, 1}), b.Reshape(columns, {bags, width, 1})}, 2);
    FunctionBuilder::ScatterDimensions dimensions;
    dimensions.inserted_window_dims = {0, 1};
    dimensions.scatter_dims_to_operand_dims = {0, 1};
    dimensions.index_vector_dim = 2;
    return b.Scatter({zeros}, coordinates, {grad}, dimensions, AddBody())[0];
  }
  Value keep = NotPadding(context, index, padding_idx);
  // Padding positions read no row, so their index is neither checked nor scattered to.
  Value safe_index = b.Select(keep, index, context.ConstantInt(0, c10::kLong, {count}));
  context.CheckIndicesInRange(safe_index, num_weights, false);
  Value rows = RowsOf(context, grad, bag);
  Value scale = context.Convert(keep, compute);
  if (!sample_weights.is_none()) {
    scale = b.Multiply(scale, Flat(context, context.Convert(sample_weights.value, compute)));
  }
  if (mode == kBagMean) {
    Value sizes = b.Gather1D(context.Convert(bag_size, compute), bag);
    scale = b.Divide(scale, b.Maximum(sizes, context.Constant(1.0, compute, {count})));
  }
  if (scale_grad_by_freq) {
    // Each row's gradient is divided by how often its index occurs in the batch.
    Value frequency = AddRows(context, context.Constant(0.0, compute, {num_weights}), safe_index,
                              context.Constant(1.0, compute, {count}));
    scale = b.Divide(scale, b.Gather1D(frequency, safe_index));
  }
  return AddRows(context, zeros, safe_index, b.Multiply(rows, PerRow(context, scale, width)));
}

// _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
//   SymInt num_weights, scale_grad_by_freq, mode, sparse, Tensor? per_sample_weights,
//   padding_idx)
std::vector<Value> EmbeddingBagBackward(LoweringContext& context,
                                        std::span<const Operand> operands) {
  // NotImplementedError, like every other sparse-layout op on tpu.
  TORCH_CHECK_NOT_IMPLEMENTED(!context.Bool(operands[9]), context.op_name(),
                              ": sparse COO gradients are not supported on tpu. Use "
                              "nn.EmbeddingBag with sparse=False there.");
  const int64_t mode = BagMode(context, operands[8]);
  Value index = Flat(context, context.Convert(operands[1].value, c10::kLong));
  const int64_t count = index.dims()[0];
  Value bag = Flat(context, context.Convert(operands[3].value, c10::kLong));
  if (bag.dims()[0] != count) {
    // offset2bag from another producer may be empty (CPU leaves it so in sum mode): rebuild it.
    Value offsets = context.Convert(operands[2].value, c10::kLong);
    bag = OffsetToBag(context, offsets, operands[0].value.dims()[0], count);
  }
  Value result = EmbeddingBagWeightGrad(
      context, operands[0], index, bag, context.Convert(operands[4].value, c10::kLong),
      context.Convert(operands[5].value, c10::kLong), context.Int(operands[6]),
      context.Bool(operands[7]), mode, operands[10], context.Int(operands[11]));
  return {context.Convert(result, operands[0].dtype)};
}
TORCH_TPU_LOWERING(EmbeddingBagBackward, "aten::_embedding_bag_backward");

// _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
//   SymInt num_weights, scale_grad_by_freq, mode, Tensor? per_sample_weights, padding_idx)
std::vector<Value> EmbeddingBagDenseBackward(LoweringContext& context,
                                             std::span<const Operand> operands) {
  const int64_t mode = BagMode(context, operands[7]);
  Value index = Flat(context, context.Convert(operands[1].value, c10::kLong));
  Value bag = Flat(context, context.Convert(operands[2].value, c10::kLong));
  TORCH_CHECK(bag.dims() == index.dims(), context.op_name(),
              ": expected offset2bag to have one entry per index (", index.dims()[0], "), got ",
              bag.dims()[0]);
  Value result = EmbeddingBagWeightGrad(
      context, operands[0], index, bag, context.Convert(operands[3].value, c10::kLong),
      context.Convert(operands[4].value, c10::kLong), context.Int(operands[5]),
      context.Bool(operands[6]), mode, operands[8], context.Int(operands[9]));
  return {context.Convert(result, operands[0].dtype)};
}
TORCH_TPU_LOWERING(EmbeddingBagDenseBackward, "aten::_embedding_bag_dense_backward",
                   "aten::_embedding_bag_dense_backward.out");

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
//   padding_idx): d(output)/d(per_sample_weights[i]) is the row it scaled, so each gradient is
// the dot product of its bag's gradient with that row (zero at padding positions).
std::vector<Value> EmbeddingBagSampleWeightsBackward(LoweringContext& context,
                                                     std::span<const Operand> operands) {
  auto& b = context.builder();
  TORCH_CHECK(context.Int(operands[5]) == kBagSum, context.op_name(),
              ": embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  const c10::ScalarType compute = ComputeDtype(operands[0].dtype);
  Value grad = context.Convert(operands[0].value, compute);
  Value weight = context.Convert(operands[1].value, compute);
  Value index = Flat(context, context.Convert(operands[2].value, c10::kLong));
  Value bag = Flat(context, context.Convert(operands[4].value, c10::kLong));
  const int64_t count = index.dims()[0];
  context.CheckIndicesInRange(index, weight.dims()[0], false);
  Value products = b.Multiply(RowsOf(context, grad, bag), RowsOf(context, weight, index));
  Value dots = b.Reduce({products}, {context.Constant(0.0, compute)}, {1},
                        [](FunctionBuilder& body, std::span<const Value> args) {
                          return std::vector<Value>{body.Add(args[0], args[1])};
                        })[0];
  Value keep = NotPadding(context, index, context.Int(operands[6]));
  dots = b.Select(keep, dots, context.Constant(0.0, compute, {count}));
  return {context.Convert(dots, operands[0].dtype)};
}
TORCH_TPU_LOWERING(EmbeddingBagSampleWeightsBackward,
                   "aten::_embedding_bag_per_sample_weights_backward",
                   "aten::_embedding_bag_per_sample_weights_backward.out");

// take(self, Tensor index): indexes the flattened input; negative indices count from the end.
std::vector<Value> Take(LoweringContext& context, std::span<const Operand> operands) {
  CheckIndexDtype(context, operands[1]);
  const int64_t numel = operands[0].value.type().NumElements();
  auto& builder = context.builder();
  TORCH_CHECK_INDEX(numel > 0 || operands[1].value.type().NumElements() == 0, context.op_name(),
                    ": take(): tried to take from an empty tensor");
  Value flat = builder.Reshape(operands[0].value, {numel});
  context.CheckIndicesInRange(operands[1].value, numel, true);
  Value index = NormalizeIndex(context, operands[1].value, numel, true);
  return {builder.Gather1D(flat, index)};
}
TORCH_TPU_LOWERING(Take, "aten::take", "aten::take.out");

// Advanced indexing with integer index tensors (None = full slice), shared by index and
// index_put. Describes the gather/scatter geometry.
struct AdvancedIndex {
  std::vector<int64_t> indexed_dims;  // self dims that take an index tensor
  Value coordinates;                  // broadcast shape + [len(indexed_dims)]
  std::vector<int64_t> broadcast_shape;
  std::vector<int64_t> result_dims;
  std::vector<int64_t> offset_dims;  // positions of the un-indexed dims in the result
};

AdvancedIndex MakeAdvancedIndex(LoweringContext& context, const Operand& self,
                                const Operand& indices) {
  TORCH_CHECK_INDEX(indices.kind == Operand::Kind::kTensorList, context.op_name(),
                    ": expected a list of index tensors");
  const auto& self_dims = self.value.dims();
  TORCH_CHECK_INDEX(indices.values.size() <= self_dims.size(), context.op_name(),
                    ": too many indices for tensor of dimension ", self_dims.size(), " (got ",
                    indices.values.size(), ")");
  AdvancedIndex result;
  std::vector<Value> index_values;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t d = 0; d < indices.values.size(); ++d) {
    if (!indices.values[d].valid()) continue;
    TORCH_CHECK_INDEX(indices.dtypes[d] == c10::kLong || indices.dtypes[d] == c10::kInt,
                      context.op_name(),
                      ": tensors used as indices must be long or int tensors "
                      "(bool masks are expanded before lowering), got ",
                      indices.dtypes[d]);
    result.indexed_dims.push_back(static_cast<int64_t>(d));
    TORCH_CHECK_INDEX(self_dims[d] > 0 || indices.values[d].type().NumElements() == 0,
                      context.op_name(), ": index is out of bounds for dimension with size 0");
    context.CheckIndicesInRange(indices.values[d], self_dims[d], true);
    index_values.push_back(NormalizeIndex(context, indices.values[d], self_dims[d], true));
    shapes.push_back(index_values.back().dims());
  }
  TORCH_CHECK_INDEX(!index_values.empty(), context.op_name(), ": no index tensors given");
  result.broadcast_shape = context.BroadcastShape(shapes);
  auto& builder = context.builder();
  std::vector<int64_t> column = result.broadcast_shape;
  column.push_back(1);
  std::vector<Value> columns;
  for (Value& index : index_values) {
    columns.push_back(builder.Reshape(context.BroadcastTo(index, result.broadcast_shape), column));
  }
  const int64_t batch_rank = static_cast<int64_t>(result.broadcast_shape.size());
  result.coordinates = builder.Concatenate(columns, batch_rank);
  // PyTorch puts the broadcast dims where the indexed dims were when those are adjacent, else
  // in front.
  bool adjacent = true;
  for (size_t i = 1; i < result.indexed_dims.size(); ++i) {
    adjacent = adjacent && result.indexed_dims[i] == result.indexed_dims[i - 1] + 1;
  }
  const int64_t insert_at = adjacent ? result.indexed_dims.front() : 0;
  int64_t position = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(self_dims.size()); ++d) {
    if (position == insert_at) {
      for (int64_t size : result.broadcast_shape) result.result_dims.push_back(size);
      position += batch_rank;
    }
    if (std::find(result.indexed_dims.begin(), result.indexed_dims.end(), d) !=
        result.indexed_dims.end()) {
      continue;
    }
    result.offset_dims.push_back(static_cast<int64_t>(result.result_dims.size()));
    result.result_dims.push_back(self_dims[d]);
    ++position;
  }
  if (position <= insert_at) {
    for (int64_t size : result.broadcast_shape) result.result_dims.push_back(size);
  }
  return result;
}

// index.Tensor(self, Tensor?[] indices)
std::vector<Value> Index(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  AdvancedIndex index = MakeAdvancedIndex(context, self, operands[1]);
  FunctionBuilder::GatherDimensions dimensions;
  dimensions.offset_dims = index.offset_dims;
  dimensions.collapsed_slice_dims = index.indexed_dims;
  dimensions.start_index_map = index.indexed_dims;
  dimensions.index_vector_dim = static_cast<int64_t>(index.broadcast_shape.size());
  std::vector<int64_t> slice_sizes = self.value.dims();
  for (int64_t d : index.indexed_dims) slice_sizes[d] = 1;
  return {GatherFrom(context, self.value, index.coordinates, dimensions, slice_sizes)};
}
TORCH_TPU_LOWERING(Index, "aten::index.Tensor", "aten::index.Tensor_out");

// index_put(self, Tensor?[] indices, Tensor values, bool accumulate=False)
std::vector<Value> IndexPut(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  TORCH_CHECK(operands[2].dtype == self.dtype, context.op_name(),
              ": Index put requires the source and destination dtypes match, got ", self.dtype,
              " for the destination and ", operands[2].dtype, " for the source.");
  AdvancedIndex index = MakeAdvancedIndex(context, self, operands[1]);
  const bool accumulate = operands.size() > 3 && context.Bool(operands[3]);
  Value values =
      context.BroadcastTo(context.Convert(operands[2].value, self.dtype), index.result_dims);
  FunctionBuilder::ScatterDimensions dimensions;
  dimensions.update_window_dims = index.offset_dims;
  dimensions.inserted_window_dims = index.indexed_dims;
  dimensions.scatter_dims_to_operand_dims = index.indexed_dims;
  dimensions.index_vector_dim = static_cast<int64_t>(index.broadcast_shape.size());
  return {context.builder().Scatter({self.value}, index.coordinates, {values}, dimensions,
                                    accumulate ? AddBody() : FunctionBuilder::RegionBody())[0]};
}
TORCH_TPU_LOWERING(IndexPut, "aten::index_put", "aten::index_put_");
TORCH_TPU_LOWERING(IndexPut, "aten::_index_put_impl", "aten::_index_put_impl_");

// (index, int lower, int upper): [min(index), max(index)] as s64[2], for debug-mode checks.
std::vector<Value> IndexBounds(LoweringContext& context, std::span<const Operand> operands) {
  auto& builder = context.builder();
  Value index = context.Convert(operands[0].value, c10::kLong);
  const int64_t count = index.type().NumElements();
  Value flat = builder.Reshape(index, {count});
  std::vector<int64_t> all = {0};
  auto reduce = [&](bool minimum) {
    Value init = builder.ConstantInt(ElementType::kS64, minimum ? INT64_MAX : INT64_MIN);
    return builder.Reduce({flat}, {init}, all,
                          [minimum](FunctionBuilder& body, std::span<const Value> args) {
                            return std::vector<Value>{minimum ? body.Minimum(args[0], args[1])
                                                              : body.Maximum(args[0], args[1])};
                          })[0];
  };
  return {builder.Concatenate(
      {builder.Reshape(reduce(true), {1}), builder.Reshape(reduce(false), {1})}, 0)};
}
TORCH_TPU_LOWERING(IndexBounds, "torch_tpu::index_bounds");

}  // namespace

}  // namespace torch_tpu::lowering

namespace torch_tpu::lowering {
namespace {

// Flat positions of the first `count` non-zero elements of `mask`, ascending (s64[count]).
Value NonzeroPositions(LoweringContext& context, Value mask, int64_t count) {
  auto& builder = context.builder();
  const int64_t n = mask.type().NumElements();
  Value flat = builder.Reshape(context.Convert(mask, c10::kBool), {n});
  Value positions = builder.Iota(TensorType{ElementType::kS64, {n}}, 0);
  // Zeros sort after every real position.
  Value keys = builder.Select(flat, positions, builder.ConstantInt(ElementType::kS64, n, {n}));
  Value sorted = builder.Sort(
      {keys}, 0, /*is_stable=*/false, [](FunctionBuilder& body, std::span<const Value> args) {
        return std::vector<Value>{
            body.Compare(args[0], args[1], FunctionBuilder::ComparisonDirection::kLt)};
      })[0];
  return builder.Slice(sorted, {0}, {count}, {1});
}

// (self, int count): nonzero coordinates, s64[count, rank]; count is known to the host.
std::vector<Value> Nonzero(LoweringContext& context, std::span<const Operand> operands) {
  const Value self = operands[0].value;
  const int64_t count = context.Int(operands[1]);
  auto& builder = context.builder();
  Value positions = NonzeroPositions(context, self, count);
  const auto& dims = self.dims();
  std::vector<Value> columns;
  int64_t stride = 1;
  std::vector<int64_t> strides(dims.size());
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= dims[d];
  }
  for (size_t d = 0; d < dims.size(); ++d) {
    Value coordinate = builder.Remainder(
        builder.Divide(positions, builder.ConstantInt(ElementType::kS64, strides[d], {count})),
        builder.ConstantInt(ElementType::kS64, dims[d], {count}));
    columns.push_back(builder.Reshape(coordinate, {count, 1}));
  }
  if (columns.empty()) return {builder.ConstantInt(ElementType::kS64, 0, {count, 0})};
  return {builder.Concatenate(columns, 1)};
}
TORCH_TPU_LOWERING(Nonzero, "torch_tpu::nonzero");

// (self, mask, int count): elements of self where the (broadcast) mask is true.
std::vector<Value> MaskedSelect(LoweringContext& context, std::span<const Operand> operands) {
  std::vector<std::vector<int64_t>> shapes = {operands[0].value.dims(), operands[1].value.dims()};
  const auto shape = context.BroadcastShape(shapes);
  Value self = context.BroadcastTo(operands[0].value, shape);
  Value mask = context.BroadcastTo(operands[1].value, shape);
  const int64_t count = context.Int(operands[2]);
  Value flat = context.builder().Reshape(self, {self.type().NumElements()});
  return {context.builder().Gather1D(flat, NonzeroPositions(context, mask, count))};
}
TORCH_TPU_LOWERING(MaskedSelect, "torch_tpu::masked_select");

// masked_scatter(self, mask, source): the positions where mask (broadcast) is true take source's
// elements in order: the k-th true position takes source.flatten()[k], k an inclusive count of
// the true positions so far.
std::vector<Value> MaskedScatter(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  TORCH_CHECK(operands[1].dtype == c10::kBool, context.op_name(),
              ": masked_scatter_ only supports boolean masks, but got mask with dtype ",
              operands[1].dtype);
  TORCH_CHECK(operands[0].dtype == operands[2].dtype, context.op_name(),
              ": masked_scatter: expected self and source to have same dtypes but got",
              operands[0].dtype, " and ", operands[2].dtype);
  // The in-place form keeps self's shape; the functional one broadcasts self and mask.
  std::vector<std::vector<int64_t>> shapes = {operands[0].value.dims(), operands[1].value.dims()};
  const std::vector<int64_t> dims = context.BroadcastShape(shapes);
  Value self = context.BroadcastTo(operands[0].value, dims);
  Value mask = context.BroadcastTo(operands[1].value, dims);
  int64_t n = 1;
  for (int64_t size : dims) n *= size;
  const int64_t available = operands[2].value.type().NumElements();
  if (n == 0) return {self};
  Value flat_mask = b.Reshape(mask, {n});
  Value ones = b.Convert(flat_mask, ElementType::kS64);
  Value count =
      b.ReduceWindow({ones}, {b.ConstantInt(ElementType::kS64, 0)}, {n}, {}, {}, {}, {{n - 1, 0}},
                     [](FunctionBuilder& body, std::span<const Value> args) {
                       return std::vector<Value>{body.Add(args[0], args[1])};
                     })[0];
  Value total = b.Reshape(b.Slice(count, {n - 1}, {n}, {1}), {});
  context.CheckNotViolated(
      b.Compare(total, b.ConstantInt(ElementType::kS64, available),
                FunctionBuilder::ComparisonDirection::kGt),
      context.op_name() + ": Number of elements of source < number of ones in mask");
  Value flat_self = b.Reshape(self, {n});
  if (available == 0) return {self};
  Value source = b.Reshape(operands[2].value, {available});
  Value taken = b.Gather1D(source, b.Subtract(count, b.ConstantInt(ElementType::kS64, 1, {n})));
  return {b.Reshape(b.Select(flat_mask, taken, flat_self), dims)};
}
TORCH_TPU_LOWERING(MaskedScatter, "aten::masked_scatter", "aten::masked_scatter_",
                   "aten::masked_scatter.out");

// nonzero_static(self, *, SymInt size, int fill_value=-1): the coordinates of the first `size`
// nonzero elements in row-major order, rows past the last one filled with fill_value; a fixed
// output shape, so no host round trip (unlike nonzero). Sorting the flat positions with the zero
// elements' positions pushed past the end puts the nonzero ones first, in order.
std::vector<Value> NonzeroStatic(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  const int64_t size = context.Int(operands[1]);
  const int64_t fill = context.Int(operands[2]);
  TORCH_CHECK(size >= 0, context.op_name(),
              ": nonzero_static: 'size' must be an non-negative integer, but got size: ", size);
  const int64_t n = x.type().NumElements();
  const int64_t rank = x.rank();
  if (size == 0 || n == 0) {
    return {context.ConstantInt(fill, c10::kLong, {size, rank})};
  }
  Value flat = b.Reshape(context.Convert(x, c10::kBool), {n});
  Value position = b.Iota(TensorType{ElementType::kS64, {n}}, 0);
  Value key = b.Select(flat, position, b.Add(position, b.ConstantInt(ElementType::kS64, n, {n})));
  Value sorted =
      b.Sort({key}, 0, /*is_stable=*/false, [](FunctionBuilder& body, std::span<const Value> args) {
        return std::vector<Value>{
            body.Compare(args[0], args[1], FunctionBuilder::ComparisonDirection::kLt)};
      })[0];
  const int64_t kept = std::min(size, n);
  Value first = b.Slice(sorted, {0}, {kept}, {1});
  if (kept < size) {
    first = b.Pad(first, b.ConstantInt(ElementType::kS64, 2 * n), {0}, {size - kept}, {0});
  }
  Value valid = b.Compare(first, b.ConstantInt(ElementType::kS64, n, {size}),
                          FunctionBuilder::ComparisonDirection::kLt);
  // Row-major coordinates of each flat position, one column per dim.
  std::vector<Value> columns;
  int64_t stride = n;
  for (int64_t d = 0; d < rank; ++d) {
    stride /= x.dims()[d];
    Value coordinate =
        b.Remainder(b.Divide(first, b.ConstantInt(ElementType::kS64, stride, {size})),
                    b.ConstantInt(ElementType::kS64, x.dims()[d], {size}));
    coordinate = b.Select(valid, coordinate, b.ConstantInt(ElementType::kS64, fill, {size}));
    columns.push_back(b.Reshape(coordinate, {size, 1}));
  }
  if (columns.empty()) return {b.ConstantInt(ElementType::kS64, 0, {size, 0})};
  return {columns.size() == 1 ? columns[0] : b.Concatenate(columns, 1)};
}
TORCH_TPU_LOWERING(NonzeroStatic, "aten::nonzero_static", "aten::nonzero_static.out");

}  // namespace

}  // namespace torch_tpu::lowering
