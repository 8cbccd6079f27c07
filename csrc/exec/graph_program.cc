#include "exec/graph_program.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/DefaultDtype.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <sstream>

#include "exec/deferred_graph.h"
#include "exec/eager.h"
#include "exec/launch_lock.h"
#include "exec/pending_work.h"
#include "exec/plan_cache.h"
#include "exec/program_builder.h"
#include "exec/program_execution.h"
#include "exec/program_issue.h"
#include "exec/scalar_buffers.h"
#include "exec/tiered_compilation.h"
#include "exec/view_io.h"
#include "lowering/context.h"
#include "lowering/dtype.h"
#include "lowering/matmul_precision.h"
#include "lowering/registry.h"
#include "pjrt/error.h"
#include "runtime/device.h"
#include "runtime/generator.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

using lowering::LoweringContext;
using lowering::Operand;
using runtime::StorageBuffer;
using runtime::StorageContents;
using stablehlo::ElementType;
using stablehlo::Value;

namespace {

bool IsHostScalar(const at::Tensor& tensor) {
  return tensor.device().is_cpu() && tensor.dim() == 0;
}

// Python numbers become 0-d constants typed as eager types them (bool, int64, double,
// complex128).
Value NumberConstant(stablehlo::FunctionBuilder& builder, const c10::IValue& number) {
  if (number.isBool()) return builder.ConstantInt(ElementType::kPred, number.toBool() ? 1 : 0);
  if (number.isInt()) return builder.ConstantInt(ElementType::kS64, number.toInt());
  if (number.isDouble()) return builder.Constant(ElementType::kF64, number.toDouble());
  if (number.isComplexDouble()) {
    const c10::complex<double> value = number.toComplexDouble();
    return builder.Complex(builder.Constant(ElementType::kF64, value.real()),
                           builder.Constant(ElementType::kF64, value.imag()));
  }
  if (number.isScalar()) return NumberConstant(builder, c10::IValue(number.toScalar()));
  throw c10::NotImplementedError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                 "a number argument of an unsupported kind");
}

[[noreturn]] void Unsupported(const std::string& what) {
  throw c10::NotImplementedError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, what);
}

std::atomic<int64_t> next_graph_id{1};

}  // namespace

struct GraphProgram::Plan {
  BuiltProgram program;  // its executable is set once `compile` is done
  std::shared_ptr<CompileJob> compile;  // null when compiled on the calling thread
  std::shared_ptr<const std::string> description;
  std::vector<int> rng_sources;  // per RNG state argument: index into `generators`, or -1
};

struct GraphProgram::Snapshot {
  std::vector<StorageSlot> slots;
  std::vector<int> input_slots;   // per input: slot, or -1 for a host scalar
  std::vector<int> input_scalar;  // per input: runtime scalar index, or -1
  std::vector<HostScalar> host_scalars;
  // The matmul precision the graph is signed with and lowers under.
  lowering::MatmulPrecision matmul_precision = lowering::MatmulPrecision::kHighest;
  ProgramSignature signature;

  void Clear() {
    slots.clear();
    input_slots.clear();
    input_scalar.clear();
    host_scalars.clear();
    signature.Clear();
  }
};

GraphProgram::GraphProgram(std::vector<GraphNode> nodes, std::vector<GraphTensorMeta> inputs,
                           std::vector<GraphValueRef> outputs, std::string description)
    : nodes_(std::move(nodes)),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)),
      description_(std::move(description)),
      id_(next_graph_id++) {}

GraphProgram::~GraphProgram() { PlanCache::Get().ForgetOwner(id_); }

