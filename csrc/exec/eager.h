// Eager execution of one op: collect operands, find (or build and compile) the program for this
// exact signature, run it asynchronously, and wrap or write back its results.
//
// The launch is split along its seams: the signature (exec/program_signature.h) keys the plan
// cache; on a miss the program is built by the shared ProgramBuilder (exec/program_builder.h)
// and compiled; execution binds storages' current buffers (donating the ones the program
// overwrites when nothing else holds them); results become new tensors or replace the written
// storages' buffers. Runtime scalars are program arguments, so changing them never recompiles.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lowering/registry.h"

namespace torch_tpu::stablehlo {
class Value;
class Module;
}

namespace torch_tpu::exec {

struct StorageSlotInfo;
struct HostScalar;
class ProgramBuilder;
class ProgramSignature;
class DeferredGraph;
struct DeferredResults;
struct GrowingFit;
struct GrowingReference;
struct ExactLaunchRecord;
enum class GrowingPadding : uint8_t;

// strict: asynchronous launch per op; debug: wait and check after each op; defer-and-fuse: ops
// are recorded into a pending graph that runs as one program at a materialization point
// (exec/deferred_graph.h). Chosen by TORCH_TPU_LAUNCH_BLOCKING / TORCH_TPU_DEFER_AND_FUSE, or
// set at run time; leaving defer-and-fuse runs the pending graph.
enum class ExecutionMode { kStrict, kDebug, kDeferAndFuse };
ExecutionMode CurrentExecutionMode();
void SetExecutionMode(ExecutionMode mode);

class EagerLaunch {
 public:
  // `op_name` names the op in errors and must outlive the launch (a literal or a registry name).
  explicit EagerLaunch(std::string_view op_name);
  // A copy owns every tensor it holds; a move takes borrowed ones along (BorrowedSet).
  EagerLaunch(EagerLaunch&& other) noexcept = default;
  EagerLaunch(const EagerLaunch&) = default;
  EagerLaunch& operator=(const EagerLaunch&) = delete;
  EagerLaunch& operator=(EagerLaunch&&) = delete;
  ~EagerLaunch();

  // Room for `operands` operands, so adding them allocates once.
  void ReserveOperands(size_t operands) {
    operands_.reserve(operands);
    operand_kinds_.reserve(operands);
  }
  // A tpu tensor, or a zero-dim CPU tensor (passed as a runtime scalar argument).
  void AddTensor(const at::Tensor& tensor);
  // AddTensor without taking a reference: the caller keeps `tensor` alive until the launch is
  // destroyed or recorded (a kernel's own argument). Copying a tensor that Python holds increfs
  // its PyObject, which takes the GIL the kernel runs without (a lock round trip per operand and
  // another when the copy goes); a borrowed operand changes no count.
  void AddBorrowedTensor(const at::Tensor& tensor);
  void AddScalar(const c10::Scalar& scalar);
  // Tensor? arguments: a defined tensor as AddTensor, an absent or undefined one as None.
  void AddOptionalTensor(const std::optional<at::Tensor>& tensor);
  void AddTensorList(const std::vector<at::Tensor>& tensors);
  // Tensor?[] (indices of index/index_put): None entries become invalid values in the operand.
  void AddOptionalTensorList(const std::vector<std::optional<at::Tensor>>& tensors);
  // Part of the compiled program (ints, lists, bools, dtypes, None, ...).
  void AddStatic(const c10::IValue& value);
  // Device random state (seed, offset) as a runtime u64[2] argument.
  void AddRngState(uint64_t seed, uint64_t offset);

  // Result `index` is converted to the destination's dtype and written into its view instead of
  // becoming a new tensor. The result's shape must equal the destination's.
  // With `check_cast`, a result dtype that PyTorch would not cast into the destination's
  // (float into an integer tensor in add_, say) is an error, as for in-place ops; copies pass
  // false.
  void WriteResultTo(size_t index, const at::Tensor& destination, bool check_cast = true);
  // WriteResultTo without taking a reference (AddBorrowedTensor's terms).
  void WriteResultToBorrowed(size_t index, const at::Tensor& destination);

