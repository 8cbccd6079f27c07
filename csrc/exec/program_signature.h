// The identity of a cached program: a typed record of everything the program depends on (ops,
// operand views, dtypes, static arguments, the default dtype...), kept as 64-bit words.
//
// Every field is written behind a tag and every variable-length field behind its length, so two
// different records can never produce the same words. A lookup hashes the words and then compares
// them in full: a hash collision can cost a compile, never run the wrong program.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

namespace torch_tpu::exec {

enum class SignatureTag : int64_t {
  kOp = 1,
  kTensor,
  kHostScalarTensor,
  kScalar,
  kTensorList,
  kOptionalTensorList,
  kAbsent,
  kStatic,
  kRngStates,
  kDestination,
  kStorage,
  kDefaultDtype,
  kChecks,
  kDeferred,
  kGrowing,
  kMatmulPrecision,
};

class ProgramSignature {
 public:
  void Clear() {
    words_.clear();
    hash_ = kSeed;
  }
  // While set, views' sizes, strides and offsets go to `numbers` (and whether each is a size to
  // `is_size`) instead of the words: the signature then names a family of programs that differ
  // only in those (exec/growing_shapes.h).
  void CollectViewNumbers(std::vector<int64_t>* numbers, std::vector<bool>* is_size) {
    view_numbers_ = numbers;
    view_number_is_size_ = is_size;
  }
  void Add(int64_t word) {
    words_.push_back(word);
    hash_ = (hash_ ^ static_cast<uint64_t>(word)) * 0x100000001b3ULL;
    hash_ ^= hash_ >> 29;
  }
  void AddTag(SignatureTag tag) { Add(static_cast<int64_t>(tag)); }
  void AddString(std::string_view text);
  // dtype, rank, sizes, strides, storage offset.
  void AddView(const at::Tensor& tensor);
  // A view given by its parts (an operand read other than as it is laid out: flattened).
  // The conjugate and negative bits of a view (part of AddView(tensor)).
  void AddViewBits(const at::Tensor& tensor);
  void AddView(c10::ScalarType dtype, c10::IntArrayRef sizes, c10::IntArrayRef strides,
               int64_t storage_offset);
  // Another signature as one length-prefixed field (a deferred graph's ops).
  void AddSignature(const ProgramSignature& other) {
    Add(static_cast<int64_t>(other.words_.size()));
    for (int64_t word : other.words_) Add(word);
  }
  // A static argument: its kind, then its value exactly (doubles by bit pattern).
  void AddStatic(const c10::IValue& value);

  uint64_t hash() const { return hash_; }
  size_t size() const { return words_.size(); }
  // Whether this signature's words are `whole`'s words from `offset` on, `size()` of them (an
  // op's signature inside a deferred graph's, exec/deferred_replay.cc).
  bool EqualsRange(const ProgramSignature& whole, size_t offset) const {
    return offset + words_.size() <= whole.words_.size() &&
           std::equal(words_.begin(), words_.end(), whole.words_.begin() + offset);
  }
  // Whether the first `words` words of this signature and of `other` are equal.
  bool SamePrefix(const ProgramSignature& other, size_t words) const {
    return words <= words_.size() && words <= other.words_.size() &&
           std::equal(words_.begin(), words_.begin() + words, other.words_.begin());
  }
  // Becomes the first `words` words of `other` (hash included).
  void AssignPrefix(const ProgramSignature& other, size_t words) { AssignRange(other, 0, words); }
  // Becomes `words` words of `other` from `offset` on.
  void AssignRange(const ProgramSignature& other, size_t offset, size_t words) {
    Clear();
    words_.reserve(words);
    for (size_t i = offset; i < offset + words; ++i) Add(other.words_[i]);
  }
  bool operator==(const ProgramSignature& other) const {
    return hash_ == other.hash_ && words_ == other.words_;
  }

 private:
  static constexpr uint64_t kSeed = 0xcbf29ce484222325ULL;
  std::vector<int64_t> words_;
  uint64_t hash_ = kSeed;
  std::vector<int64_t>* view_numbers_ = nullptr;
  std::vector<bool>* view_number_is_size_ = nullptr;
};

struct ProgramSignatureHash {
  size_t operator()(const ProgramSignature& signature) const { return signature.hash(); }
};

}  // namespace torch_tpu::exec
