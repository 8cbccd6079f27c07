#include "exec/view_io.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace torch_tpu::exec {

using stablehlo::ElementType;
using stablehlo::FunctionBuilder;
using stablehlo::TensorType;
using stablehlo::Value;

namespace {

struct Dimension {
  int64_t original;  // index in the view's sizes
  int64_t size;
  int64_t stride;
};

// The view's dimensions that address distinct elements: size > 1 and stride != 0, sorted by
// decreasing stride so that the outermost comes first.
std::vector<Dimension> AddressingDimensions(const StridedView& view) {
  std::vector<Dimension> dims;
  for (size_t i = 0; i < view.sizes.size(); ++i) {
    if (view.sizes[i] > 1 && view.strides[i] != 0) {
      dims.push_back({static_cast<int64_t>(i), view.sizes[i], view.strides[i]});
    }
  }
  std::stable_sort(dims.begin(), dims.end(),
                   [](const Dimension& a, const Dimension& b) { return a.stride > b.stride; });
  return dims;
}

// Strides nest when each one is a multiple of the next and leaves room for the next dimension's
// extent; then the view is a sub-box of a reshaped slice of the flat buffer.
bool Nests(const std::vector<Dimension>& dims) {
  for (const Dimension& dim : dims) {
    if (dim.stride < 0) return false;
  }
  for (size_t j = 0; j + 1 < dims.size(); ++j) {
    if (dims[j].stride % dims[j + 1].stride != 0) return false;
    if (dims[j].stride / dims[j + 1].stride < dims[j + 1].size) return false;
  }
  return true;
}

int64_t NumElements(const std::vector<int64_t>& sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<>());
}

std::vector<int64_t> Sizes(const std::vector<Dimension>& dims) {
  std::vector<int64_t> sizes;
  for (const Dimension& dim : dims) sizes.push_back(dim.size);
  return sizes;
}

// Box geometry: the flat range [offset, offset + length) reshaped to `box_dims`, of which the view
// is the sub-box at the origin with sizes (dims..., 1).
struct Box {
  std::vector<int64_t> box_dims;
  std::vector<int64_t> view_dims;
  int64_t length;
};

Box MakeBox(const std::vector<Dimension>& dims) {
  Box box;
  box.box_dims.push_back(dims[0].size);
  for (size_t j = 0; j + 1 < dims.size(); ++j) {
    box.box_dims.push_back(dims[j].stride / dims[j + 1].stride);
  }
  box.box_dims.push_back(dims.back().stride);
  box.view_dims = Sizes(dims);
  box.view_dims.push_back(1);
  box.length = dims[0].size * dims[0].stride;
  return box;
}

Value Zero(FunctionBuilder& builder, ElementType type) { return builder.Constant(type, 0.0); }

// Linear storage index of every element of the sorted dims, as s64 shaped like them.
Value LinearIndices(FunctionBuilder& builder, const std::vector<Dimension>& dims, int64_t offset) {
  const std::vector<int64_t> sizes = Sizes(dims);
  Value indices = builder.ConstantInt(ElementType::kS64, offset, sizes);
  for (size_t j = 0; j < dims.size(); ++j) {
    Value iota = builder.Iota(TensorType{ElementType::kS64, sizes}, static_cast<int64_t>(j));
    Value stride = builder.ConstantInt(ElementType::kS64, dims[j].stride, sizes);
    indices = builder.Add(indices, builder.Multiply(iota, stride));
  }
  return indices;
}

// Positions of the kept (addressing) dims in the view's own order, and the permutation from the
// stride-sorted order back to it.
std::vector<int64_t> OriginalOrderPermutation(const std::vector<Dimension>& dims) {
  std::vector<int64_t> order(dims.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return dims[a].original < dims[b].original; });
  return order;  // result dim i comes from sorted position order[i]
}

