#include "distributed/tpu_dist_backend.h"

#include "distributed/coalesced_work.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <set>

#include "distributed/store_key_value_store.h"
#include "runtime/runtime.h"

namespace torch_tpu::distributed {
namespace {

std::vector<at::Tensor> Flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> flat;
  for (const auto& list : lists) flat.insert(flat.end(), list.begin(), list.end());
  return flat;
}

// Every tensor of one call lives on tpu or on the CPU, never elsewhere or mixed: the transport
// stages tpu tensors and hands CPU ones to the host transport as they are.
void CheckDevices(const std::string& op, const std::vector<at::Tensor>& tensors) {
  std::optional<c10::DeviceType> type;
  for (const at::Tensor& tensor : tensors) {
    const c10::Device device = tensor.device();
    TORCH_CHECK(device.is_cpu() || device.is_privateuseone(), "tpu_dist ", op,
                ": expected tpu or cpu tensors, got a tensor on ", device);
    TORCH_CHECK(!type || *type == device.type(), "tpu_dist ", op,
                ": tensors must all be on tpu or all on cpu, got both");
    type = device.type();
  }
}

std::vector<c10::Device> TpuDevices(const std::vector<at::Tensor>& tensors) {
  std::set<c10::DeviceIndex> indices;
  for (const at::Tensor& tensor : tensors) {
    if (tensor.device().is_privateuseone()) indices.insert(tensor.device().index());
  }
  std::vector<c10::Device> devices;
  for (c10::DeviceIndex index : indices) devices.emplace_back(c10::DeviceType::PrivateUse1, index);
  return devices;
}

std::vector<at::Tensor> Concat(std::vector<at::Tensor> first, const std::vector<at::Tensor>& rest) {
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}

// One tensor on one side and one list of world-size tensors of its shape and dtype on the other
// (allgather's outputs, reduce_scatter's inputs): what the device programs take.
bool OneListOfWorldSize(const std::vector<std::vector<at::Tensor>>& lists,
                        const std::vector<at::Tensor>& single, int size) {
  if (lists.size() != 1 || single.size() != 1 || lists[0].size() != static_cast<size_t>(size)) {
    return false;
  }
  for (const at::Tensor& tensor : lists[0]) {
    if (tensor.sizes() != single[0].sizes() || tensor.scalar_type() != single[0].scalar_type()) {
      return false;
    }
  }
  return true;
}

void CheckAverageable(const std::string& op, const std::vector<at::Tensor>& inputs) {
  for (const at::Tensor& tensor : inputs) {
    TORCH_CHECK(at::isFloatingType(tensor.scalar_type()) || at::isComplexType(tensor.scalar_type()),
                "tpu_dist ", op, ": ReduceOp.AVG needs floating-point tensors, got ",
                tensor.scalar_type());
  }
}

// PREMUL_SUM's scaling, where the tensors live, before the sum (asynchronous on tpu); an input
// the op does not write is scaled into a new tensor.
void ScaleForPreMulSum(const std::string& op, const c10d::ReduceOp& reduce_op,
                       std::vector<at::Tensor>& inputs, bool in_place) {
  const auto* supplement =
      dynamic_cast<const c10d::PreMulSumSupplement*>(reduce_op.supplement_.get());
  TORCH_CHECK(supplement != nullptr, "tpu_dist ", op, ": PREMUL_SUM without its factor");
  for (at::Tensor& input : inputs) {
    const at::Scalar factor = supplement->double_factor;
    if (supplement->tensor_factor.defined()) {
      const at::Tensor tensor_factor = supplement->tensor_factor.to(input.device());
      input = in_place ? input.mul_(tensor_factor) : input.mul(tensor_factor);
    } else {
      input = in_place ? input.mul_(factor) : input.mul(factor);
    }
  }
}

}  // namespace

