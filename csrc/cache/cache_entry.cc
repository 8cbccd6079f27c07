#include "cache/cache_entry.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace torch_tpu::cache {
namespace {

constexpr char kMagic[8] = {'T', 'P', 'U', 'X', 'C', 'A', 'C', 'H'};
// magic, format version, flags, key length, payload length, checksum.
constexpr size_t kHeaderSize = 8 + 4 + 4 + 8 + 8 + 8;
constexpr size_t kChecksumOffset = kHeaderSize - 8;
constexpr uint32_t kSignedFlag = 1;  // an HMAC-SHA256 tag follows the payload

std::string ToHex(const unsigned char* bytes, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * size);
  for (size_t i = 0; i < size; ++i) {
    hex.push_back(kDigits[bytes[i] >> 4]);
    hex.push_back(kDigits[bytes[i] & 15]);
  }
  return hex;
}

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

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("torch_tpu compilation cache: SHA-256 failed (OpenSSL)");
  }
  return ToHex(digest, size);
}

std::string EntrySigner::Tag(std::string_view bytes) const {
  unsigned char tag[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
           reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), tag,
           &size) == nullptr ||
      size != kEntryTagSize) {
    throw std::runtime_error("torch_tpu compilation cache: HMAC-SHA256 failed (OpenSSL)");
  }
  return std::string(reinterpret_cast<const char*>(tag), size);
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
  // A run's name holds its command line and environment, which may hold secrets: the stored key
  // is a digest of it.
  key.material = "torch_tpu preload manifest v" + std::to_string(kEntryFormatVersion) +
                 "\nrun_sha256=" + Sha256Hex(name);
  key.digest = Hex64(Fnv1a64(key.material, 0x84222325cbf29ce4ULL)) + Hex64(Fnv1a64(key.material));
  return key;
}

std::string EncodeEntry(const CacheKey& key, std::string_view payload, const EntrySigner& signer) {
  std::string entry;
  entry.reserve(kHeaderSize + key.material.size() + payload.size() + kEntryTagSize);
  entry.append(kMagic, sizeof(kMagic));
  PutLittleEndian(entry, kEntryFormatVersion, 4);
  PutLittleEndian(entry, signer.enabled() ? kSignedFlag : 0, 4);
  PutLittleEndian(entry, key.material.size(), 8);
  PutLittleEndian(entry, payload.size(), 8);
  PutLittleEndian(entry, EntryChecksum(entry, key.material, payload), 8);
  entry += key.material;
  entry.append(payload);
  if (signer.enabled()) entry += signer.Tag(entry);
  return entry;
}

DecodedEntry DecodeEntry(std::string_view bytes, const CacheKey& key, const EntrySigner& signer) {
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
  const uint64_t flags = GetLittleEndian(bytes, 12, 4);
  if ((flags & ~uint64_t{kSignedFlag}) != 0) {
    result.status = EntryStatus::kCorrupt;
    result.problem = "unknown entry flags";
    return result;
  }
  const bool is_signed = (flags & kSignedFlag) != 0;
  const uint64_t key_length = GetLittleEndian(bytes, 16, 8);
  const uint64_t payload_length = GetLittleEndian(bytes, 24, 8);
  const size_t tag_size = is_signed ? kEntryTagSize : 0;
  if (bytes.size() < kHeaderSize + tag_size) {
    result.status = EntryStatus::kTruncated;
    result.problem = "entry of " + std::to_string(bytes.size()) + " bytes is shorter than a header";
    return result;
  }
  const uint64_t available = bytes.size() - kHeaderSize - tag_size;
  if (key_length > available || payload_length > available - key_length) {
    result.status = EntryStatus::kTruncated;
    result.problem = "entry holds " + std::to_string(bytes.size()) +
                     " bytes, its header announces " +
                     std::to_string(kHeaderSize + key_length + payload_length + tag_size);
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
  // The tag is checked before anything in the entry is believed, the key included.
  if (signer.enabled()) {
    if (!is_signed) {
      result.status = EntryStatus::kUnsigned;
      result.problem = "entry is not signed, and this process holds TORCH_TPU_CACHE_KEY";
      return result;
    }
    const size_t signed_size = bytes.size() - kEntryTagSize;
    const std::string expected = signer.Tag(bytes.substr(0, signed_size));
    if (CRYPTO_memcmp(expected.data(), bytes.data() + signed_size, kEntryTagSize) != 0) {
      result.status = EntryStatus::kBadSignature;
      result.problem = "entry's signature does not match TORCH_TPU_CACHE_KEY";
      return result;
    }
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
