#include "cache/cache_entry.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace torch_tpu::cache {
namespace {

constexpr char kMagic[8] = {'T', 'P', 'U', 'X', 'C', 'A', 'C', 'H'};
// magic, format version, reserved, key length, payload length, checksum.
constexpr size_t kHeaderSize = 8 + 4 + 4 + 8 + 8 + 8;
constexpr size_t kChecksumOffset = kHeaderSize - 8;

std::string Hex64(uint64_t value) {
  std::ostringstream out;
  out.width(16);
  out.fill('0');
  out << std::hex << value;
  return out.str();
}

// Fixed little-endian encoding so an entry reads the same on every host that shares a store.
void PutLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetLittleEndian(std::string_view in, size_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[offset + i])) << (8 * i);
  }
  return value;
}

uint64_t EntryChecksum(std::string_view header_before_checksum, std::string_view key,
                       std::string_view payload) {
  uint64_t hash = Fnv1a64(header_before_checksum);
  hash = Fnv1a64(key, hash);
  return Fnv1a64(payload, hash);
}

std::string KeyPrefix() {
  return "torch_tpu executable cache key v" + std::to_string(kEntryFormatVersion) + "\n";
}

}  // namespace

uint64_t Fnv1a64(std::string_view bytes, uint64_t seed) {
  uint64_t hash = seed;
  for (unsigned char byte : bytes) {
    hash ^= byte;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

CacheKey MakeCacheKey(const std::string& identity, const std::string& module_text,
                      uint64_t structural_hash) {
  CacheKey key;
  key.material = KeyPrefix() + identity + "module_structural_hash=" + Hex64(structural_hash) +
                 "\nmodule:\n" + module_text;
  // Two independent 64-bit hashes: one of the program alone, one of everything.
  key.digest = Hex64(structural_hash ^ Fnv1a64(identity)) + Hex64(Fnv1a64(key.material));
  return key;
}

std::optional<CacheKey> KeyStoredIn(std::string_view entry, const std::string& identity,
                                    std::string& module_text) {
  if (entry.size() < kHeaderSize || std::memcmp(entry.data(), kMagic, sizeof(kMagic)) != 0) {
    return std::nullopt;
  }
  const uint64_t key_length = GetLittleEndian(entry, 16, 8);
  if (key_length > entry.size() - kHeaderSize) return std::nullopt;
  std::string_view material = entry.substr(kHeaderSize, key_length);
  const std::string prefix = KeyPrefix() + identity + "module_structural_hash=";
  if (material.substr(0, prefix.size()) != prefix) return std::nullopt;
  material.remove_prefix(prefix.size());
  constexpr std::string_view kModuleMarker = "\nmodule:\n";
  if (material.size() < 16 + kModuleMarker.size() ||
      material.substr(16, kModuleMarker.size()) != kModuleMarker) {
    return std::nullopt;
  }
  const std::string hash_digits(material.substr(0, 16));
  char* end = nullptr;
  const uint64_t structural_hash = std::strtoull(hash_digits.c_str(), &end, 16);
  if (end != hash_digits.c_str() + 16) return std::nullopt;
  module_text.assign(material.substr(16 + kModuleMarker.size()));
  return MakeCacheKey(identity, module_text, structural_hash);
}

CacheKey MakeManifestKey(const std::string& name) {
  CacheKey key;
  key.material = "torch_tpu preload manifest v" + std::to_string(kEntryFormatVersion) + "\n" + name;
  key.digest = Hex64(Fnv1a64(key.material, 0x84222325cbf29ce4ULL)) + Hex64(Fnv1a64(key.material));
  return key;
}

std::string EncodeEntry(const CacheKey& key, std::string_view payload) {
  std::string entry;
  entry.reserve(kHeaderSize + key.material.size() + payload.size());
  entry.append(kMagic, sizeof(kMagic));
  PutLittleEndian(entry, kEntryFormatVersion, 4);
  PutLittleEndian(entry, 0, 4);
  PutLittleEndian(entry, key.material.size(), 8);
  PutLittleEndian(entry, payload.size(), 8);
  PutLittleEndian(entry, EntryChecksum(entry, key.material, payload), 8);
  entry += key.material;
  entry.append(payload);
  return entry;
}

DecodedEntry DecodeEntry(std::string_view bytes, const CacheKey& key) {
  DecodedEntry result;
  if (bytes.size() < kHeaderSize) {
    result.status = bytes.size() >= sizeof(kMagic) && std::memcmp(bytes.data(), kMagic, 8) != 0
                        ? EntryStatus::kForeign
                        : EntryStatus::kTruncated;
    result.problem = "entry of " + std::to_string(bytes.size()) + " bytes is shorter than a header";
    return result;
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    result.status = EntryStatus::kForeign;
    result.problem = "not a torch_tpu cache entry (bad magic)";
    return result;
  }
  const uint64_t version = GetLittleEndian(bytes, 8, 4);
  if (version != kEntryFormatVersion) {
    result.status = EntryStatus::kForeign;
    result.problem = "entry format version " + std::to_string(version) + ", this build reads " +
                     std::to_string(kEntryFormatVersion);
    return result;
  }
  const uint64_t key_length = GetLittleEndian(bytes, 16, 8);
  const uint64_t payload_length = GetLittleEndian(bytes, 24, 8);
  const uint64_t available = bytes.size() - kHeaderSize;
  if (key_length > available || payload_length > available - key_length) {
    result.status = EntryStatus::kTruncated;
    result.problem = "entry holds " + std::to_string(bytes.size()) +
                     " bytes, its header announces " +
                     std::to_string(kHeaderSize + key_length + payload_length);
    return result;
  }
  if (key_length + payload_length != available) {
    result.status = EntryStatus::kCorrupt;
    result.problem = "entry has trailing bytes after its payload";
    return result;
  }
  const std::string_view stored_key = bytes.substr(kHeaderSize, key_length);
  const std::string_view payload = bytes.substr(kHeaderSize + key_length, payload_length);
  if (EntryChecksum(bytes.substr(0, kChecksumOffset), stored_key, payload) !=
      GetLittleEndian(bytes, kChecksumOffset, 8)) {
    result.status = EntryStatus::kCorrupt;
    result.problem = "checksum mismatch";
    return result;
  }
  if (stored_key != key.material) {
    result.status = EntryStatus::kKeyMismatch;
    result.problem = "entry was stored for a different program or runtime";
    return result;
  }
  result.status = EntryStatus::kValid;
  result.payload.assign(payload);
  return result;
}

}  // namespace torch_tpu::cache
