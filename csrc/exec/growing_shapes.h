// One program for an op whose operands grow by a few elements per call: the keys, values and ids
// of a generation loop, which `torch.cat` lengthens by one row per token. Compiling each length
// would compile every attention op once per token.
//
// Ops whose exact-shape programs differ only in their operands' sizes, strides and offsets form a
// family (the signature without those numbers). When three launches of a family lie on one line
// (every number is base + slope * t for one integer t, the first growing size), later launches on
// that line share a program built for a bucket of t (the next power of two): operands are read by
// gathers whose indices come from t, passed at run time, and padded up to the bucket's sizes;
// results are written back densely for the real sizes into storages of the bucket's size, so the
// next call's operands are again bucket-sized and its program is found. Only ops for which padding
// is exact take part when sizes grow: elementwise ops (padded with copies of real elements, so
// device-side checks see only real values), contractions (zeros), softmax (-inf), fused
// attention (zeros, its padded keys masked by its key count) and cat (its result's rows are
// remapped); any op whose sizes stay fixed while offsets and strides move
// (reading the last token of a growing storage) takes part too.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

#include "exec/program_signature.h"
#include "stablehlo/builder.h"

namespace torch_tpu::exec {

// What a padding element of a read operand holds.
enum class GrowingPadding : uint8_t { kEdge, kZero, kNegativeInfinity };

// How an op with growing sizes can be padded, or nullopt when it cannot (only moving offsets and
// strides then share a program). `pointwise`: ATen's pointwise tag.
std::optional<GrowingPadding> PaddingForGrowingSizes(std::string_view op, bool pointwise);

// A line through the view numbers (sizes, strides, offsets in signature order) of a family's
// launches: number i = base[i] + slope[i] * t, where t is number `symbol`; and the sizes of the
// new results along the same line.
struct GrowingModel {
  size_t symbol = 0;
  std::vector<int64_t> base, slope;
  std::vector<std::vector<int64_t>> output_base, output_slope;
  bool sizes_grow = false;  // some operand size has a non-zero slope

  // The sizes of new result `output` when the symbol is `t`.
  std::vector<int64_t> OutputSizes(size_t output, int64_t t) const;
};

struct GrowingFit {
  std::shared_ptr<const GrowingModel> model;
  int64_t t = 0;       // this launch's value of the symbol
  int64_t bucket = 0;  // the value the program is built for: >= t; 0 when no size grows
};

// What sized a bucketed result's storage (runtime::StorageBuffer::sized_by): result `output` of
// `model`'s line at symbol `t`, allocated for `bucket`, `element_bytes` per element.
//
// A generation loop feeds such results back to the next launches on their lines (a cache or a
// mask that `torch.cat` lengthens by a row per step). At the step that crosses into the next
// bucket, those launches would read storages of the old bucket's sizes and write the new
// bucket's, and the step after it reads the new sizes: two programs per crossing, each a whole
// step's under DeferAndFuse. So a full storage (its line's next launch must cross) grows to what
// the next bucket's result takes when an op first reads it (GrowIfFull): the crossing step
// already reads the new bucket's sizes and shares its program with the steps after it. Growing
// keeps every value (the new bytes follow the old ones); a guess that misses costs only the
// program the crossing compiled before. Storages over 64 MiB keep their size (growing_shapes.cc).
//
// An exact launch's results are marked too, with the launch (GrowingFamilies::Record): a launch
// that reads them continues a sequence, which needs one earlier launch, not two, to find its line.
struct GrowingStorageOrigin {
  std::shared_ptr<const GrowingModel> model;  // null for an exact launch's result
  size_t output = 0;
  int64_t t = 0;
  int64_t bucket = 0;
  int64_t element_bytes = 0;
  uint64_t launch = 0;  // the exact launch that made it (ExactLaunchRecord::launch)

