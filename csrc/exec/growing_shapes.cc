#include "exec/growing_shapes.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "exec/program_builder.h"
#include "runtime/metrics.h"
#include "runtime/storage.h"

namespace torch_tpu::exec {

using stablehlo::ElementType;
using stablehlo::TensorType;
using stablehlo::Value;
using Direction = stablehlo::FunctionBuilder::ComparisonDirection;

std::optional<GrowingPadding> PaddingForGrowingSizes(std::string_view op, bool pointwise) {
  // Copies (clone, dtype casts) are elementwise too, without ATen's pointwise tag.
  if (pointwise || op == "aten::cat" || op == "aten::clone" || op == "aten::_to_copy") {
    return GrowingPadding::kEdge;
  }
  // Fused attention masks the keys at or past its key count (a runtime scalar), so zeros
  // padding the keys, values and bias never take part.
  if (op == "aten::bmm" || op == "aten::mm" ||
      op == "aten::_scaled_dot_product_fused_attention_overrideable") {
    return GrowingPadding::kZero;
  }
  if (op == "aten::_softmax" || op == "aten::_safe_softmax" || op == "aten::_log_softmax") {
    return GrowingPadding::kNegativeInfinity;
  }
  return std::nullopt;
}

void GrowingReference::Align(GrowingFit& fit) const {
  const int64_t offset = fit.t - t;
  if (fit.bucket == 0 || offset > kAlignedSymbols || offset < -kAlignedSymbols) return;
  fit.bucket = bucket + offset;
}

namespace {

// Growing copies the storage, and until its reader replaces it (a cache lengthened by cat) both
// copies live: the peak rises by the grown storage's size at each crossing. Larger storages keep
// their size; the crossing then costs one program more instead.
constexpr size_t kMaxGrownBytes = size_t{64} << 20;

}  // namespace

void GrowingStorageOrigin::Mark(const at::Tensor& result, const GrowingFit& fit, size_t output) {
  runtime::StorageBuffer* buffer = runtime::GetStorageBuffer(result);
  if (buffer == nullptr || fit.bucket == 0) return;
  buffer->set_sized_by(std::make_shared<const GrowingStorageOrigin>(GrowingStorageOrigin{
      fit.model, output, fit.t, fit.bucket, static_cast<int64_t>(result.element_size())}));
}

void GrowingStorageOrigin::MarkExact(const at::Tensor& result, uint64_t launch) {
  if (launch == 0) return;
  runtime::StorageBuffer* buffer = runtime::GetStorageBuffer(result);
  if (buffer == nullptr) return;
  GrowingStorageOrigin origin;
  origin.launch = launch;
  buffer->set_sized_by(std::make_shared<const GrowingStorageOrigin>(std::move(origin)));
}

namespace {

// The origin marked on `tensor`'s storage and that storage's buffer; null when unmarked (or not
// a tpu tensor).
std::shared_ptr<const GrowingStorageOrigin> OriginOf(const at::Tensor& tensor,
                                                     runtime::StorageBuffer*& buffer) {
  if (!tensor.defined() || !tensor.is_privateuseone()) return nullptr;
  buffer = runtime::GetStorageBuffer(tensor);
  if (buffer == nullptr || !buffer->has_sized_by()) return nullptr;
  return std::static_pointer_cast<const GrowingStorageOrigin>(buffer->sized_by());
}

}  // namespace

uint64_t GrowingStorageOrigin::LaunchOf(const at::Tensor& operand, bool& bucketed) {
  runtime::StorageBuffer* buffer = nullptr;
  const auto origin = OriginOf(operand, buffer);
  if (origin == nullptr) return 0;
  bucketed |= origin->model != nullptr;
  return origin->launch;
}

void GrowingStorageOrigin::GrowIfFull(const at::Tensor& operand) {
  runtime::StorageBuffer* buffer = nullptr;
  const auto origin = OriginOf(operand, buffer);
  if (origin == nullptr || origin->model == nullptr || origin->t < origin->bucket) return;
  if (buffer->deferred() != runtime::StorageBuffer::Deferred::kNone) return;
  GrowingStorageOrigin grown = *origin;
  grown.bucket = NextBucket(origin->bucket);
  int64_t elements = 1;
  for (int64_t size : grown.model->OutputSizes(grown.output, grown.bucket)) elements *= size;
  const auto nbytes = static_cast<size_t>(elements * grown.element_bytes);
  if (nbytes > kMaxGrownBytes) return;
  if (nbytes > buffer->nbytes()) runtime::GrowStorage(operand.storage(), nbytes);
  buffer->set_sized_by(std::make_shared<const GrowingStorageOrigin>(std::move(grown)));
}

int64_t NextBucket(int64_t bucket) {
  int64_t below = 1;
  while (below * 2 <= bucket) below *= 2;
  const int64_t power = bucket - below <= below * 2 - bucket ? below : below * 2;
  return 2 * power + (bucket - power);
}

std::vector<int64_t> GrowingModel::OutputSizes(size_t output, int64_t t) const {
  std::vector<int64_t> sizes(output_base[output].size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    sizes[d] = output_base[output][d] + output_slope[output][d] * t;
  }
  return sizes;
}

namespace {

constexpr size_t kRecentLaunches = 6;
constexpr size_t kModelsPerFamily = 4;
constexpr size_t kMaxFamilies = 4096;

struct Launch {
  std::vector<int64_t> numbers;
  std::vector<std::vector<int64_t>> output_sizes;
  uint64_t id = 0;
};

std::atomic<uint64_t> next_launch_id{1};

// Slope and base of y through (ta, a) and (tb, b), when they are integers.
bool IntegerLine(int64_t ta, int64_t a, int64_t tb, int64_t b, int64_t& base, int64_t& slope) {
  const int64_t rise = b - a, run = tb - ta;
  if (rise % run != 0) return false;
  slope = rise / run;
  base = a - slope * ta;
  return true;
}

// The line through launches `a` and `b`, or null when they do not define one (no differing
// number, non-integer slopes, shrinking sizes, results of other ranks).
std::shared_ptr<GrowingModel> LineThrough(const Launch& a, const Launch& b,
                                          const std::vector<bool>& is_size, bool sizes_may_grow) {
  if (a.numbers.size() != b.numbers.size() || a.output_sizes.size() != b.output_sizes.size()) {
    return nullptr;
  }
  // The symbol is the first size that differs; with no differing size, the first number.
  std::optional<size_t> symbol;
  for (size_t i = 0; i < a.numbers.size() && !symbol; ++i) {
    if (is_size[i] && a.numbers[i] != b.numbers[i]) symbol = i;
  }
  for (size_t i = 0; i < a.numbers.size() && !symbol; ++i) {
    if (a.numbers[i] != b.numbers[i]) symbol = i;
  }
  if (!symbol) return nullptr;
  auto model = std::make_shared<GrowingModel>();
  model->symbol = *symbol;
  const int64_t ta = a.numbers[*symbol], tb = b.numbers[*symbol];
  const size_t count = a.numbers.size();
  model->base.resize(count);
  model->slope.resize(count);
  for (size_t i = 0; i < count; ++i) {
    if (!IntegerLine(ta, a.numbers[i], tb, b.numbers[i], model->base[i], model->slope[i])) {
      return nullptr;
    }
    if (is_size[i] && model->slope[i] != 0) {
      if (model->slope[i] < 0 || !sizes_may_grow) return nullptr;
      model->sizes_grow = true;
    }
  }
  for (size_t o = 0; o < a.output_sizes.size(); ++o) {
    const auto& sa = a.output_sizes[o];
    const auto& sb = b.output_sizes[o];
    if (sa.size() != sb.size()) return nullptr;
    std::vector<int64_t> base(sa.size()), slope(sa.size());
    for (size_t d = 0; d < sa.size(); ++d) {
      if (!IntegerLine(ta, sa[d], tb, sb[d], base[d], slope[d]) || slope[d] < 0) return nullptr;
    }
    model->output_base.push_back(std::move(base));
    model->output_slope.push_back(std::move(slope));
  }
  return model;
}

// The launch's symbol value when `numbers` lie on the model's line and every growing size is at
// least 1 there (a program cannot pad an empty operand with copies of its elements).
std::optional<int64_t> OnLine(const GrowingModel& model, const std::vector<int64_t>& numbers,
                              const std::vector<bool>& is_size) {
  if (numbers.size() != model.base.size()) return std::nullopt;
  const int64_t t = numbers[model.symbol];
  for (size_t i = 0; i < numbers.size(); ++i) {
    if (numbers[i] != model.base[i] + model.slope[i] * t) return std::nullopt;
    if (is_size[i] && model.slope[i] != 0 && numbers[i] < 1) return std::nullopt;
  }
  for (size_t o = 0; o < model.output_base.size(); ++o) {
    for (int64_t size : model.OutputSizes(o, t)) {
      if (size < 0) return std::nullopt;
    }
  }
  return t;
}

// Small results start at bucket 64: below that, padding them costs next to nothing, and each
// bucket crossing costs a program per growing op, or a whole step's program for a fused graph
// (a generation loop's first tokens would cross at 8, 16 and 32; starting at 64 took a cold HF
// GPT-2/Llama generate of 40 tokens from 3.0-3.4 to 2.2-2.4 s strict and 3.4-4.3 to 2.3-2.8 s
// defer-and-fuse). Large results take the next power of two, so their storages stay under twice
// the real size.
constexpr int64_t kSmallestBucket = 64;
constexpr int64_t kSmallResultElements = int64_t{1} << 16;

int64_t Bucket(const GrowingModel& model, int64_t t) {
  int64_t bucket = 1;
  while (bucket < t) bucket *= 2;
  if (bucket >= kSmallestBucket) return bucket;
  for (size_t output = 0; output < model.output_base.size(); ++output) {
    int64_t elements = 1;
    for (int64_t size : model.OutputSizes(output, kSmallestBucket)) elements *= size;
    if (elements > kSmallResultElements) return bucket;
  }
  return kSmallestBucket;
}

}  // namespace

struct GrowingFamilies::Family {
  std::deque<Launch> recent;
  std::deque<std::shared_ptr<const GrowingModel>> models;
  bool disabled = false;
};

struct GrowingFamilies::State {
  std::mutex mutex;
  std::unordered_map<ProgramSignature, Family, ProgramSignatureHash> families;
};

GrowingFamilies::GrowingFamilies() : state_(std::make_unique<State>()) {}
GrowingFamilies::~GrowingFamilies() = default;

GrowingFamilies& GrowingFamilies::Get() {
  static GrowingFamilies* families = new GrowingFamilies();  // used until the process exits
  return *families;
}

std::optional<GrowingFit> GrowingFamilies::Fit(const ProgramSignature& family,
                                               const std::vector<int64_t>& numbers,
                                               const std::vector<bool>& is_size,
                                               bool sizes_may_grow) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->families.find(family);
  if (it == state_->families.end() || it->second.disabled) return std::nullopt;
  Family& entry = it->second;
  auto fit = [&](std::shared_ptr<const GrowingModel> model) -> std::optional<GrowingFit> {
    const std::optional<int64_t> t = OnLine(*model, numbers, is_size);
    if (!t) return std::nullopt;
    const int64_t bucket = model->sizes_grow ? Bucket(*model, *t) : 0;
    return GrowingFit{std::move(model), *t, bucket};
  };
  for (const auto& model : entry.models) {
    if (auto found = fit(model)) return found;
  }
  // A new line needs two earlier launches on it that, with this one, step the symbol up by one
  // amount with no launch in between: a sequence that grows, as a generation loop's does. Sizes that merely happen to lie
  // on a line (a test's samples, a last smaller batch) keep their exact programs and storages.
  for (size_t a = entry.recent.size(); a-- > 0;) {
    for (size_t b = a; b-- > 0;) {
      std::shared_ptr<GrowingModel> model =
          LineThrough(entry.recent[b], entry.recent[a], is_size, sizes_may_grow);
      if (!model) continue;
      const int64_t t = numbers[model->symbol];
      const int64_t ta = entry.recent[a].numbers[model->symbol];
      const int64_t tb = entry.recent[b].numbers[model->symbol];
      if (ta <= tb || t - ta != ta - tb) continue;
      const bool adjacent = std::none_of(
          entry.recent.begin(), entry.recent.end(), [&](const Launch& launch) {
            if (launch.numbers.size() <= model->symbol) return false;
            const int64_t between = launch.numbers[model->symbol];
            return tb < between && between < ta;
          });
      if (!adjacent) continue;
      if (auto found = fit(model)) {
        entry.models.push_front(std::move(model));
        if (entry.models.size() > kModelsPerFamily) entry.models.pop_back();
        return found;
      }
    }
  }
  return std::nullopt;
}