bool IsIdentity(const std::vector<int64_t>& permutation) {
  for (size_t i = 0; i < permutation.size(); ++i) {
    if (permutation[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

}  // namespace

Value ReinterpretFlat(FunctionBuilder& builder, Value flat, ElementType type) {
  const ElementType from = flat.element_type();
  if (from == type) return flat;
  // A bool is one byte holding 0 or 1: reinterpreting goes through those bytes (u8), so a bool
  // storage viewed as int16 reads pairs of bytes, as on CPU.
  if (from == ElementType::kPred) {
    return ReinterpretFlat(builder, builder.Convert(flat, ElementType::kU8), type);
  }
  if (type == ElementType::kPred) {
    return builder.Convert(ReinterpretFlat(builder, flat, ElementType::kU8), type);
  }
  // Complex elements are pairs of (real, imaginary) parts in memory; bitcast_convert does not
  // take complex types, so go through the parts' float type.
  if (stablehlo::IsComplex(from)) {
    const int64_t count = flat.dims()[0];
    Value pairs = builder.Concatenate({builder.Reshape(builder.Real(flat), {count, 1}),
                                       builder.Reshape(builder.Imag(flat), {count, 1})},
                                      1);
    return ReinterpretFlat(builder, builder.Reshape(pairs, {2 * count}), type);
  }
  if (stablehlo::IsComplex(type)) {
    const ElementType part = stablehlo::ComplexPartType(type);
    Value parts = ReinterpretFlat(builder, flat, part);
    const int64_t count = parts.dims()[0] / 2;
    if (parts.dims()[0] % 2 != 0) {
      throw std::invalid_argument("storage of " + std::to_string(parts.dims()[0]) + " " +
                                  std::string(stablehlo::MlirName(part)) +
                                  " elements cannot be viewed as " +
                                  std::string(stablehlo::MlirName(type)) + " elements");
    }
    Value pairs = builder.Reshape(parts, {count, 2});
    Value real = builder.Reshape(builder.Slice(pairs, {0, 0}, {count, 1}, {1, 1}), {count});
    Value imag = builder.Reshape(builder.Slice(pairs, {0, 1}, {count, 2}, {1, 1}), {count});
    return builder.Complex(real, imag);
  }
  const int from_width = stablehlo::ByteWidth(from);
  const int to_width = stablehlo::ByteWidth(type);
  if (from_width == to_width) return builder.BitcastConvert(flat, type);
  const int64_t bytes = flat.dims()[0] * from_width;
  if (bytes % to_width != 0) {
    throw std::invalid_argument("storage of " + std::to_string(bytes) +
                                " bytes cannot be viewed as " +
                                std::string(stablehlo::MlirName(type)) + " elements");
  }
  // Widths are powers of two, so one regroups into the other: a wider element splits into a
  // trailing dimension of narrower ones, and narrower ones merge from one.
  if (from_width > to_width) {
    Value split = builder.BitcastConvert(flat, type);  // [n, from/to]
    return builder.Reshape(split, {bytes / to_width});
  }
  Value grouped = builder.Reshape(flat, {bytes / to_width, to_width / from_width});
  return builder.BitcastConvert(grouped, type);
}

bool CoversWholeStorage(const StridedView& view, int64_t length) {
  if (view.offset != 0 || NumElements(view.sizes) != length) return false;
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(view.sizes.size()) - 1; i >= 0; --i) {
    if (view.sizes[i] != 1 && view.strides[i] != expected) return false;
    expected *= view.sizes[i];
  }
  return true;
}

Value ReadView(FunctionBuilder& builder, Value flat, const StridedView& view) {
  const ElementType type = flat.element_type();
  const int64_t length = flat.dims()[0];
  if (NumElements(view.sizes) == 0) return builder.Constant(type, 0.0, view.sizes);
  if (CoversWholeStorage(view, length)) return builder.Reshape(flat, view.sizes);

  const std::vector<Dimension> dims = AddressingDimensions(view);
  Value sorted;  // the addressed elements, dims in stride-sorted order
  if (dims.empty()) {
    sorted = builder.Reshape(builder.Slice(flat, {view.offset}, {view.offset + 1}, {1}), {});
  } else if (Nests(dims)) {
    const Box box = MakeBox(dims);
    Value padded = flat;
    if (view.offset + box.length > length) {
      padded =
          builder.Pad(flat, Zero(builder, type), {0}, {view.offset + box.length - length}, {0});
    }
    Value region = builder.Slice(padded, {view.offset}, {view.offset + box.length}, {1});
    Value boxed = builder.Reshape(region, box.box_dims);
    std::vector<int64_t> starts(box.box_dims.size(), 0), steps(box.box_dims.size(), 1);
    sorted = builder.Reshape(builder.Slice(boxed, starts, box.view_dims, steps), Sizes(dims));
  } else {
    sorted = builder.Gather1D(flat, LinearIndices(builder, dims, view.offset));
  }

  if (!dims.empty()) {
    const std::vector<int64_t> permutation = OriginalOrderPermutation(dims);
    if (!IsIdentity(permutation)) sorted = builder.Transpose(sorted, permutation);
  }
  // Reinsert size-1 dims and stretch zero-stride ones.
  std::vector<int64_t> kept_shape, broadcast_dimensions;
  for (size_t i = 0; i < view.sizes.size(); ++i) {
    if (view.sizes[i] > 1 && view.strides[i] != 0) {
      kept_shape.push_back(view.sizes[i]);
      broadcast_dimensions.push_back(static_cast<int64_t>(i));
    }
  }
  if (kept_shape.size() == view.sizes.size()) return sorted;
  return builder.BroadcastInDim(sorted, view.sizes, broadcast_dimensions);
}

Value WriteView(FunctionBuilder& builder, Value flat, const StridedView& view, Value values) {
  const ElementType type = flat.element_type();
  const int64_t length = flat.dims()[0];
  if (NumElements(view.sizes) == 0) return flat;
  if (CoversWholeStorage(view, length)) return builder.Reshape(values, {length});
  for (size_t i = 0; i < view.sizes.size(); ++i) {
    if (view.sizes[i] > 1 && view.strides[i] == 0) {
      throw std::invalid_argument(
          "unsupported operation: more than one element of the written-to tensor refers to a "
          "single memory location");
    }
  }
  const std::vector<Dimension> dims = AddressingDimensions(view);
  Value zero_index = builder.ConstantInt(ElementType::kS64, 0);
  if (dims.empty()) {
    Value element = builder.Reshape(values, {1});
    return builder.DynamicUpdateSlice(flat, element,
                                      {builder.ConstantInt(ElementType::kS64, view.offset)});
  }
  // Values in stride-sorted dim order.
  std::vector<int64_t> kept_original_order;
  for (size_t i = 0; i < view.sizes.size(); ++i) {
    if (view.sizes[i] > 1) kept_original_order.push_back(view.sizes[i]);
  }
  Value kept = builder.Reshape(values, kept_original_order);
  const std::vector<int64_t> to_original = OriginalOrderPermutation(dims);
  std::vector<int64_t> to_sorted(to_original.size());
  for (size_t i = 0; i < to_original.size(); ++i)
    to_sorted[to_original[i]] = static_cast<int64_t>(i);
  Value sorted = IsIdentity(to_sorted) ? kept : builder.Transpose(kept, to_sorted);

  if (!Nests(dims)) {
    return builder.Scatter1D(flat, LinearIndices(builder, dims, view.offset), sorted);
  }
  const Box box = MakeBox(dims);
  Value padded = flat;
  const int64_t padding = std::max<int64_t>(0, view.offset + box.length - length);
  if (padding > 0) padded = builder.Pad(flat, Zero(builder, type), {0}, {padding}, {0});
  Value region = builder.Slice(padded, {view.offset}, {view.offset + box.length}, {1});
  Value boxed = builder.Reshape(region, box.box_dims);
  std::vector<Value> origin(box.box_dims.size(), zero_index);
  boxed = builder.DynamicUpdateSlice(boxed, builder.Reshape(sorted, box.view_dims), origin);
  Value updated = builder.DynamicUpdateSlice(padded, builder.Reshape(boxed, {box.length}),
                                             {builder.ConstantInt(ElementType::kS64, view.offset)});
  return padding > 0 ? builder.Slice(updated, {0}, {length}, {1}) : updated;
}

}  // namespace torch_tpu::exec
