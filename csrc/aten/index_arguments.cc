#include "aten/index_arguments.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/nonzero.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <optional>
#include <sstream>

namespace torch_tpu::aten {
namespace {

using IndexList = std::vector<std::optional<at::Tensor>>;

bool IsOptionalTensorListType(const c10::TypePtr& type) {
  const auto list = type->cast<c10::ListType>();
  if (!list) return false;
  const auto element = list->getElementType()->cast<c10::OptionalType>();
  return element && element->getElementType()->kind() == c10::TypeKind::TensorType;
}

// TorchScript may hand a Tensor?[] over as a Tensor[] or a generic list; read any of them.
IndexList ReadIndexList(const c10::IValue& value) {
  IndexList indices;
  for (const c10::IValue& element : value.toListRef()) {
    if (element.isTensor() && element.toTensor().defined()) {
      indices.emplace_back(element.toTensor());
    } else {
      indices.emplace_back(std::nullopt);
    }
  }
  return indices;
}

std::optional<std::vector<int64_t>> Broadcast(const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<int64_t> result;
  for (const auto& shape : shapes) {
    if (shape.size() > result.size())
      result.insert(result.begin(), shape.size() - result.size(), 1);
    const size_t lead = result.size() - shape.size();
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t& size = result[lead + i];
      if (shape[i] == size || shape[i] == 1) continue;
      if (size != 1) return std::nullopt;
      size = shape[i];
    }
  }
  return result;
}

// Index tensors may live on the CPU or on the indexed tensor's device, as on CUDA; the first
// are moved, anything else is an error.
void CheckDevice(const at::Tensor& self, const at::Tensor& index) {
  TORCH_CHECK_INDEX(index.device().is_cpu() || index.device() == self.device(),
                    "indices should be either on cpu or on the same device as the indexed tensor (",
                    self.device(), ")");
}

// Bool/uint8 masks become the long coordinates of their true elements, one index per masked
// dimension, after checking that the mask matches the dimensions it covers.
void ExpandMask(const at::Tensor& self, const at::Tensor& mask, IndexList& expanded) {
  if (mask.scalar_type() == at::kByte) {
    TORCH_WARN(
        "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool "
        "instead.");
  }
  const int64_t first = static_cast<int64_t>(expanded.size());
  TORCH_CHECK_INDEX(first + mask.dim() <= self.dim(), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", first + mask.dim(), ")");
  for (const auto j : c10::irange(mask.dim())) {
    TORCH_CHECK_INDEX(mask.size(j) == self.size(first + j), "The shape of the mask ", mask.sizes(),
                      " at index ", j, " does not match the shape of the indexed tensor ",
                      self.sizes(), " at index ", first + j);
  }
  // A CPU mask is counted on the CPU: no device round trip for its size.
  const at::Tensor coordinates = at::nonzero(mask).to(self.device());
  for (const auto j : c10::irange(mask.dim())) expanded.emplace_back(coordinates.select(1, j));
}

std::string JoinShapes(const std::vector<std::vector<int64_t>>& shapes) {
  std::ostringstream text;
  for (size_t i = 0; i < shapes.size(); ++i) {
    text << (i ? ", " : "") << c10::IntArrayRef(shapes[i]);
  }
  return text.str();
}

// The shape of self[indices] for integer indices (PyTorch's placement of the broadcast index
// dims: where the indexed dims were when they are adjacent, else in front).
std::vector<int64_t> IndexingResultShape(const at::Tensor& self, const IndexList& indices,
                                         const std::vector<int64_t>& broadcast_shape) {
  std::vector<int64_t> indexed;
  for (size_t d = 0; d < indices.size(); ++d) {
    if (indices[d].has_value()) indexed.push_back(static_cast<int64_t>(d));
  }
  bool adjacent = true;
  for (size_t i = 1; i < indexed.size(); ++i) adjacent &= indexed[i] == indexed[i - 1] + 1;
  std::vector<int64_t> shape;
  if (!adjacent) shape = broadcast_shape;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (adjacent && d == indexed.front()) {
      shape.insert(shape.end(), broadcast_shape.begin(), broadcast_shape.end());
    }
    if (d >= static_cast<int64_t>(indices.size()) || !indices[d].has_value()) {
      shape.push_back(self.size(d));
    }
  }
  return shape;
}

IndexList PrepareIndices(const at::Tensor& self, const IndexList& indices) {
  TORCH_CHECK_INDEX(!indices.empty(), "at least one index must be provided");
  TORCH_CHECK_INDEX(static_cast<int64_t>(indices.size()) <= self.dim(),
                    "too many indices for tensor of dimension ", self.dim(), " (got ",
                    indices.size(), ")");
  IndexList prepared;
  for (const auto& index : indices) {
    if (!index.has_value()) {
      prepared.emplace_back(std::nullopt);
      continue;
    }
    CheckDevice(self, *index);
    const at::ScalarType dtype = index->scalar_type();
    if (dtype == at::kBool || dtype == at::kByte) {
      ExpandMask(self, *index, prepared);
      continue;
    }
    TORCH_CHECK_INDEX(dtype == at::kLong || dtype == at::kInt,
                      "tensors used as indices must be long, int, byte or bool tensors");
    prepared.emplace_back(index->to(self.device()));
  }
  return prepared;
}

}  // namespace

void PrepareIndexArguments(const c10::FunctionSchema& schema, std::vector<c10::IValue>& arguments) {
  const auto& declared = schema.arguments();
  for (size_t i = 0; i < declared.size(); ++i) {
    if (!IsOptionalTensorListType(declared[i].type()) || !arguments[0].isTensor()) continue;
    const at::Tensor& self = arguments[0].toTensor();
    const IndexList prepared = PrepareIndices(self, ReadIndexList(arguments[i]));

    std::vector<std::vector<int64_t>> shapes;
    for (const auto& index : prepared) {
      if (index.has_value()) shapes.push_back(index->sizes().vec());
    }
    const auto broadcast_shape = Broadcast(shapes);
    TORCH_CHECK_INDEX(broadcast_shape.has_value(),
                      "shape mismatch: indexing tensors could not be broadcast together with "
                      "shapes ",
                      JoinShapes(shapes));
    // index_put: the values must broadcast to what self[indices] would be.
    const auto values = schema.argumentIndexWithName("values");
    if (values.has_value() && !shapes.empty()) {
      const auto result_shape = IndexingResultShape(self, prepared, *broadcast_shape);
      const at::Tensor& value = arguments[*values].toTensor();
      TORCH_CHECK(Broadcast({result_shape, value.sizes().vec()}) == result_shape,
                  "shape mismatch: value tensor of shape ", value.sizes(),
                  " cannot be broadcast to indexing result of shape ",
                  c10::IntArrayRef(result_shape));
    }
    c10::List<std::optional<at::Tensor>> list;
    for (const auto& index : prepared) list.push_back(index);
    arguments[i] = c10::IValue(std::move(list));
  }
}

}  // namespace torch_tpu::aten
