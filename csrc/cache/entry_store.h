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

struct StoreResult {
  enum Status { kFound, kMissing, kUnavailable } status = kMissing;
  std::string bytes;  // kFound: the entry; kUnavailable: what went wrong
};

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
// else controls would run their code. Otherwise (a team's persistent cache) files follow umask.
class DirectoryStore : public EntryStore {
 public:
  DirectoryStore(std::string directory, int64_t max_bytes, bool private_to_user);
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
  // Blocks until the lock is held. When the lock file cannot be opened the returned lock holds
  // nothing: processes may then compile the same program twice, which is only slower.
  Lock LockEntry(const std::string& digest);

 private:
  std::string EntryPath(const std::string& digest, StoredKind kind) const;
  // Deletes least recently used entries past the cap; returns the bytes the entries left take.
  int64_t EvictPastLimit();
  // Accounts for `bytes` just written and evicts when the tally says the cap may be passed.
  void EvictIfNeeded(int64_t bytes);

  std::string directory_;
  int64_t max_bytes_;
  bool private_to_user_;
  mode_t file_mode_;
  std::mutex tally_mutex_;
  int64_t listed_bytes_ = -1;  // entries' bytes at the last listing; -1: not listed yet
  int64_t written_since_listing_ = 0;
};

// Entries as <base_url>/<digest>.xc (manifests .preload), read with GET and written with a
// single PUT (WebDAV servers and presigned object-store endpoints accept both). Plain http:// over
// POSIX sockets, every step bounded by `timeout_seconds`.
class HttpStore : public EntryStore {
 public:
  // Throws std::invalid_argument for URLs it cannot speak to (other schemes, malformed).
  HttpStore(const std::string& base_url, double timeout_seconds);
  StoreResult Read(const std::string& digest,
                   StoredKind kind = StoredKind::kExecutable) override;
  std::string Write(const std::string& digest, const std::string& bytes,
                    StoredKind kind = StoredKind::kExecutable) override;
  StoreStats Stats() const override { return {}; }
  std::string Clear() override;
  std::string location() const override { return base_url_; }

 private:
  struct Response {
    int status = 0;
    std::string body;
  };
  // Sends one request; nullopt with `error` set when the server cannot be reached in time.
  std::optional<Response> Exchange(const std::string& method, const std::string& path,
                                   const std::string& body, std::string& error) const;

  std::string base_url_;
  std::string host_;
  std::string port_;
  std::string path_prefix_;  // ends with '/'
  double timeout_seconds_;
  bool tls_ = false;  // https://
};

}  // namespace torch_tpu::cache