TpuDistBackend::TpuDistBackend(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                               std::chrono::milliseconds timeout,
                               c10::intrusive_ptr<c10d::Backend> host)
    : c10d::Backend(rank, size),
      store_(store),
      timeout_(timeout),
      host_(std::move(host)),
      peers_(std::move(store), rank, size, timeout),
      collectives_(nullptr),
      point_to_point_(nullptr) {
  TORCH_CHECK(host_, "tpu_dist: a host transport backend is required");
  TORCH_CHECK(host_->getRank() == rank && host_->getSize() == size,
              "tpu_dist: the host transport (", host_->getBackendName(), ") has rank ",
              host_->getRank(), " of ", host_->getSize(), ", expected rank ", rank, " of ", size);
  collectives_ = std::make_unique<CompletionQueue>(*host_, peers_);
  point_to_point_ = std::make_unique<CompletionQueue>(*host_, peers_);
  // The group of every process (torchrun's RANK of WORLD_SIZE) makes the device client, when it
  // is created, one of `size` processes: on TPU and GPU plugins the processes' devices then form
  // one topology and collectives run on them (DeviceTransport).
  const char* world = std::getenv("WORLD_SIZE");
  const char* global_rank = std::getenv("RANK");
  if (size > 1 && world != nullptr && global_rank != nullptr && std::atoi(world) == size &&
      std::atoi(global_rank) == rank) {
    runtime::Runtime::JoinProcesses(
        {rank, size, std::make_shared<StoreKeyValueStore>(store_, "tpu_dist/pjrt/")});
  }
}

DeviceTransport* TpuDistBackend::Device(const std::vector<at::Tensor>& tensors) {
  for (const at::Tensor& tensor : tensors) {
    if (!tensor.device().is_privateuseone()) return nullptr;
  }
  std::call_once(device_once_, [this] {
    device_ = DeviceTransport::ForGroup(getRank(), getSize());
    const pjrt::PjrtClient& client = runtime::Runtime::Get().client();
    if (!device_ && client.platform_name() != "cpu") {
      TORCH_WARN("tpu_dist: the ", client.platform_name(), " client spans ",
                 client.process_count(), " process(es), not this group's ", getSize(),
                 ", so collectives of tpu tensors go through host memory. Create the process "
                 "group (init_process_group) before the first tpu tensor so that the device "
                 "client joins every rank and collectives run on the devices.");
    }
  });
  return device_ && device_->Accepts(tensors) ? device_.get() : nullptr;
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::SubmitOnDevice(
    c10d::OpType type, TpuDistWork::Launch launch, DeviceTransport* device,
    collectives::CollectiveSpec spec, DeviceTransport::Operand operand, at::Tensor output,
    std::function<void()> then) {
  launch.transport = "device transport";
  // A rank whose call takes the other transport would wait forever for this one: the records
  // differ instead, and every rank raises.
  launch.record.signature += " on the device";
  spec.world_size = getSize();
  return Submit(type, std::move(launch),
                [device, spec = std::move(spec), operand = std::move(operand),
                 output = std::move(output), then = std::move(then),
                 timeout = timeout_](c10d::Backend&) {
                  device->Run(spec, operand, output, timeout);
                  if (then) then();
                  return CompletedWork();
                });
}

collectives::ReduceOp TpuDistBackend::DeviceReduceOp(const std::string& op,
                                                     const c10d::ReduceOp& reduce_op,
                                                     std::vector<at::Tensor>& inputs,
                                                     bool in_place) {
  using collectives::ReduceOp;
  switch (reduce_op.op_) {
    case c10d::ReduceOp::SUM: return ReduceOp::kSum;
    case c10d::ReduceOp::PRODUCT: return ReduceOp::kProduct;
    case c10d::ReduceOp::MIN: return ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return ReduceOp::kMax;
    case c10d::ReduceOp::BAND: return ReduceOp::kBitwiseAnd;
    case c10d::ReduceOp::BOR: return ReduceOp::kBitwiseOr;
    case c10d::ReduceOp::BXOR: return ReduceOp::kBitwiseXor;
    case c10d::ReduceOp::AVG:
      CheckAverageable(op, inputs);
      return ReduceOp::kAverage;
    case c10d::ReduceOp::PREMUL_SUM:
      ScaleForPreMulSum(op, reduce_op, inputs, in_place);
      return ReduceOp::kSum;
    default: TORCH_CHECK(false, "tpu_dist ", op, ": unsupported reduce op");
  }
}

c10::intrusive_ptr<c10d::Backend::Options> TpuDistBackend::getBackendOptions() {
  return c10::make_intrusive<Options>("tpu_dist", timeout_);
}

void TpuDistBackend::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  host_->setTimeout(timeout);
}