  // Marks `result`'s storage as sized by `fit`'s result `output` (a bucketed allocation).
  static void Mark(const at::Tensor& result, const GrowingFit& fit, size_t output);
  // Marks `result`'s storage as made by exact launch `launch`.
  static void MarkExact(const at::Tensor& result, uint64_t launch);
  // The exact launch that made `operand`'s storage, or 0; `bucketed`: a bucketed launch made it.
  static uint64_t LaunchOf(const at::Tensor& operand, bool& bucketed);
  // Grows `operand`'s storage to the next bucket's size when its line filled it, unless a pending
  // graph uses it (that graph reads it at its current size).
  static void GrowIfFull(const at::Tensor& operand);
};

// The bucket a line of bucket `bucket` crosses into: twice its power of two, keeping the offset
// that aligns a graph's buckets (GrowingReference).
int64_t NextBucket(int64_t bucket);

// The symbol and bucket of a defer-and-fuse graph's first op with growing sizes. Ops of one
// graph often have symbols a step apart (a cache's old length, its new length): on their own
// buckets they would cross into the next bucket at neighbouring lengths, and each of those
// lengths would build one more program for the whole graph. An op whose symbol is within
// kAlignedSymbols of the reference's takes the reference's bucket shifted by the difference
// instead (still >= its symbol), so the graph's ops cross together.
struct GrowingReference {
  int64_t t = 0;
  int64_t bucket = 0;
  static constexpr int64_t kAlignedSymbols = 2;
  // `fit`'s bucket aligned with this reference, when its symbol is near enough.
  void Align(GrowingFit& fit) const;
};

// An exact launch as GrowingFamilies::Record took it.
struct ExactLaunchRecord {
  uint64_t launch = 0;  // marks its results (GrowingStorageOrigin::MarkExact)
  bool line_found = false;  // its family's line runs through it and the launch it continues
};

// The families seen by this process, with a few recent exact launches each (thread-safe).
class GrowingFamilies {
 public:
  static GrowingFamilies& Get();
  // A line through `numbers`: one found before, or one through two recent launches of the family.
  std::optional<GrowingFit> Fit(const ProgramSignature& family, const std::vector<int64_t>& numbers,
                                const std::vector<bool>& is_size, bool sizes_may_grow);
  // A launch of the family that was built for its exact shapes, with its new results' sizes and
  // the exact launches whose results it reads (GrowingStorageOrigin::LaunchOf). A launch that
  // continues a sequence needs one earlier launch on its line, not two: when it reads a result
  // of a recent launch of its family (a sequence fed back into itself, as a cache that `cat`
  // lengthens), or `reads_bucketed` a result of a bucketed launch (it reads such a sequence), and
  // it lies on a growing line with that launch (with the family's newest), that line is the
  // family's from now on: `line_found`, and Fit finds this launch on it.
  ExactLaunchRecord Record(const ProgramSignature& family, std::vector<int64_t> numbers,
                  std::vector<std::vector<int64_t>> output_sizes, const std::vector<bool>& is_size,
                  bool sizes_may_grow, const std::vector<uint64_t>& operand_launches,
                  bool reads_bucketed);
  // A bucketed build of the family failed (a lowering that padding does not suit): the family's
  // launches keep their exact programs from now on. Counted once per family in
  // metrics()["growing_shapes_disabled"] as "<op>: <why>" (the build's error), so a generation
  // loop that compiles every step says why.
  void Disable(const ProgramSignature& family, std::string_view op, std::string_view reason);

 private:
  struct Family;
  GrowingFamilies();
  ~GrowingFamilies();
  struct State;
  std::unique_ptr<State> state_;
};

// Emits a bucketed program's reads and result writes; `t` is the program's runtime s64 scalar.
class GrowingEmitter {
 public:
  GrowingEmitter(stablehlo::FunctionBuilder& builder, const GrowingFit& fit, stablehlo::Value t);

  // The next operand view (signature order) of `rank` dims read from `flat` at the bucket's
  // sizes; padding elements per `padding`.
  stablehlo::Value ReadNext(stablehlo::Value flat, int64_t rank, GrowingPadding padding);

  // Result `output` (computed at the bucket's sizes) as the flat buffer of a new tensor of the
  // real sizes laid out densely like `strides` (the bucket-sized result's dense strides), padded
  // to the bucket's element count. With `concatenated_dim` >= 0, the result is a concatenation of
  // the first reads along that dim: its rows are remapped from the padded operands' positions.
  stablehlo::Value FlatOutput(stablehlo::Value result, size_t output,
                              const std::vector<int64_t>& strides, int64_t concatenated_dim,
                              size_t concatenated_reads);

 private:
  // base + slope * t, as an s64 scalar (a constant when the slope is 0).
  stablehlo::Value Affine(int64_t base, int64_t slope);
  stablehlo::Value Splat(stablehlo::Value scalar, const std::vector<int64_t>& dims);

  struct Read {
    size_t first_number;  // of the view's sizes in the model's numbers
    std::vector<int64_t> padded_sizes;
  };
  stablehlo::FunctionBuilder& builder_;
  const GrowingFit& fit_;
  stablehlo::Value t_;
  size_t cursor_ = 0;
  std::vector<Read> reads_;
};

}  // namespace torch_tpu::exec