  // Strides PyTorch gives the new results (one list per result that is not written back), asked
  // only when the program is built; results whose strides are not a dense layout stay contiguous.
  using OutputStrides = std::function<std::vector<std::vector<int64_t>>()>;
  void SetOutputStrides(OutputStrides output_strides) {
    output_strides_ = std::move(output_strides);
  }
  // The dim order (outer to inner) of each of those results, for a launch along a growing
  // sequence, which asks on every call; without it the order comes from the strides.
  void SetOutputDimOrders(OutputStrides output_dim_orders) {
    output_dim_orders_ = std::move(output_dim_orders);
  }

  // The op is pointwise (ATen's `pointwise` tag): when every tensor operand and destination is
  // contiguous with one common shape (0-d operands aside), the program is built over their
  // flattened elements, so one program serves every shape with the same element count.
  void SetPointwise() { pointwise_ = true; }
  // A pointwise foreach op whose lists' i-th tensors are contiguous with one shape per position
  // (checked by the caller): each is read and written as its flat elements, and new result i
  // takes `result_sizes[i]`. Besides sharing programs across shapes, flat in-place updates let
  // the compiler write each result into its donated buffer (through reshapes it copies them).
  void SetFlattenLists(std::vector<std::vector<int64_t>> result_sizes) {
    flat_lists_ = true;
    flat_result_sizes_ = std::move(result_sizes);
  }

  // Runs `function` (the op's lowering). Returns one tensor per result: the new tensor, or the
  // destination it was written to.
  std::vector<at::Tensor> Run(const lowering::LoweringFunction& function);

  enum class OperandKind : uint8_t {
    kTensor,
    kHostScalarTensor,
    kScalar,
    kTensorList,
    kOptionalTensorList,
    kStatic
  };

 private:
  friend class DeferredGraph;
  struct Plan;
  struct Snapshot;
  struct GrowingCandidate;
  int DeviceIndex() const;
  // Run, with the matmul precision this launch signs already chosen.
  std::vector<at::Tensor> RunSigned(const lowering::LoweringFunction& function);
  // With `growing_numbers`, signs the launch's family instead (exec/growing_shapes.h): views'
  // numbers go there, and storages are signed by their element types only.
  void TakeSnapshot(const lowering::LoweringFunction& function, Snapshot& snapshot,
                    GrowingCandidate* growing = nullptr) const;
  // The launch's family and, when it lies on a line of earlier launches, its bucketed program's
  // key; null for launches that never share programs this way.
  // With `reference` (a defer-and-fuse graph's), the bucket is aligned with it.
  std::unique_ptr<GrowingCandidate> FindGrowing(const lowering::LoweringFunction& function,
                                                const Snapshot& snapshot,
                                                const GrowingReference* reference = nullptr) const;
  // Grows the storages of tensor operands whose growing lines filled them, before the launch is
  // signed (GrowingStorageOrigin::GrowIfFull).
  void GrowFullStorages() const;
  // Records an exact launch of `growing`'s family (GrowingFamilies::Record), with the launches
  // whose results its operands are; the caller marks its results with the returned launch
  // (GrowingStorageOrigin::MarkExact).
  ExactLaunchRecord RecordExact(GrowingCandidate& growing,
                                std::vector<std::vector<int64_t>> output_sizes) const;
  // Each tensor operand, list entries included, in order.
  void ForEachTensorOperand(c10::function_ref<void(const at::Tensor&)> visit) const;
  // The bucketed program of `candidate`, or null when the op cannot be built that way.
  std::shared_ptr<Plan> BuildGrowingPlan(const lowering::LoweringFunction& function,
                                         const Snapshot& snapshot,
                                         const GrowingCandidate& candidate) const;
  // One result of a bucketed lowering (launch_internals.h).
  struct GrowingResult;
  // Emits the op with its operands read through `fit`'s gathers (the symbol is the next runtime
  // scalar, before `host_scalars`); `layouts`: the results' strides PyTorch gives them (their
  // dim order), empty for row-major. Shared by strict launches and defer-and-fuse graphs.
  std::vector<GrowingResult> LowerGrowing(const lowering::LoweringFunction& function,
                                          ProgramBuilder& program,
                                          std::span<const int> tensor_slots,
                                          std::span<const HostScalar> host_scalars,
                                          const GrowingFit& fit, GrowingPadding padding,
                                          const std::string& description,
                                          const std::vector<std::vector<int64_t>>& layouts) const;
  // "aten::cat(...), or the same op at another length of its growing sequence (...)": a
  // bucketed program serves other lengths than the launch it was built for.
  std::string DescribeGrowing(const GrowingFit& fit) const;
  // The strides PyTorch gives the new results (SetOutputStrides), empty when flattened or unset.
  std::vector<std::vector<int64_t>> ResultLayouts() const;
  std::shared_ptr<const Plan> BuildPlan(const lowering::LoweringFunction& function,
                                        const Snapshot& snapshot) const;
  // A plan-cache miss of `key` (exec/plan_cache.h): builds the launch's bucketed program when it
  // lies on a growing line (`growing_symbol` then takes its symbol), else its exact program, as
  // the plan of that key.
  std::shared_ptr<const Plan> BuildPlanFor(const lowering::LoweringFunction& function,
                                           const Snapshot& snapshot, const ProgramSignature& key,
                                           GrowingCandidate* growing,
                                           int64_t& growing_symbol) const;
  // Builds with the given view of the storages; when `unused_slots` is given and some storage's
  // buffer turns out unused, returns null with those slots listed instead of compiling.
  std::shared_ptr<Plan> BuildPlanOver(const lowering::LoweringFunction& function,
                                      const Snapshot& snapshot,
                                      std::vector<StorageSlotInfo> slot_infos,
                                      std::vector<int>* unused_slots) const;