TpuDistWork::Launch TpuDistBackend::Begin(
    const std::string& op, const std::vector<at::Tensor>& tensors,
    const std::optional<std::vector<at::Tensor>>& agreeing) {
  CheckDevices(op, tensors);
  TpuDistWork::Launch launch;
  launch.record.sequence = ++sequence_;
  launch.record.op = op;
  launch.record.signature = DescribeTensors(agreeing ? *agreeing : tensors);
  return launch;
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::Submit(
    c10d::OpType type, TpuDistWork::Launch launch,
    std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend&)> run) {
  const bool collective = launch.collective;
  const bool caller_waits = launch.caller_waits;
  if (collective) {
    // Announced as it is issued (in call order): the peers' records of queued collectives arrive
    // while earlier ones run, so completing them finds them already here.
    peers_.Announce(launch.record);
    launch.run = std::move(run);
  } else {
    // Point-to-point ops start on the transport now, not in the collective order: a rank's
    // isend must not wait behind its own irecv (batch_isend_irecv posts both before waiting).
    // The transport reads a send's tensors as soon as it starts: their values must be final.
    launch.staging.Prepare();
    launch.host_work = run(*host_);
  }
  std::vector<c10::Device> devices = TpuDevices(launch.outputs);
  auto work = c10::make_intrusive<TpuDistWork>(getRank(), type, std::move(launch), timeout_,
                                               &peers_, std::move(devices));
  if (coalesced_) coalesced_->push_back(work);
  if (collective && caller_waits) {
    collectives_->CompleteHereOrPush(work);
  } else {
    (collective ? collectives_ : point_to_point_)->Push(work);
  }
  return work;
}