const ProgramSignature& GraphProgram::TakeSnapshot(const std::vector<at::Tensor>& inputs,
                                                   Snapshot& snapshot) const {
  snapshot.Clear();
  ProgramSignature& signature = snapshot.signature;
  signature.AddTag(SignatureTag::kOp);
  signature.Add(id_);
  signature.AddTag(SignatureTag::kDefaultDtype);
  signature.Add(static_cast<int64_t>(c10::get_default_dtype_as_scalartype()));
  // Read at every call: a compiled graph runs under whatever precision the caller has set since.
  snapshot.matmul_precision = lowering::CurrentMatmulPrecision();
  signature.AddTag(SignatureTag::kMatmulPrecision);
  signature.Add(static_cast<int64_t>(snapshot.matmul_precision));
  for (const at::Tensor& tensor : inputs) {
    if (IsHostScalar(tensor)) {
      HostScalar host{};
      host.type = lowering::ToElementTypeOrThrow(tensor.scalar_type(), description_.c_str());
      host.size = tensor.element_size();
      std::memcpy(host.bytes, tensor.const_data_ptr(), host.size);
      snapshot.input_slots.push_back(-1);
      snapshot.input_scalar.push_back(static_cast<int>(snapshot.host_scalars.size()));
      snapshot.host_scalars.push_back(host);
      signature.AddTag(SignatureTag::kHostScalarTensor);
      signature.Add(static_cast<int64_t>(tensor.scalar_type()));
      continue;
    }
    StorageBuffer* storage = StorageOf(tensor);
    int slot = -1;
    for (size_t s = 0; s < snapshot.slots.size(); ++s) {
      if (snapshot.slots[s].storage == storage) slot = static_cast<int>(s);
    }
    if (slot < 0) {
      slot = static_cast<int>(snapshot.slots.size());
      // As a queued launch will leave it: a graph issued behind one (its forward still
      // compiling) queues too instead of waiting here.
      snapshot.slots.push_back(
          {storage, storage ? storage->launch_contents() : StorageContents{}});
    }
    snapshot.input_slots.push_back(slot);
    snapshot.input_scalar.push_back(-1);
    signature.AddTag(SignatureTag::kTensor);
    signature.Add(slot);
    signature.AddView(tensor);
  }
  SignStorageSlots(snapshot.slots, signature);
  return signature;
}

namespace {

// Builds the module of one graph over one input snapshot.
class GraphLowering {
 public:
  GraphLowering(const std::vector<GraphNode>& nodes, const std::vector<GraphTensorMeta>& metas,
                const std::vector<at::Tensor>& inputs, const std::vector<int>& input_slots,
                const std::vector<int>& input_scalar, const std::vector<HostScalar>& scalars,
                ProgramBuilder& program, const std::string& description)
      : nodes_(nodes),
        metas_(metas),
        inputs_(inputs),
        input_slots_(input_slots),
        program_(program),
        description_(description),
        values_(nodes.size()),
        view_bases_(nodes.size()) {
    // Runtime scalars are program arguments in input order, matching the snapshot's list.
    scalar_values_.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (input_scalar[i] >= 0) {
        scalar_values_[i] = program_.RuntimeScalar(scalars[input_scalar[i]].type);
      }
    }
  }

  void LowerAll() {
    for (size_t n = 0; n < nodes_.size(); ++n) {
      const GraphNode& node = nodes_[n];
      switch (node.kind) {
        case GraphNode::Kind::kLowered:
          LowerOp(n);
          break;
        case GraphNode::Kind::kView:
          LowerView(n);
          break;
        case GraphNode::Kind::kConvert: {
          LoweringContext context(program_.builder(), node.op);
          values_[n] = {
              context.Convert(Resolve(node.arguments.at(0).ref), node.results.at(0).dtype)};
          break;
        }
        case GraphNode::Kind::kZeros: {
          LoweringContext context(program_.builder(), node.op);
          const GraphTensorMeta& meta = node.results.at(0);
          values_[n] = {context.ConstantInt(0, meta.dtype, meta.sizes)};
          break;
        }
        case GraphNode::Kind::kCopyInto: {
          const GraphValueRef& target = node.arguments.at(0).ref;
          WriteInput(node, target, Resolve(node.arguments.at(1).ref));
          values_[n] = {Resolve(target)};
          break;
        }
      }
    }
  }

  Value Resolve(const GraphValueRef& ref) {
    if (ref.kind == GraphValueRef::Kind::kNode) {
      const auto& results = values_.at(ref.index);
      TORCH_INTERNAL_ASSERT(static_cast<size_t>(ref.result) < results.size(), description_,
                            ": node ", ref.index, " has no result ", ref.result);
      return results[ref.result];
    }
    const at::Tensor& tensor = inputs_.at(ref.index);
    if (input_slots_[ref.index] < 0) return scalar_values_[ref.index];
    return program_.Read(input_slots_[ref.index],
                         lowering::ToElementTypeOrThrow(tensor.scalar_type(), description_.c_str()),
                         ViewOf(tensor));
  }

  c10::ScalarType DtypeOf(const GraphValueRef& ref) {
    if (ref.kind == GraphValueRef::Kind::kInput) return inputs_.at(ref.index).scalar_type();
    return LoweringContext::DtypeOf(Resolve(ref));
  }

  // Per RNG state the program takes (in creation order): the generator it draws from.
  const std::vector<int>& rng_sources() const { return rng_sources_; }

