// Where serialized cache entries live: a directory (tier 2's tmpfs, or tier 3 on local disk, NFS,
// gcsfuse) or an HTTP object store (tier 3). Stores move opaque bytes; cache_entry.h checks them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace torch_tpu::cache {

// A store is untrusted input: it may be full of symlinks, FIFOs or huge files (a directory), or
// answer with endless or malformed bodies (a server). Reads are bounded by the largest entry
// allowed (TORCH_TPU_CACHE_MAX_ENTRY_BYTES) and refuse what is not a plain stored entry.
struct StoreResult {
  // kRejected: something is stored under the name but it is refused unread or half read (the
  // program is compiled instead); the store stays in use.
  enum Status { kFound, kMissing, kUnavailable, kRejected } status = kMissing;
  std::string bytes;   // kFound: the entry; kUnavailable, kRejected: what went wrong
  std::string reason;  // kRejected: a short name for metrics ("oversized", "symlink", ...)
};

inline constexpr int64_t kDefaultMaxEntryBytes = int64_t{512} << 20;

// What a stored file holds, which its name's suffix says: a cached executable, or a warm-start
// manifest (cache/preload.h), which stores keep apart so that entry counts stay counts of programs.
enum class StoredKind { kExecutable, kManifest };

inline const char* SuffixOf(StoredKind kind) {
  return kind == StoredKind::kExecutable ? ".xc" : ".preload";
}

struct StoreStats {
  std::optional<int64_t> entries;  // unknown for stores that cannot be listed
  std::optional<int64_t> bytes;
};

class EntryStore {
 public:
  virtual ~EntryStore() = default;
  virtual StoreResult Read(const std::string& digest,
                           StoredKind kind = StoredKind::kExecutable) = 0;
  // Publishes the entry as a whole: a concurrent reader sees the old entry, none, or all of the
  // new one. Returns an error message, empty on success.
  virtual std::string Write(const std::string& digest, const std::string& bytes,
                            StoredKind kind = StoredKind::kExecutable) = 0;
  // Executable entries only.
  virtual StoreStats Stats() const = 0;
  // Removes every entry and manifest; returns an error message, empty on success.
  virtual std::string Clear() = 0;
  // Where the store is, fit for messages: credentials in a URL are masked.
  virtual std::string location() const = 0;
};

// Entries as files <directory>/<digest>.xc (manifests .preload), written to a temporary name and
// renamed into place. With a nonzero `max_bytes`, the least recently used files (entries and
// manifests) are deleted past that size. Finding
// them lists the directory, so a process does so only when its own tally (the size its last
// listing found plus what it wrote since) passes the cap, or after writing an eighth of the cap:
// listing after every write made warm runs that fill the tier quadratic in its entries.
// A `private_to_user` store (the host tier under /dev/shm) must be a directory of this user's,
// and its files are readable by this user only: executables loaded from a directory that someone
// else controls would run their code. That is checked before every read and write, not only when
// the directory is created. Otherwise (a team's persistent cache) files follow umask.
// Files are opened without following symlinks and must be regular files no larger than
// `max_entry_bytes`: a FIFO, a device or a link planted under an entry's name is refused, never
// opened for reading.
class DirectoryStore : public EntryStore {
 public:
  DirectoryStore(std::string directory, int64_t max_bytes, bool private_to_user,
                 int64_t max_entry_bytes = kDefaultMaxEntryBytes);
  StoreResult Read(const std::string& digest,
                   StoredKind kind = StoredKind::kExecutable) override;
  std::string Write(const std::string& digest, const std::string& bytes,
                    StoredKind kind = StoredKind::kExecutable) override;
  StoreStats Stats() const override;
  std::string Clear() override;
  std::string location() const override { return directory_; }
  // Creates the directory; returns an error message, empty on success.
  std::string Prepare();

  // An exclusive advisory lock on `digest` shared by every process on the host: held while one
  // of them compiles the program the others then load. Released on destruction or process exit.
  class Lock {
   public:
    explicit Lock(int fd) : fd_(fd) {}
    Lock(Lock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;
    Lock& operator=(Lock&&) = delete;
    ~Lock();

   private:
    int fd_;
  };
  // Blocks until the lock is held. When the lock file cannot be opened (or is not a plain file)
  // the returned lock holds nothing: processes may then compile the same program twice, which is
  // only slower.
  Lock LockEntry(const std::string& digest);

  // Whether the entry `digest` is known to be stored in the store named `store_tag` too (a
  // marker file beside the entry, removed with it), and recording that it is. Lets a host whose
  // shared tier is warm fill the persistent tier once, not on every hit.
  bool HasCopyIn(const std::string& digest, const std::string& store_tag);
  void RecordCopyIn(const std::string& digest, const std::string& store_tag);

 private:
  std::string EntryPath(const std::string& digest, StoredKind kind) const;
  // "" when the directory may be used: for a private store, a directory (not a link) of this
  // user's that nobody else can write. `missing`, when given, says the directory does not exist.
  std::string CheckOwnership(bool* missing = nullptr) const;
  // Deletes least recently used entries past the cap; returns the bytes the entries left take.
  int64_t EvictPastLimit();
  // Accounts for `bytes` just written and evicts when the tally says the cap may be passed.
  void EvictIfNeeded(int64_t bytes);

  std::string directory_;
  int64_t max_bytes_;
  bool private_to_user_;
  int64_t max_entry_bytes_;
  mode_t file_mode_;
  std::mutex tally_mutex_;
  int64_t listed_bytes_ = -1;  // entries' bytes at the last listing; -1: not listed yet
  int64_t written_since_listing_ = 0;
};

// Entries as <base_url>/<digest>.xc (manifests .preload), read with GET and written with a
// single PUT (WebDAV servers and presigned object-store endpoints accept both). Plain http:// over
// POSIX sockets, every step bounded by `timeout_seconds`; an answer larger than
// `max_entry_bytes` (plus headers) is cut off and refused. `authorization`, when not empty, is
// sent as the Authorization header of every request (credentials in the URL,
// http://user:password@host/, are sent as Basic authorization); it never appears in messages.
class HttpStore : public EntryStore {
 public:
  // Throws std::invalid_argument for URLs it cannot speak to (other schemes, malformed).
  HttpStore(const std::string& base_url, double timeout_seconds,
            int64_t max_entry_bytes = kDefaultMaxEntryBytes, std::string authorization = "");
  StoreResult Read(const std::string& digest,
                   StoredKind kind = StoredKind::kExecutable) override;
  std::string Write(const std::string& digest, const std::string& bytes,
                    StoredKind kind = StoredKind::kExecutable) override;
  StoreStats Stats() const override { return {}; }
  std::string Clear() override;
  std::string location() const override { return base_url_; }
  bool is_plain_http() const { return !tls_; }

 private:
  struct Response {
    int status = 0;
    std::string body;
    bool oversized = false;  // cut off past the entry size limit; body empty
  };
  // Sends one request; nullopt with `error` set when the server cannot be reached in time or
  // answers malformed HTTP.
  std::optional<Response> Exchange(const std::string& method, const std::string& path,
                                   const std::string& body, std::string& error) const;

  std::string base_url_;  // credentials masked
  int64_t max_entry_bytes_;
  std::string authorization_;
  std::string host_;
  std::string port_;
  std::string path_prefix_;  // ends with '/'
  double timeout_seconds_;
  bool tls_ = false;  // https://
};

}  // namespace torch_tpu::cache