  // How a bucketed program reads a tensor operand from its slot (exec/growing_shapes.h).
  using TensorReader = std::function<stablehlo::Value(const at::Tensor&, int slot)>;
  // Emits the op into `program`: tensor operands read from program slots `tensor_slots` (in
  // operand order), Python scalars and random states as the program's next runtime arguments,
  // results for destinations written into slots `destination_slots`, device-side checks named
  // by `description`. Returns every result of the lowering; `written[r]` says whether result r
  // went to a destination.
  std::vector<stablehlo::Value> Lower(const lowering::LoweringFunction& function,
                                      ProgramBuilder& program, std::span<const int> tensor_slots,
                                      std::span<const int> destination_slots,
                                      std::span<const HostScalar> host_scalars,
                                      const std::string& description,
                                      std::vector<bool>& written,
                                      const TensorReader* reader = nullptr) const;
  // The strides of each new (not written) result, and each result's index among the new ones.
  std::vector<std::vector<int64_t>> NewResultStrides(const std::vector<stablehlo::Value>& results,
                                                     const std::vector<bool>& written,
                                                     std::vector<int>& result_new_index) const;
  std::string Description() const;
  // Defer-and-fuse: records the op into the pending graph and returns its results (new tensors
  // whose storages the graph will fill, or the destinations).
  std::vector<at::Tensor> Defer(const lowering::LoweringFunction& function, int device,
                                const at::Tensor* flat_shape);
  // A deferred op's results (dtypes, sizes, layouts), from lowering it without compiling: at
  // its exact sizes, or bucketed along `fit`.
  std::shared_ptr<const DeferredResults> InferResults(const lowering::LoweringFunction& function,
                                                      const Snapshot& snapshot) const;
  std::shared_ptr<const DeferredResults> InferGrowingResults(
      const lowering::LoweringFunction& function, const Snapshot& snapshot,
      const GrowingFit& fit, GrowingPadding padding) const;
  // Drops the tpu tensors this launch holds, keeping each one's geometry (a few numbers), so
  // that a recorded op never keeps its operands' storages alive. Recording does this for every
  // op; only a graph whose program is not cached yet needs the tensors back (RestoreGeometry).
  void KeepGeometryOnly();
  // Puts meta tensors of the kept geometries where KeepGeometryOnly dropped the tensors, so the
  // launch can be lowered; does nothing for a launch that kept its tensors.
  void RestoreGeometry();