 private:
  void WriteInput(const GraphNode& node, const GraphValueRef& target, Value value) {
    if (target.kind != GraphValueRef::Kind::kInput || input_slots_[target.index] < 0) {
      Unsupported(node.op + " writing into a value that is not a tpu graph input");
    }
    const at::Tensor& destination = inputs_[target.index];
    LoweringContext context(program_.builder(), node.op);
    Value converted = context.BroadcastTo(context.Convert(value, destination.scalar_type()),
                                          destination.sizes().vec());
    program_.Write(input_slots_[target.index],
                   lowering::ToElementTypeOrThrow(destination.scalar_type(), node.op.c_str()),
                   ViewOf(destination), converted);
  }

  Operand TensorOperand(const GraphValueRef& ref) {
    Operand operand;
    operand.kind = Operand::Kind::kTensor;
    operand.value = Resolve(ref);
    operand.dtype = DtypeOf(ref);
    if (ref.kind == GraphValueRef::Kind::kInput && input_slots_[ref.index] < 0) {
      operand.wrapped_number = inputs_[ref.index].unsafeGetTensorImpl()->is_wrapped_number();
    }
    return operand;
  }

  void LowerOp(size_t n) {
    const GraphNode& node = nodes_[n];
    const lowering::LoweringEntry* entry = lowering::LoweringRegistry::Get().Find(node.op);
    if (entry == nullptr) Unsupported(node.op + " has no tpu lowering");
    if (entry->variant == lowering::LoweringEntry::Variant::kOut) {
      Unsupported(node.op + ": out= variants inside a graph");
    }
    std::vector<Value> node_rng;
    const auto draw = [&](int generator) {
      node_rng.push_back(program_.RngState());
      rng_sources_.push_back(node.generator >= 0 ? node.generator : generator);
    };
    if (entry->implicit_random) draw(-1);
    std::vector<Operand> operands;
    for (const GraphArgument& argument : node.arguments) {
      Operand operand;
      switch (argument.kind) {
        case GraphArgument::Kind::kTensor:
          operand = TensorOperand(argument.ref);
          break;
        case GraphArgument::Kind::kNumber:
        case GraphArgument::Kind::kScalar:
          // Eager passes a Python number as a wrapped-number tensor where the schema takes a
          // Tensor, else as a scalar; inside a graph the number is a constant of the program.
          operand.value = NumberConstant(program_.builder(), argument.value);
          operand.dtype = LoweringContext::DtypeOf(operand.value);
          operand.wrapped_number = argument.kind == GraphArgument::Kind::kNumber;
          operand.kind = operand.wrapped_number ? Operand::Kind::kTensor : Operand::Kind::kScalar;
          break;
        case GraphArgument::Kind::kTensorList:
        case GraphArgument::Kind::kOptionalTensorList:
          operand.kind = Operand::Kind::kTensorList;
          for (const auto& ref : argument.refs) {
            operand.values.push_back(ref ? Resolve(*ref) : Value());
            operand.dtypes.push_back(ref ? DtypeOf(*ref) : c10::ScalarType::Undefined);
          }
          break;
        case GraphArgument::Kind::kStatic:
          operand.kind = Operand::Kind::kStatic;
          operand.ivalue = argument.value;
          break;
        case GraphArgument::Kind::kGenerator:
          draw(argument.generator);
          continue;
      }
      operands.push_back(std::move(operand));
    }
    LoweringContext context(program_.builder(), entry->functional_name);
    context.set_rng_states(node_rng);
    std::vector<Value> results = (*entry->function)(context, operands);
    if (DeviceChecksEnabled()) {
      program_.AddDeviceChecks(context.device_checks(), description_ + ": " + node.op);
    }
    if (entry->variant == lowering::LoweringEntry::Variant::kInPlace) {
      const GraphValueRef& target = node.arguments.at(0).ref;
      WriteInput(node, target, results.at(0));
      results[0] = Resolve(target);
    }
    values_[n] = std::move(results);
  }

  // A view reads the storage it shares with its base through the eager strided-read lowering.
  struct ViewBase {
    int input = -1;            // a graph input's storage (slot of that input)
    int64_t offset_shift = 0;  // real storage offset - fake storage offset of that input
    Value flat;                // else the dense storage of an intermediate
    int64_t storage_offset = 0;
  };