ExactLaunchRecord GrowingFamilies::Record(
    const ProgramSignature& family, std::vector<int64_t> numbers,
    std::vector<std::vector<int64_t>> output_sizes, const std::vector<bool>& is_size,
    bool sizes_may_grow, const std::vector<uint64_t>& operand_launches, bool reads_bucketed) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->families.size() >= kMaxFamilies && !state_->families.count(family)) {
    state_->families.clear();  // a bound on memory; families seen again start over
  }
  Family& entry = state_->families[family];
  Launch launch{std::move(numbers), std::move(output_sizes), next_launch_id.fetch_add(1)};
  ExactLaunchRecord recorded{launch.id, false};
  // The newest recent launch whose result this one reads (one sequence among several of the
  // family, as the keys' and values' caches of every layer are); else, for a reader of a
  // bucketed sequence, the family's newest.
  auto earlier = std::find_if(entry.recent.rbegin(), entry.recent.rend(), [&](const Launch& l) {
    return std::find(operand_launches.begin(), operand_launches.end(), l.id) !=
           operand_launches.end();
  });
  if (earlier == entry.recent.rend() && reads_bucketed) earlier = entry.recent.rbegin();
  if (!entry.disabled && earlier != entry.recent.rend()) {
    std::shared_ptr<GrowingModel> model = LineThrough(*earlier, launch, is_size, sizes_may_grow);
    if (model && model->sizes_grow &&
        launch.numbers[model->symbol] > earlier->numbers[model->symbol]) {
      entry.models.push_front(std::move(model));
      if (entry.models.size() > kModelsPerFamily) entry.models.pop_back();
      recorded.line_found = true;
    }
  }
  entry.recent.push_back(std::move(launch));
  if (entry.recent.size() > kRecentLaunches) entry.recent.pop_front();
  return recorded;
}