void TpuDistBackend::startCoalescing() {
  TORCH_CHECK(!coalesced_, "tpu_dist: a coalescing block started inside another one");
  coalesced_.emplace();
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::endCoalescing() {
  TORCH_CHECK(coalesced_, "tpu_dist: endCoalescing without startCoalescing");
  auto works = std::move(*coalesced_);
  coalesced_.reset();
  return c10::make_intrusive<CoalescedWork>(getRank(), std::move(works));
}

c10d::ReduceOp TpuDistBackend::PrepareReduce(const std::string& op,
                                             const c10d::ReduceOp& reduce_op,
                                             std::vector<at::Tensor>& inputs, bool in_place,
                                             TpuDistWork::Launch& launch) {
  if (reduce_op == c10d::ReduceOp::AVG) {
    CheckAverageable(op, inputs);
    // The sum over the transport, divided on the host before the results go back.
    const int size = getSize();
    launch.finish = [size](HostStaging& staging) {
      for (const at::Tensor& host : staging.written_host()) host.div_(size);
      for (const at::Tensor& cpu : staging.written_cpu()) cpu.div_(size);
    };
    return c10d::ReduceOp(c10d::ReduceOp::SUM);
  }
  if (reduce_op == c10d::ReduceOp::PREMUL_SUM) {
    ScaleForPreMulSum(op, reduce_op, inputs, in_place);
    return c10d::ReduceOp(c10d::ReduceOp::SUM);
  }
  return reduce_op;
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::ListsOut(
    const std::string& op, c10d::OpType type, std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, bool inputs_agree, ListsCall call) {
  const auto flat_outputs = Flatten(outputs);
  auto launch = Begin(op, Concat(inputs, flat_outputs),
                      inputs_agree ? std::optional(inputs) : std::vector<at::Tensor>{});
  auto host_inputs = launch.staging.LendAll(inputs);
  std::vector<std::vector<at::Tensor>> host_outputs;
  for (const auto& list : outputs) {
    host_outputs.push_back(launch.staging.StageAll(list, false, true));
  }
  launch.outputs = flat_outputs;
  return Submit(type, std::move(launch), [=](c10d::Backend& transport) mutable {
    return call(transport, host_outputs, host_inputs);
  });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::VectorsOut(
    const std::string& op, c10d::OpType type, std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs, bool shapes_agree,
    const std::optional<c10d::ReduceOp>& reduce_op, VectorsCall call) {
  auto launch = Begin(op, Concat(inputs, outputs),
                      shapes_agree ? std::nullopt : std::optional(std::vector<at::Tensor>{}));
  c10d::ReduceOp host_op;
  std::vector<at::Tensor> sources = inputs;
  if (reduce_op) host_op = PrepareReduce(op, *reduce_op, sources, false, launch);
  // Reductions may use their inputs as scratch; the other ops only read them.
  auto host_inputs =
      reduce_op ? launch.staging.StageAll(sources, true, false) : launch.staging.LendAll(sources);
  auto host_outputs = launch.staging.StageAll(outputs, false, true);
  launch.outputs = outputs;
  return Submit(type, std::move(launch), [=](c10d::Backend& transport) mutable {
    return call(transport, host_outputs, host_inputs, host_op);
  });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                         const c10d::BroadcastOptions& opts) {
  if (DeviceTransport* device =
          tensors.size() == 1 && opts.rootTensor == 0 ? Device(tensors) : nullptr) {
    auto launch = Begin("broadcast", tensors);
    launch.caller_waits = !opts.asyncOp;
    collectives::CollectiveSpec spec;
    spec.kind = collectives::CollectiveKind::kBroadcast;
    spec.root = opts.rootRank;
    DeviceTransport::Operand operand = device->Capture(tensors[0]);
    at::Tensor output = tensors[0];
    launch.outputs = tensors;
    return SubmitOnDevice(c10d::OpType::BROADCAST, std::move(launch), device, spec,
                          operand, output);
  }
  auto launch = Begin("broadcast", tensors);
  launch.caller_waits = !opts.asyncOp;
  // Only the root's values travel; the others' are overwritten.
  auto host = launch.staging.StageAll(tensors, getRank() == opts.rootRank, true);
  launch.outputs = tensors;
  return Submit(c10d::OpType::BROADCAST, std::move(launch),
                [=](c10d::Backend& transport) mutable { return transport.broadcast(host, opts); });
}

template <typename OpOptions>
c10::intrusive_ptr<c10d::Work> TpuDistBackend::InPlaceReduction(
    const std::string& op, c10d::OpType type, std::vector<at::Tensor>& tensors,
    const OpOptions& opts,
    std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend&, std::vector<at::Tensor>&,
                                                 const OpOptions&)>
        call) {
  auto launch = Begin(op, tensors);
  launch.caller_waits = !opts.asyncOp;
  OpOptions host_opts = opts;
  std::vector<at::Tensor> scaled = tensors;
  host_opts.reduceOp = PrepareReduce(op, opts.reduceOp, scaled, true, launch);
  // A synchronous call with nothing queued before it completes here at once (Submit), and its
  // caller launches nothing until it returns: the transport may update the buffers themselves.
  auto host = launch.caller_waits && collectives_->Idle()
                  ? launch.staging.StageAllForUpdateInPlace(scaled)
                  : launch.staging.StageAll(scaled, true, true);
  launch.outputs = tensors;
  return Submit(type, std::move(launch), [=](c10d::Backend& transport) mutable {
    return call(transport, host, host_opts);
  });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::AllreduceOptions& opts) {
  if (DeviceTransport* device = tensors.size() == 1 ? Device(tensors) : nullptr) {
    auto launch = Begin("allreduce", tensors);
    launch.caller_waits = !opts.asyncOp;
    std::vector<at::Tensor> sources = tensors;
    collectives::CollectiveSpec spec;
    spec.reduce_op = DeviceReduceOp("allreduce", opts.reduceOp, sources, true);
    DeviceTransport::Operand operand = device->Capture(sources[0]);
    at::Tensor output = tensors[0];
    launch.outputs = tensors;
    return SubmitOnDevice(c10d::OpType::ALLREDUCE, std::move(launch), device, spec,
                          operand, output);
  }
  return InPlaceReduction<c10d::AllreduceOptions>(
      "allreduce", c10d::OpType::ALLREDUCE, tensors, opts,
      [](c10d::Backend& transport, auto& host, const auto& host_opts) {
        return transport.allreduce(host, host_opts);
      });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return InPlaceReduction<c10d::AllreduceCoalescedOptions>(
      "allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors, opts,
      [](c10d::Backend& transport, auto& host, const auto& host_opts) {
        return transport.allreduce_coalesced(host, host_opts);
      });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::reduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::ReduceOptions& opts) {
  // Gloo leaves the non-root ranks' tensors as scratch; written back as they are, as on CPU.
  return InPlaceReduction<c10d::ReduceOptions>(
      "reduce", c10d::OpType::REDUCE, tensors, opts,
      [](c10d::Backend& transport, auto& host, const auto& host_opts) {
        return transport.reduce(host, host_opts);
      });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (DeviceTransport* device = OneListOfWorldSize(outputs, inputs, getSize())
                                    ? Device(Concat(inputs, outputs[0]))
                                    : nullptr) {
    auto launch = Begin("allgather", Concat(inputs, outputs[0]), inputs);
    collectives::CollectiveSpec spec;
    spec.kind = collectives::CollectiveKind::kAllGather;
    const at::Tensor& input = inputs[0];
    DeviceTransport::Operand operand = device->Capture(input);
    at::Tensor gathered = at::empty({input.numel() * getSize()}, input.options());
    std::vector<at::Tensor> targets = outputs[0];
    launch.outputs = targets;
    return SubmitOnDevice(c10d::OpType::ALLGATHER, std::move(launch), device, spec, operand,
                          gathered, [gathered, targets] {
      c10::DeviceGuard guard(gathered.device());
      const int64_t block = gathered.numel() / static_cast<int64_t>(targets.size());
      for (size_t r = 0; r < targets.size(); ++r) {
        targets[r].copy_(gathered.narrow(0, static_cast<int64_t>(r) * block, block)
                             .view(targets[r].sizes()));
      }
    });
  }
  return ListsOut("allgather", c10d::OpType::ALLGATHER, outputs, inputs, true,
                  [opts](c10d::Backend& transport, auto& host_outputs, auto& host_inputs) {
                    return transport.allgather(host_outputs, host_inputs, opts);
                  });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  auto launch = Begin("allgather_into_tensor", {input, output});
  launch.caller_waits = !opts.asyncOp;
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "tpu_dist allgather_into_tensor: ",
              "the output must hold world size (", getSize(), ") times the input's ",
              input.numel(), " elements, got ", output.numel());
  if (DeviceTransport* device = input.scalar_type() == output.scalar_type()
                                   ? Device({input, output})
                                   : nullptr) {
    collectives::CollectiveSpec spec;
    spec.kind = collectives::CollectiveKind::kAllGather;
    DeviceTransport::Operand operand = device->Capture(input);
    launch.outputs = {output};
    return SubmitOnDevice(c10d::OpType::_ALLGATHER_BASE, std::move(launch), device, spec,
                          operand, output);
  }
  at::Tensor host_input = launch.staging.Lend(input);
  at::Tensor host_output = launch.staging.Stage(output, false, true);
  launch.outputs = {output};
  return Submit(c10d::OpType::_ALLGATHER_BASE, std::move(launch),
                [=](c10d::Backend& transport) mutable {
    return transport._allgather_base(host_output, host_input, opts);
  });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return ListsOut("allgather_coalesced", c10d::OpType::ALLGATHER_COALESCED, outputs, inputs, true,
                  [opts](c10d::Backend& transport, auto& host_outputs, auto& host_inputs) {
                    return transport.allgather_coalesced(host_outputs, host_inputs, opts);
                  });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return VectorsOut("allgather_into_tensor_coalesced", c10d::OpType::COALESCED, outputs, inputs,
                    true, std::nullopt,
                    [opts](c10d::Backend& transport, auto& host_outputs, auto& host_inputs,
                           const c10d::ReduceOp&) {
                      return transport.allgather_into_tensor_coalesced(host_outputs, host_inputs,
                                                                       opts);
                    });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  // Only the root has outputs.
  return ListsOut("gather", c10d::OpType::GATHER, outputs, inputs, true,
                  [opts](c10d::Backend& transport, auto& host_outputs, auto& host_inputs) {
                    return transport.gather(host_outputs, host_inputs, opts);
                  });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  auto launch = Begin("scatter", Concat(Flatten(inputs), outputs), outputs);
  std::vector<std::vector<at::Tensor>> host_inputs;
  for (const auto& list : inputs) host_inputs.push_back(launch.staging.LendAll(list));
  auto host_outputs = launch.staging.StageAll(outputs, false, true);
  launch.outputs = outputs;
  return Submit(c10d::OpType::SCATTER, std::move(launch), [=](c10d::Backend& transport) mutable {
    return transport.scatter(host_outputs, host_inputs, opts);
  });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const auto flat_inputs = Flatten(inputs);
  if (DeviceTransport* device = OneListOfWorldSize(inputs, outputs, getSize())
                                    ? Device(Concat(flat_inputs, outputs))
                                    : nullptr) {
    auto launch = Begin("reduce_scatter", Concat(flat_inputs, outputs));
    std::vector<at::Tensor> sources = flat_inputs;
    collectives::CollectiveSpec spec;
    spec.kind = collectives::CollectiveKind::kReduceScatter;
    spec.reduce_op = DeviceReduceOp("reduce_scatter", opts.reduceOp, sources, false);
    std::vector<at::Tensor> flattened;
    for (const at::Tensor& source : sources) flattened.push_back(source.reshape({-1}));
    DeviceTransport::Operand operand = device->Capture(at::cat(flattened));
    at::Tensor output = outputs[0];
    launch.outputs = outputs;
    return SubmitOnDevice(c10d::OpType::REDUCE_SCATTER, std::move(launch), device, spec,
                          operand, output);
  }
  auto launch = Begin("reduce_scatter", Concat(flat_inputs, outputs));
  c10d::ReduceScatterOptions host_opts = opts;
  std::vector<at::Tensor> sources = flat_inputs;
  host_opts.reduceOp = PrepareReduce("reduce_scatter", opts.reduceOp, sources, false, launch);
  auto host_flat = launch.staging.StageAll(sources, true, false);
  auto host_outputs = launch.staging.StageAll(outputs, false, true);
  std::vector<std::vector<at::Tensor>> host_inputs;
  size_t next = 0;
  for (const auto& list : inputs) {
    host_inputs.emplace_back(host_flat.begin() + next, host_flat.begin() + next + list.size());
    next += list.size();
  }
  launch.outputs = outputs;
  return Submit(c10d::OpType::REDUCE_SCATTER, std::move(launch),
                [=](c10d::Backend& transport) mutable {
    return transport.reduce_scatter(host_outputs, host_inputs, host_opts);
  });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  auto launch = Begin("reduce_scatter_tensor", {input, output});
  launch.caller_waits = !opts.asyncOp;
  TORCH_CHECK(input.numel() == output.numel() * getSize(), "tpu_dist reduce_scatter_tensor: ",
              "the input must hold world size (", getSize(), ") times the output's ",
              output.numel(), " elements, got ", input.numel());
  if (DeviceTransport* device = input.scalar_type() == output.scalar_type()
                                   ? Device({input, output})
                                   : nullptr) {
    std::vector<at::Tensor> sources = {input};
    collectives::CollectiveSpec spec;
    spec.kind = collectives::CollectiveKind::kReduceScatter;
    spec.reduce_op = DeviceReduceOp("reduce_scatter_tensor", opts.reduceOp, sources, false);
    DeviceTransport::Operand operand = device->Capture(sources[0]);
    launch.outputs = {output};
    return SubmitOnDevice(c10d::OpType::_REDUCE_SCATTER_BASE, std::move(launch), device, spec,
                          operand, output);
  }
  c10d::ReduceScatterOptions host_opts = opts;
  std::vector<at::Tensor> sources = {input};
  host_opts.reduceOp =
      PrepareReduce("reduce_scatter_tensor", opts.reduceOp, sources, false, launch);
  std::vector<at::Tensor> host_input = {launch.staging.Stage(sources[0], true, false)};
  at::Tensor host_output = launch.staging.Stage(output, false, true);
  launch.outputs = {output};
  return Submit(c10d::OpType::_REDUCE_SCATTER_BASE, std::move(launch),
                [=](c10d::Backend& transport) mutable {
                  return transport._reduce_scatter_base(host_output, host_input[0], host_opts);
                });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  c10d::ReduceScatterOptions host_opts = opts;  // a copy: its reduceOp becomes the host's
  return VectorsOut("reduce_scatter_tensor_coalesced", c10d::OpType::COALESCED, outputs, inputs,
                    true, opts.reduceOp,
                    [host_opts](c10d::Backend& transport, auto& host_outputs, auto& host_inputs,
                                const c10d::ReduceOp& reduce_op) mutable {
                      host_opts.reduceOp = reduce_op;
                      return transport.reduce_scatter_tensor_coalesced(host_outputs, host_inputs,
                                                                       host_opts);
                    });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  // Equal splits (none given) on the device: one program, whose shapes every rank shares.
  if (DeviceTransport* device =
          output_split_sizes.empty() && input_split_sizes.empty() &&
                  input.scalar_type() == output.scalar_type() &&
                  input.numel() == output.numel() && input.numel() % getSize() == 0
              ? Device({input, output})
              : nullptr) {
    auto launch = Begin("alltoall_base", {input, output});
    collectives::CollectiveSpec spec;
    spec.kind = collectives::CollectiveKind::kAllToAll;
    DeviceTransport::Operand operand = device->Capture(input);
    launch.outputs = {output};
    return SubmitOnDevice(c10d::OpType::ALLTOALL_BASE, std::move(launch), device, spec,
                          operand, output);
  }
  // Split sizes may differ across ranks, so only the dtype has to agree.
  auto launch = Begin("alltoall_base", {input, output}, std::vector<at::Tensor>{});
  launch.record.signature = c10::toString(input.scalar_type());
  at::Tensor host_input = launch.staging.Lend(input);
  at::Tensor host_output = launch.staging.Stage(output, false, true);
  launch.outputs = {output};
  return Submit(c10d::OpType::ALLTOALL_BASE, std::move(launch),
                [=](c10d::Backend& transport) mutable {
    return transport.alltoall_base(host_output, host_input, output_split_sizes, input_split_sizes,
                                   opts);
  });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllToAllOptions& opts) {
  // Chunks may differ in size across ranks: only the call has to agree.
  return VectorsOut("alltoall", c10d::OpType::ALLTOALL, outputs, inputs, false, std::nullopt,
                    [opts](c10d::Backend& transport, auto& host_outputs, auto& host_inputs,
                           const c10d::ReduceOp&) {
                      return transport.alltoall(host_outputs, host_inputs, opts);
                    });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::PointToPoint(
    const std::string& op, c10d::OpType type, const std::string& peer,
    std::vector<at::Tensor>& tensors, bool sending,
    std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend&, std::vector<at::Tensor>&)>
        call) {
  CheckDevices(op, tensors);
  TpuDistWork::Launch launch;
  launch.record.op = op;
  launch.record.signature = DescribeTensors(tensors);
  launch.collective = false;
  launch.peer = peer;
  auto host =
      sending ? launch.staging.LendAll(tensors) : launch.staging.StageAll(tensors, false, true);
  if (!sending) launch.outputs = tensors;
  return Submit(type, std::move(launch), [=](c10d::Backend& transport) mutable {
    return call(transport, host);
  });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                    int tag) {
  return PointToPoint("send", c10d::OpType::SEND, "to rank " + std::to_string(dst_rank), tensors,
                      true, [=](c10d::Backend& transport, std::vector<at::Tensor>& host) {
                        return transport.send(host, dst_rank, tag);
                      });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                    int tag) {
  return PointToPoint("recv", c10d::OpType::RECV, "from rank " + std::to_string(src_rank),
                      tensors, false, [=](c10d::Backend& transport, std::vector<at::Tensor>& host) {
                        return transport.recv(host, src_rank, tag);
                      });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                             int tag) {
  return PointToPoint("recv", c10d::OpType::RECVANYSOURCE, "from any rank", tensors, false,
                      [=](c10d::Backend& transport, std::vector<at::Tensor>& host) {
                        return transport.recvAnysource(host, tag);
                      });
}

c10::intrusive_ptr<c10d::Work> TpuDistBackend::barrier(const c10d::BarrierOptions& opts) {
  auto launch = Begin("barrier", {});
  launch.caller_waits = !opts.asyncOp;
  return Submit(c10d::OpType::BARRIER, std::move(launch),
                [=](c10d::Backend& transport) mutable { return transport.barrier(opts); });
}

}  // namespace torch_tpu::distributed