  ViewBase BaseOf(const GraphNode& node, const GraphValueRef& ref) {
    if (ref.kind == GraphValueRef::Kind::kInput) {
      const at::Tensor& tensor = inputs_.at(ref.index);
      const GraphTensorMeta& fake = metas_.at(ref.index);
      if (input_slots_[ref.index] < 0 || tensor.sizes().vec() != fake.sizes ||
          tensor.strides().vec() != fake.strides) {
        Unsupported(node.op + ": a view of an input whose layout differs from the traced one");
      }
      return ViewBase{ref.index, tensor.storage_offset() - fake.storage_offset, Value(), 0};
    }
    if (nodes_.at(ref.index).kind == GraphNode::Kind::kView) return view_bases_[ref.index];
    const GraphTensorMeta& meta = nodes_[ref.index].results.at(ref.result);
    if (DenseStridesLike(meta.sizes, meta.strides) != meta.strides) {
      Unsupported(node.op + ": a view of a result with a non-dense layout");
    }
    // The result's storage: its elements in memory order.
    std::vector<int64_t> order(meta.sizes.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return meta.strides[a] > meta.strides[b]; });
    auto& builder = program_.builder();
    Value value = Resolve(ref);
    Value physical =
        std::is_sorted(order.begin(), order.end()) ? value : builder.Transpose(value, order);
    return ViewBase{-1, 0, builder.Reshape(physical, {value.type().NumElements()}),
                    meta.storage_offset};
  }

  // Views with several results (split, unbind) read each one from the shared storage.
  void LowerView(size_t n) {
    const GraphNode& node = nodes_[n];
    const GraphValueRef& source = node.arguments.at(0).ref;
    const c10::ScalarType source_dtype = DtypeOf(source);
    ViewBase base = BaseOf(node, source);
    view_bases_[n] = base;
    for (const GraphTensorMeta& out : node.results) {
      if (out.dtype != source_dtype) Unsupported(node.op + ": a view that changes the dtype");
      if (base.input >= 0) {
        const ElementType type = lowering::ToElementTypeOrThrow(out.dtype, node.op.c_str());
        values_[n].push_back(program_.Read(
            input_slots_[base.input], type,
            StridedView{out.sizes, out.strides, out.storage_offset + base.offset_shift}));
      } else {
        values_[n].push_back(ReadView(
            program_.builder(), base.flat,
            StridedView{out.sizes, out.strides, out.storage_offset - base.storage_offset}));
      }
    }
  }

  const std::vector<GraphNode>& nodes_;
  const std::vector<GraphTensorMeta>& metas_;
  const std::vector<at::Tensor>& inputs_;
  const std::vector<int>& input_slots_;
  ProgramBuilder& program_;
  const std::string& description_;
  std::vector<std::vector<Value>> values_;
  std::vector<ViewBase> view_bases_;
  std::vector<Value> scalar_values_;
  std::vector<int> rng_sources_;
};

}  // namespace

std::shared_ptr<GraphProgram::Plan> GraphProgram::BuildPlan(const std::vector<at::Tensor>& inputs,
                                                            const Snapshot& snapshot) const {
  std::vector<StorageSlotInfo> slot_infos;
  for (const auto& slot : snapshot.slots) {
    slot_infos.push_back({slot.storage ? slot.storage->nbytes() : 0, slot.contents.initialized(),
                          slot.contents.element_type});
  }
  std::ostringstream text;
  text << description_ << '(';
  for (size_t i = 0; i < inputs.size(); ++i) {
    text << (i ? ", " : "") << inputs[i].scalar_type() << inputs[i].sizes();
  }
  text << ')';
  auto plan = std::make_shared<Plan>();
  plan->description = std::make_shared<const std::string>(text.str());
  const auto emit = [&](ProgramBuilder& program) {
    const lowering::MatmulPrecisionScope precision(snapshot.matmul_precision);
    GraphLowering lowering(nodes_, inputs_, inputs, snapshot.input_slots, snapshot.input_scalar,
                           snapshot.host_scalars, program, *plan->description);
    lowering.LowerAll();
    plan->rng_sources = lowering.rng_sources();
    for (const GraphValueRef& ref : outputs_) {
      TORCH_INTERNAL_ASSERT(ref.kind == GraphValueRef::Kind::kNode,
                            "graph outputs that are inputs are returned by the caller");
      const GraphTensorMeta& meta = nodes_.at(ref.index).results.at(ref.result);
      LoweringContext context(program.builder(), description_);
      Value value = lowering.Resolve(ref);
      if (LoweringContext::DtypeOf(value) != meta.dtype) value = context.Convert(value, meta.dtype);
      TORCH_CHECK(value.dims() == meta.sizes, *plan->description, ": output of shape ",
                  c10::IntArrayRef(value.dims()), " where the graph traced ",
                  c10::IntArrayRef(meta.sizes));
      std::vector<int64_t> strides = DenseStridesLike(meta.sizes, meta.strides) == meta.strides
                                         ? meta.strides
                                         : DenseStridesLike(meta.sizes, {});
      program.AddNewOutput(value, meta.dtype, std::move(strides));
    }
  };
  const runtime::CompileTier tier = WholeProgramTier();
  if (tier != runtime::CompileTier::kOptimized) {
    plan->program = BuildProgram(std::move(slot_infos), emit, tier);  // tiered: quick build now
    return plan;
  }
  // Compiled in the background: the call returns with its outputs queued behind the compile,
  // so the backward's program compiles while the forward's does.
  ProgramBuilder::Uncompiled uncompiled = BuildUncompiledProgram(std::move(slot_infos), emit);
  plan->program = std::move(uncompiled.program);
  CompileForIssue(plan, plan->program, plan->compile, std::move(uncompiled.module));
  return plan;
}