void GrowingFamilies::Disable(const ProgramSignature& family, std::string_view op,
                              std::string_view reason) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    bool& disabled = state_->families[family].disabled;
    if (disabled) return;
    disabled = true;
  }
  std::string counted(op);
  counted += ": ";
  counted += reason.substr(0, reason.find('\n'));
  runtime::Metrics::Get().RecordReason("growing_shapes_disabled", counted);
}

GrowingEmitter::GrowingEmitter(stablehlo::FunctionBuilder& builder, const GrowingFit& fit, Value t)
    : builder_(builder), fit_(fit), t_(t) {}

Value GrowingEmitter::Affine(int64_t base, int64_t slope) {
  Value constant = builder_.ConstantInt(ElementType::kS64, base);
  if (slope == 0) return constant;
  return builder_.Add(constant,
                      builder_.Multiply(builder_.ConstantInt(ElementType::kS64, slope), t_));
}

Value GrowingEmitter::Splat(Value scalar, const std::vector<int64_t>& dims) {
  return builder_.BroadcastInDim(scalar, dims, {});
}

Value GrowingEmitter::ReadNext(Value flat, int64_t rank, GrowingPadding padding) {
  const GrowingModel& model = *fit_.model;
  const size_t first = cursor_;
  if (first + 2 * rank + 1 > model.base.size()) {
    throw std::logic_error("growing read past the signature's views");
  }
  cursor_ += 2 * rank + 1;
  auto bucketed = [&](size_t i) { return model.base[i] + model.slope[i] * fit_.bucket; };
  std::vector<int64_t> sizes(rank);
  int64_t elements = 1;
  for (int64_t d = 0; d < rank; ++d) {
    sizes[d] = model.slope[first + d] == 0 ? model.base[first + d] : bucketed(first + d);
    elements *= sizes[d];
  }
  reads_.push_back({first, sizes});
  const ElementType type = flat.element_type();
  if (elements == 0) return builder_.Constant(type, 0.0, sizes);
  const size_t offset = first + 2 * rank;
  Value index = Splat(Affine(model.base[offset], model.slope[offset]), sizes);
  Value in_range;
  for (int64_t d = 0; d < rank; ++d) {
    Value position = builder_.Iota(TensorType{ElementType::kS64, sizes}, d);
    const size_t size = first + d, stride = first + rank + d;
    if (model.slope[size] != 0) {
      Value real = Splat(Affine(model.base[size], model.slope[size]), sizes);
      if (padding == GrowingPadding::kEdge) {
        position = builder_.Minimum(
            position, builder_.Subtract(real, builder_.ConstantInt(ElementType::kS64, 1, sizes)));
      } else {
        Value inside = builder_.Compare(position, real, Direction::kLt);
        in_range = in_range.valid() ? builder_.And(in_range, inside) : inside;
      }
    }
    index = builder_.Add(
        index,
        builder_.Multiply(position, Splat(Affine(model.base[stride], model.slope[stride]), sizes)));
  }
  Value values = builder_.Gather1D(flat, index);
  if (!in_range.valid()) return values;
  if (!stablehlo::IsFloat(type)) throw std::logic_error("padding a non-float operand");
  const double fill = padding == GrowingPadding::kZero ? 0.0
                                                       : -std::numeric_limits<double>::infinity();
  return builder_.Select(in_range, values, builder_.Constant(type, fill, sizes));
}

