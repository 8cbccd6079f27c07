// Cache keys and the on-disk/on-wire form of a cached executable, shared by tiers 2 and 3.
//
// An entry is a fixed header (magic, format version, lengths, checksum) followed by the full key
// and the serialized executable. A reader checks all of it: an entry written by another format
// version, cut short by a crashed writer, damaged in storage or stored under a colliding name is
// rejected, never loaded.
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

// The key of the warm-start manifest `name` (cache/preload.h).
CacheKey MakeManifestKey(const std::string& name);

uint64_t Fnv1a64(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ULL);

inline constexpr uint32_t kEntryFormatVersion = 1;

std::string EncodeEntry(const CacheKey& key, std::string_view payload);

enum class EntryStatus { kValid, kTruncated, kForeign, kCorrupt, kKeyMismatch };

struct DecodedEntry {
  EntryStatus status = EntryStatus::kCorrupt;
  std::string payload;  // set when valid
  std::string problem;  // why not, for the log
};

DecodedEntry DecodeEntry(std::string_view bytes, const CacheKey& key);

}  // namespace torch_tpu::cache