std::vector<at::Tensor> GraphProgram::Run(const std::vector<at::Tensor>& inputs,
                                          const std::vector<at::Generator>& generators) {
  TORCH_CHECK(inputs.size() == inputs_.size(), description_, ": expected ", inputs_.size(),
              " inputs, got ", inputs.size());
  std::optional<c10::Device> device;
  for (const at::Tensor& tensor : inputs) {
    TORCH_CHECK(tensor.defined(), description_, ": an undefined input tensor");
    if (IsHostScalar(tensor)) continue;
    TORCH_CHECK(tensor.device().is_privateuseone(),
                "Expected all tensors to be on the same device, but found at least two devices, ",
                "tpu and ", tensor.device(), "! (in ", description_, ", an input of shape ",
                tensor.sizes(), ")");
    // A tpu tensor without a device buffer (a fake or meta-backed tensor) would read as
    // zeros.
    TORCH_CHECK(tensor.storage().nbytes() == 0 || StorageOf(tensor) != nullptr, description_,
                ": an input of shape ", tensor.sizes(),
                " has no device buffer (a fake or meta tensor); a compiled program runs on real "
                "tpu tensors");
    if (!device) device = tensor.device();
    TORCH_CHECK(*device == tensor.device(),
                "Expected all tensors to be on the same device, but found at least two devices, ",
                *device, " and ", tensor.device(), "! (in ", description_, ")");
  }
  const int device_index = device ? device->index() : runtime::CurrentDevice();
  runtime::DeviceScope device_scope(device_index);
  // The snapshot reads inputs' buffers under the launch lock, which running a pending deferred
  // graph takes too: run it first.
  DeferredGraph::Get().Flush("compiled_graph");

  Snapshot snapshot;
  ReleaseSlotsOnExit release_on_exit{snapshot.slots};
  std::unique_lock<std::mutex> lock(LaunchMutex());
  PlanCache& plans = PlanCache::Get();
  const std::shared_ptr<const Plan> plan = FindOrBuildUnderLock<Plan>(
      lock,
      [&]() -> const ProgramSignature& { return TakeSnapshot(inputs, snapshot); },
      [&](const ProgramSignature& key) { return plans.Find<Plan>(key); },
      [&](const ProgramSignature& key) {
        bool fresh = false;  // built by this call, not found built by another thread
        std::shared_ptr<const Plan> plan = plans.GetOrBuild<Plan>(
            key,
            [&] {
              std::shared_ptr<const Plan> built;
              try {
                built = BuildPlan(inputs, snapshot);
              } catch (const c10::Error&) {
                throw;  // NotImplementedError sends the graph to eager; the rest name it already
              } catch (const std::exception& error) {
                TORCH_CHECK(false, description_, ": ", error.what());  // a compile error
              }
              ++programs_built_;
              return built;
            },
            PlanCache::Options{.owner = id_}, &fresh);
        if (fresh) ForgetPlanIfCompileFails(key, plan.get(), plan->compile);
        return plan;
      });

  // Each random node draws fresh bits on every run from its generator, in graph order, as the
  // same ops would in eager: the default generator's offset advances exactly as eagerly.
  std::vector<std::pair<uint64_t, uint64_t>> rng_states;
  rng_states.reserve(plan->rng_sources.size());
  for (const int source : plan->rng_sources) {
    TORCH_CHECK(source < static_cast<int>(generators.size()), description_,
                ": a random node draws from generator ", source, " of ", generators.size());
    rng_states.push_back(
        runtime::ResolveGenerator(source < 0 ? std::nullopt
                                             : std::optional<at::Generator>(generators[source]))
            ->Reserve());
  }
  return IssueProgram(lock, {plan, plan->program, plan->compile, plan->description, device_index},
                      snapshot.slots, snapshot.host_scalars, rng_states);
}

}  // namespace torch_tpu::exec
