// Defer-and-fuse: an eager launch recorded into the pending graph (exec/deferred_graph.h)
// instead of run.
#include "exec/launch_internals.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "exec/deferred_graph.h"
#include "exec/growing_shapes.h"
#include "exec/launch_queue.h"
#include "exec/plan_cache.h"
#include "exec/program_builder.h"
#include "exec/program_signature.h"
#include "lowering/context.h"
#include "lowering/matmul_precision.h"
#include "runtime/device.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

using stablehlo::ElementType;
using stablehlo::Value;
using Kind = EagerLaunch::OperandKind;
using launch_internals::RaiseLoweringFailure;

namespace {

// The snapshot's storages by size only: a deferred op is lowered before their buffers exist.
std::vector<StorageSlotInfo> UnreadSlotInfos(std::span<const StorageSlot> slots) {
  std::vector<StorageSlotInfo> slot_infos;
  for (const StorageSlot& slot : slots) {
    slot_infos.push_back({slot.storage ? slot.storage->nbytes() : 0, false, ElementType::kU8});
  }
  return slot_infos;
}

}  // namespace

void EagerLaunch::KeepGeometryOnly() {
  // Plain numbers, not meta tensors: this runs for every recorded op, and a meta tensor costs
  // allocations to make and to free while most graphs find their program without lowering.
  geometries_.clear();
  geometries_.reserve(operands_.size() + destinations_.size());  // lists may grow it once more
  list_lengths_.clear();
  auto keep = [&](const at::Tensor& tensor) {
    TensorGeometry& geometry = geometries_.emplace_back();
    geometry.sizes.assign(tensor.sizes().begin(), tensor.sizes().end());
    geometry.strides.assign(tensor.strides().begin(), tensor.strides().end());
    geometry.storage_offset = tensor.storage_offset();
    geometry.dtype = tensor.scalar_type();
    // The math bits are geometry too: they change what a view reads and writes.
    geometry.conj = tensor.is_conj();
    geometry.neg = tensor.is_neg();
  };
  for (size_t i = 0; i < operands_.size(); ++i) {
    switch (operand_kinds_[i]) {
      case Kind::kTensor:
        keep(operands_[i].toTensor());
        break;
      case Kind::kTensorList: {
        const auto list = operands_[i].toTensorList();
        list_lengths_.push_back(static_cast<uint32_t>(list.size()));
        for (const at::Tensor& tensor : list) keep(tensor);
        operands_[i] = c10::IValue();
        break;
      }
      case Kind::kOptionalTensorList: {
        const auto list = operands_[i].toOptionalTensorList();
        list_lengths_.push_back(static_cast<uint32_t>(list.size()));
        for (const auto& entry : list) {
          const std::optional<at::Tensor> tensor = entry;
          if (tensor.has_value()) {
            keep(*tensor);
          } else {
            geometries_.emplace_back().present = false;
          }
        }
        operands_[i] = c10::IValue();
        break;
      }
      default:  // host scalar tensors hold no device storage
        break;
    }
  }
  for (auto& [index, destination] : destinations_) keep(destination);
  // Borrowed tensors go without a decrement; owned tensor operands and destinations are released.
  ReleaseBorrowed();
  for (size_t i = 0; i < operands_.size(); ++i) {
    if (operand_kinds_[i] == Kind::kTensor) operands_[i] = c10::IValue();
  }
  for (auto& [index, destination] : destinations_) destination = at::Tensor();
  geometry_only_ = true;
  output_strides_ = nullptr;  // it refers to the caller's arguments; layouts are known by now
  output_dim_orders_ = nullptr;
}

void EagerLaunch::RestoreGeometry() {
  if (!geometry_only_) return;
  // The geometries in KeepGeometryOnly's order; a None entry of an optional list gives nullopt.
  size_t next = 0;
  auto meta = [&]() -> std::optional<at::Tensor> {
    const TensorGeometry& geometry = geometries_[next++];
    if (!geometry.present) return std::nullopt;
    at::Tensor tensor =
        at::detail::empty_strided_meta(geometry.sizes, geometry.strides, geometry.dtype);
    tensor.unsafeGetTensorImpl()->set_storage_offset(geometry.storage_offset);
    tensor._set_conj(geometry.conj);
    tensor._set_neg(geometry.neg);
    return tensor;
  };
  size_t next_list = 0;
  for (size_t i = 0; i < operands_.size(); ++i) {
    switch (operand_kinds_[i]) {
      case Kind::kTensor:
        operands_[i] = *meta();
        break;
      case Kind::kTensorList: {
        c10::List<at::Tensor> list;
        for (uint32_t n = list_lengths_[next_list++]; n > 0; --n) list.push_back(*meta());
        operands_[i] = std::move(list);
        break;
      }
      case Kind::kOptionalTensorList: {
        c10::List<std::optional<at::Tensor>> list;
        for (uint32_t n = list_lengths_[next_list++]; n > 0; --n) list.push_back(meta());
        operands_[i] = std::move(list);
        break;
      }
      default:
        break;
    }
  }
  for (auto& [index, destination] : destinations_) destination = *meta();
  geometry_only_ = false;
}