  // For a pointwise op whose operands can be read flattened: the operand whose shape the results
  // take; else null.
  const at::Tensor* FlatShapeOperand() const;

  // A tensor operand reduced to what lowering it reads (KeepGeometryOnly).
  struct TensorGeometry {
    c10::SmallVector<int64_t, 5> sizes;
    c10::SmallVector<int64_t, 5> strides;
    int64_t storage_offset = 0;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    bool conj = false;
    bool neg = false;
    bool present = true;  // false for a None entry of an optional-tensor list
  };

  std::string_view op_name_;
  std::vector<c10::IValue> operands_;  // tensors, scalars, lists, statics, in order
  // Set by KeepGeometryOnly: the dropped tensors' geometries (operands in order, list entries
  // inline, then destinations) and each list operand's length.
  std::vector<TensorGeometry> geometries_;
  std::vector<uint32_t> list_lengths_;
  bool geometry_only_ = false;
  std::vector<OperandKind> operand_kinds_;
  std::vector<std::pair<size_t, at::Tensor>> destinations_;
  // Bit i: entry i borrows its tensor (AddBorrowedTensor) and is let go without a decrement.
  // A copy of the launch copies the entries as owned references, so it starts empty; a move
  // takes the bits along. Entries past the 64th are always owned.
  struct BorrowedSet {
    uint64_t bits = 0;
    BorrowedSet() = default;
    BorrowedSet(const BorrowedSet&) {}
    BorrowedSet(BorrowedSet&& other) noexcept : bits(other.bits) { other.bits = 0; }
    BorrowedSet& operator=(const BorrowedSet&) = delete;
    bool Has(size_t i) const { return i < 64 && (bits >> i & 1) != 0; }
  };
  BorrowedSet borrowed_operands_;
  BorrowedSet borrowed_destinations_;
  // Lets go of every borrowed tensor without touching its count, leaving None / undefined.
  void ReleaseBorrowed() noexcept;
  // AddTensor's checks; records the operand's kind.
  void CheckTensorOperand(const at::Tensor& tensor);
  bool check_cast_ = true;
  std::vector<std::pair<uint64_t, uint64_t>> rng_states_;
  OutputStrides output_strides_;
  OutputStrides output_dim_orders_;
  bool pointwise_ = false;
  int64_t flat_elements_ = -1;  // elements the program is built over when flattened, else -1
  bool flat_lists_ = false;     // SetFlattenLists
  std::vector<std::vector<int64_t>> flat_result_sizes_;
  // Elements `tensor` is read or written as (a 1-d view), or -1 when it keeps its shape.
  int64_t FlatElementsFor(const at::Tensor& tensor) const {
    if (flat_elements_ >= 0) return flat_elements_;
    return flat_lists_ && tensor.dim() > 0 ? tensor.numel() : -1;
  }
  bool Flattened() const { return flat_elements_ >= 0 || flat_lists_; }
  // Gives flattened new results their shapes back.
  void RestoreFlattenedShapes(std::vector<at::Tensor>& new_results, const at::Tensor* flat_shape,
                              const std::vector<int>& result_new_index) const;
  // The matmul precision current when the op was called (lowering/matmul_precision.h): signed,
  // and the op lowers under it even when a deferred graph lowers it later. Unsigned
  // (lowering::kUnsignedMatmulPrecision) for lowerings not known to read it.
  int8_t matmul_precision_;
};

// Blocks until all launched device work is done; throws the first device error, if any, and
// the first failed device-side check.
void SynchronizeAll();
// Whether all device work launched so far has finished (never blocks).
bool AllWorkDone();
// Whether lowerings' device-side checks are compiled into programs (TORCH_TPU_DEVICE_CHECKS=0
// turns them off for raw XLA indexing semantics).
bool DeviceChecksEnabled();

}  // namespace torch_tpu::exec
