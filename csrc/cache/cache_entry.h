// Cache keys and the on-disk/on-wire form of a cached executable, shared by tiers 2 and 3.
//
// An entry is a fixed header (magic, format version, flags, lengths, checksum) followed by the full
// key and the serialized executable, and, when the writer held the cache's shared secret, an
// HMAC-SHA256 tag over all of that. A reader checks all of it: an entry written by another format
// version, cut short by a crashed writer, damaged in storage or stored under a colliding name is
// rejected, never loaded; a reader that holds the secret also rejects entries that are unsigned or
// signed with another key (the checksum only catches accidents, the tag catches whoever can write
// the store).
//
// Nothing in an entry is a secret or a value of the user's: keys hold digests of the environment
// variables and of the run names they depend on, never the values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace torch_tpu::cache {

// Everything that changes the executable. `material` is compared in full on every hit; `digest`
// only names the entry in a store.
struct CacheKey {
  std::string material;
  std::string digest;  // 32 hex digits
};

// `identity`: the runtime's part of the key (plugin, platform, PJRT API, devices, compile
// options); `module_text` and `structural_hash`: the program's.
CacheKey MakeCacheKey(const std::string& identity, const std::string& module_text,
                      uint64_t structural_hash);

// The key an entry would have in this runtime (`identity`), read back from the key stored in it,
// with its module text in `module_text`; nullopt when the entry is not one of this runtime's
// executables. DecodeEntry with the returned key still checks the whole entry.
std::optional<CacheKey> KeyStoredIn(std::string_view entry, const std::string& identity,
                                    std::string& module_text);

// The key of the warm-start manifest of the run `name` (cache/preload.h). The entry stores only a
// digest of the name, which holds the command line and environment.
CacheKey MakeManifestKey(const std::string& name);

uint64_t Fnv1a64(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ULL);
// SHA-256 of `bytes` as 64 hex digits.
std::string Sha256Hex(std::string_view bytes);

inline constexpr uint32_t kEntryFormatVersion = 2;
inline constexpr size_t kEntryTagSize = 32;  // HMAC-SHA256

// The cache's shared secret (TORCH_TPU_CACHE_KEY / TORCH_TPU_CACHE_KEY_FILE), or none. With a
// secret, entries are written signed and only entries signed with it are read.
class EntrySigner {
 public:
  EntrySigner() = default;
  explicit EntrySigner(std::string secret) : secret_(std::move(secret)) {}
  bool enabled() const { return !secret_.empty(); }
  // HMAC-SHA256 of `bytes` under the secret.
  std::string Tag(std::string_view bytes) const;

 private:
  std::string secret_;
};

std::string EncodeEntry(const CacheKey& key, std::string_view payload,
                        const EntrySigner& signer = EntrySigner());

// kUnsigned and kBadSignature only when the reader holds a secret.
enum class EntryStatus { kValid, kTruncated, kForeign, kCorrupt, kKeyMismatch, kUnsigned,
                         kBadSignature };

struct DecodedEntry {
  EntryStatus status = EntryStatus::kCorrupt;
  std::string payload;  // set when valid
  std::string problem;  // why not, for the log
};

DecodedEntry DecodeEntry(std::string_view bytes, const CacheKey& key,
                         const EntrySigner& signer = EntrySigner());

}  // namespace torch_tpu::cache