std::shared_ptr<const DeferredResults> EagerLaunch::InferResults(
    const lowering::LoweringFunction& function, const Snapshot& snapshot) const {
  ProgramBuilder program(UnreadSlotInfos(snapshot.slots));
  std::vector<bool> written;
  std::vector<Value> results;
  try {
    results = Lower(function, program, snapshot.tensor_slots, snapshot.destination_slots,
                    snapshot.host_scalars, std::string(op_name_), written);
  } catch (const c10::Error&) {
    throw;
  } catch (const lowering::UnsignedMatmulPrecisionRead&) {
    throw;  // the launch starts again, signed
  } catch (const std::exception& error) {
    RaiseLoweringFailure(op_name_, operands_, error);
  }
  auto inferred = std::make_shared<DeferredResults>();
  std::vector<std::vector<int64_t>> strides =
      NewResultStrides(results, written, inferred->result_new_index);
  for (size_t r = 0; r < results.size(); ++r) {
    const int index = inferred->result_new_index[r];
    if (index < 0) continue;
    inferred->new_results.push_back({lowering::LoweringContext::DtypeOf(results[r]),
                                     results[r].dims(), std::move(strides[index])});
  }
  return inferred;
}

std::shared_ptr<const DeferredResults> EagerLaunch::InferGrowingResults(
    const lowering::LoweringFunction& function, const Snapshot& snapshot, const GrowingFit& fit,
    GrowingPadding padding) const {
  ProgramBuilder program(UnreadSlotInfos(snapshot.slots));
  std::vector<GrowingResult> results =
      LowerGrowing(function, program, snapshot.tensor_slots, snapshot.host_scalars, fit, padding,
                   std::string(op_name_), ResultLayouts());
  auto inferred = std::make_shared<DeferredResults>();
  inferred->growing = fit.model;
  for (size_t r = 0; r < results.size(); ++r) {
    inferred->result_new_index.push_back(static_cast<int>(r));
    inferred->new_results.push_back(
        {results[r].dtype, std::move(results[r].sizes), std::move(results[r].strides)});
  }
  return inferred;
}