Value GrowingEmitter::FlatOutput(Value result, size_t output, const std::vector<int64_t>& strides,
                                 int64_t concatenated_dim, size_t concatenated_reads) {
  const GrowingModel& model = *fit_.model;
  const std::vector<int64_t>& padded = result.dims();
  const auto rank = static_cast<int64_t>(padded.size());
  int64_t elements = 1;
  for (int64_t size : padded) elements *= size;
  const std::vector<int64_t> expected = model.OutputSizes(output, fit_.bucket);
  if (padded != expected) throw std::logic_error("bucketed result of unexpected size");
  Value flat_result = builder_.Reshape(result, {elements});
  if (rank == 0 || elements == 0) return flat_result;
  const std::vector<int64_t> flat_dims = {elements};
  // Real sizes and their dense strides (in the layout's outer-to-inner order), at run time.
  std::vector<Value> real(rank), real_stride(rank);
  for (int64_t d = 0; d < rank; ++d) {
    real[d] = Affine(model.output_base[output][d], model.output_slope[output][d]);
  }
  const std::vector<int64_t> order = OuterToInnerOrder(strides);
  Value running = builder_.ConstantInt(ElementType::kS64, 1);
  Value one = builder_.ConstantInt(ElementType::kS64, 1);
  for (int64_t j = rank - 1; j >= 0; --j) {
    real_stride[order[j]] = running;
    running = builder_.Multiply(running, builder_.Maximum(real[order[j]], one));
  }
  Value position = builder_.Iota(TensorType{ElementType::kS64, flat_dims}, 0);
  Value source = builder_.ConstantInt(ElementType::kS64, 0, flat_dims);
  int64_t padded_stride = elements;
  for (int64_t d = 0; d < rank; ++d) {
    padded_stride /= padded[d];
    Value coordinate = builder_.Remainder(
        builder_.Divide(position, Splat(real_stride[d], flat_dims)),
        Splat(builder_.Maximum(real[d], one), flat_dims));
    if (d == concatenated_dim) {
      // Row j of the real result is row j - o_k of operand k, where o_k sums the real sizes of
      // the operands before it; in the padded result that row sits at P_k + j - o_k.
      Value remapped;
      Value real_start = builder_.ConstantInt(ElementType::kS64, 0);
      int64_t padded_start = 0;
      std::vector<std::pair<Value, int64_t>> starts;
      for (size_t k = 0; k < concatenated_reads; ++k) {
        starts.emplace_back(real_start, padded_start);
        const Read& read = reads_[k];
        const size_t size = read.first_number + d;
        real_start = builder_.Add(real_start, Affine(model.base[size], model.slope[size]));
        padded_start += read.padded_sizes[d];
      }
      for (size_t k = concatenated_reads; k-- > 0;) {
        const auto& [start, start_padded] = starts[k];
        Value row = builder_.Add(
            builder_.Subtract(coordinate, Splat(start, flat_dims)),
            builder_.ConstantInt(ElementType::kS64, start_padded, flat_dims));
        remapped = k + 1 == concatenated_reads
                       ? row
                       : builder_.Select(builder_.Compare(coordinate,
                                                          Splat(starts[k + 1].first, flat_dims),
                                                          Direction::kLt),
                                         row, remapped);
      }
      coordinate = remapped;
    }
    coordinate = builder_.Minimum(coordinate,
                                  builder_.ConstantInt(ElementType::kS64, padded[d] - 1, flat_dims));
    source = builder_.Add(
        source,
        builder_.Multiply(coordinate, builder_.ConstantInt(ElementType::kS64, padded_stride, flat_dims)));
  }
  return builder_.Gather1D(flat_result, source);
}

}  // namespace torch_tpu::exec
