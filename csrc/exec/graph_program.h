// A recorded graph (torch.compile's FX graphs after AOTAutograd) run as ONE program.
//
// Nodes are ATen overloads lowered through the shared registry, view ops read through the same
// strided-view lowering as eager reads (exec/view_io.h), dtype conversions, and copies into graph
// inputs (functionalized in-place updates: BatchNorm running stats, optimizer state). The program
// is built with the shared ProgramBuilder over the inputs' storages, cached per input signature
// (views, dtypes, storages) in the shared plan cache (exec/plan_cache.h), and executed
// asynchronously like eager: outputs become new tensors, written inputs get their storage's next
// buffer, donating the old one when nothing else holds it.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/program_signature.h"

namespace torch_tpu::exec {

// A tensor value of the graph: graph input `index`, or result `result` of node `index`.
struct GraphValueRef {
  enum class Kind { kInput, kNode };
  Kind kind = Kind::kInput;
  int index = 0;
  int result = 0;
};

struct GraphArgument {
  enum class Kind {
    kTensor,              // `ref`
    kNumber,              // a Python number where the schema takes a Tensor: `value`
    kScalar,              // a Python number where the schema takes a Scalar: `value`
    kTensorList,          // `refs`
    kOptionalTensorList,  // `refs`, absent entries are None
    kStatic,              // `value`, part of the program
    kGenerator,           // draws from `generator` (or the default generator) on every run
  };
  Kind kind = Kind::kStatic;
  GraphValueRef ref;
  std::vector<std::optional<GraphValueRef>> refs;
  c10::IValue value;
  int generator = -1;  // kGenerator: index into Run's `generators`; -1: the default generator
};

// Geometry of a value as the graph's fake tensors describe it.
struct GraphTensorMeta {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
};

struct GraphNode {
  enum class Kind {
    kLowered,   // `op` through the lowering registry; in-place variants write their first input
    kView,      // a view of arguments[0] with geometry results[0]
    kConvert,   // arguments[0] converted to results[0].dtype
    kCopyInto,  // copy_(arguments[0] (a graph input), arguments[1])
    kZeros,     // zeros shaped and typed like results[0] (empty tensors and factory bases)
  };
  Kind kind = Kind::kLowered;
  std::string op;                        // "aten::add.Tensor", for errors and the signature
  std::vector<GraphArgument> arguments;  // all schema arguments, in order
  std::vector<GraphTensorMeta> results;  // fake-tensor geometry of each tensor result
  // Graph-safe RNG (graphsafe_run_with_rng_state): every draw of this node comes from Run's
  // `generators[generator]`; -1: from the node's generator arguments or the default generator.
  int generator = -1;
};

class GraphProgram {
 public:
  // `inputs` are the placeholders' fake geometries; `outputs` the returned tensor values.
  GraphProgram(std::vector<GraphNode> nodes, std::vector<GraphTensorMeta> inputs,
               std::vector<GraphValueRef> outputs, std::string description);
  ~GraphProgram();

  // Binds tpu tensors (and zero-dim CPU tensors, passed as runtime scalars) to the inputs, runs
  // the program (building and compiling it for a new input signature) and returns the outputs.
  // Random nodes take a fresh (seed, offset) from their generator on every run, in graph order,
  // as the same ops do eagerly: the program never holds RNG state. `generators` are the ones
  // nodes name by index (graph-safe RNG state inputs, explicit generator arguments).
  // Throws c10::NotImplementedError when the graph holds something this path cannot lower; the
  // caller runs the graph eagerly instead.
  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs,
                              const std::vector<at::Generator>& generators = {});

  // Programs built so far (one per input signature; again after the plan cache evicted one).
  size_t program_count() const { return programs_built_.load(); }

  struct Plan;

 private:
  struct Snapshot;
  // Reads the inputs' storages into `snapshot` (cleared first); returns its signature.
  const ProgramSignature& TakeSnapshot(const std::vector<at::Tensor>& inputs,
                                       Snapshot& snapshot) const;
  std::shared_ptr<Plan> BuildPlan(const std::vector<at::Tensor>& inputs,
                                  const Snapshot& snapshot) const;

  std::vector<GraphNode> nodes_;
  std::vector<GraphTensorMeta> inputs_;
  std::vector<GraphValueRef> outputs_;
  std::string description_;
  int64_t id_;  // owns this graph's plans in the shared plan cache (exec/plan_cache.h)
  std::atomic<size_t> programs_built_{0};
};

}  // namespace torch_tpu::exec