std::vector<at::Tensor> EagerLaunch::Defer(const lowering::LoweringFunction& function, int device,
                                           const at::Tensor* flat_shape) {
  // The graph reads storages' buffers as they are now: queued launches produce them first.
  LaunchQueue::Get().Drain();
  thread_local Snapshot snapshot;
  snapshot.Clear();
  snapshot.read_contents = false;
  TakeSnapshot(function, snapshot);
  snapshot.signature.AddTag(SignatureTag::kDeferred);
  // The results' dtypes and layouts follow from the signature: lower the op once per signature
  // (without compiling) to learn them; errors the lowering raises surface here, at the call.
  // Like a strict launch, an op seen before at these exact sizes keeps its exact form; else, on
  // a growing line, it takes its family's bucketed form, so a graph recorded at the next length
  // has the same signature and finds its program (exec/growing_shapes.h).
  PlanCache& plans = PlanCache::Get();
  const PlanCache::Options describes_results{.holds_executable = false};
  // An op that continues a step seen before takes its results from the step.
  DeferredGraph& graph = DeferredGraph::Get();
  DeferredGraph::Expectation expected = graph.Expect(snapshot.signature, device);
  std::shared_ptr<const DeferredResults> shapes = expected.results;
  if (!shapes) shapes = plans.Find<DeferredResults>(snapshot.signature);
  std::unique_ptr<GrowingCandidate> growing;
  const auto find_bucketed_form = [&] {
    const std::optional<GrowingReference> reference = graph.growing_reference();
    growing = FindGrowing(function, snapshot, reference ? &*reference : nullptr);
    if (!growing || !growing->fit) return;
    growing->key.AddTag(SignatureTag::kDeferred);
    // Another length of a bucketed op of the followed step: the step's results, this op's fit.
    expected = graph.ExpectBucketed(growing->key, device);
    shapes = expected.results;
    if (shapes) return;
    const GrowingPadding padding = growing->padding.value_or(GrowingPadding::kEdge);
    try {
      shapes = plans.GetOrBuild<DeferredResults>(
          growing->key,
          [&] { return InferGrowingResults(function, snapshot, *growing->fit, padding); },
          describes_results);
    } catch (const lowering::UnsignedMatmulPrecisionRead&) {
      throw;  // not a failure of the padded form: the launch starts again, signed
    } catch (const std::exception& error) {
      // Not buildable padded: the exact form follows and raises what the op itself raises.
      GrowingFamilies::Get().Disable(growing->family, op_name_, error.what());
    }
  };
  if (!shapes) find_bucketed_form();
  uint64_t exact_launch = 0;  // marks the results of an exact launch of a growing family
  if (!shapes && growing) {
    // Kept (in the plan cache) only when the op keeps its exact form: a later launch at these
    // sizes would otherwise take the exact form where this one took the bucketed one.
    std::shared_ptr<const DeferredResults> exact = InferResults(function, snapshot);
    std::vector<std::vector<int64_t>> output_sizes;
    for (const auto& result : exact->new_results) output_sizes.push_back(result.sizes);
    const ExactLaunchRecord recorded = RecordExact(*growing, std::move(output_sizes));
    // It continued an earlier launch of its family on a growing line: it takes that form now.
    if (recorded.line_found) find_bucketed_form();
    if (!shapes) {
      shapes = plans.GetOrBuild<DeferredResults>(
          snapshot.signature, [&] { return std::move(exact); }, describes_results);
      exact_launch = recorded.launch;
    }
  }
  // The bucketed form the op takes: the followed step's (at the step op's sizes), or the one
  // just found (the step's results at another length of its bucket included).
  const GrowingFit* fit = nullptr;
  const ProgramSignature* bucket_signature = nullptr;
  GrowingPadding padding = GrowingPadding::kEdge;
  if (expected.growing) {
    fit = &*expected.growing;
    bucket_signature = &*expected.bucket_signature;
    padding = expected.padding;
  } else if (shapes && shapes->growing) {
    fit = &*growing->fit;
    bucket_signature = &growing->key;
    padding = growing->padding.value_or(GrowingPadding::kEdge);
  }
  const bool bucketed = fit != nullptr;
  if (!shapes) {
    shapes = plans.GetOrBuild<DeferredResults>(
        snapshot.signature, [&] { return InferResults(function, snapshot); }, describes_results);
  }

  c10::SmallVector<at::Tensor, 2> new_tensors;  // no heap allocation for most ops
  // A flattened op's results take its operands' shape (RestoreFlattenedShapes): given it here,
  // they are laid out once.
  const bool shaped_now = flat_shape != nullptr && !bucketed;
  {
    runtime::DeviceScope allocation_device(device);
    c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::PrivateUse1);
    const c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
    for (const auto& result : shapes->new_results) {
      new_tensors.push_back(
          shaped_now
              ? at::detail::empty_generic(flat_shape->sizes(), allocator, keys, result.dtype,
                                          std::nullopt)
              : at::detail::empty_strided_generic(result.sizes, result.strides, allocator, keys,
                                                  result.dtype));
    }
  }
  for (const at::Tensor& tensor : new_tensors) {
    GrowingStorageOrigin::MarkExact(tensor, exact_launch);
  }
  if (bucketed) {
    // Allocated at the bucket's sizes, so the storage has room for the next lengths' results.
    const int64_t t = fit->t;
    for (size_t n = 0; n < new_tensors.size(); ++n) {
      const std::vector<int64_t> sizes = shapes->growing->OutputSizes(n, t);
      new_tensors[n].unsafeGetTensorImpl()->set_sizes_and_strides(
          sizes, DenseStridesLike(sizes, shapes->new_results[n].strides));
      GrowingStorageOrigin::Mark(new_tensors[n], *fit, n);
    }
    HostScalar symbol{ElementType::kS64, {}, sizeof(int64_t)};
    std::memcpy(symbol.bytes, &t, sizeof(int64_t));
    snapshot.host_scalars.insert(snapshot.host_scalars.begin(), symbol);
  }
  std::vector<at::Tensor> results(shapes->result_new_index.size());
  for (size_t r = 0; r < results.size(); ++r) {
    if (shapes->result_new_index[r] >= 0) results[r] = new_tensors[shapes->result_new_index[r]];
  }
  if (!shaped_now) RestoreFlattenedShapes(results, flat_shape, shapes->result_new_index);
  for (const auto& [index, destination] : destinations_) results[index] = destination;
  const DeferredGraph::OpRecord record{
      bucketed ? *bucket_signature : snapshot.signature,
      snapshot.slots,
      snapshot.storage_impls,
      snapshot.tensor_slots,
      snapshot.destination_slots,
      snapshot.host_scalars,
      shapes,
      new_tensors,
      fit,
      padding,
      expected.ticket,
      bucketed ? &snapshot.signature : nullptr};
  graph.Record(std::move(*this), function, device, record);
  return results;
}

}  // namespace torch_tpu::exec
