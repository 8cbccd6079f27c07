#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "cache/entry_store.h"
#include "cache/file_descriptor.h"

namespace torch_tpu::cache {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTemporaryMarker = ".tmp.";
// A temporary file this old belongs to a writer that died; newer ones may still be written.
constexpr auto kAbandonedTemporaryAge = std::chrono::minutes(10);

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string ErrnoText(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// Reads at most `size` bytes (what fstat said the file held when it was checked).
bool ReadWholeFile(int fd, size_t size, std::string& out) {
  out.resize(size);
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t got = ::read(fd, out.data() + done, out.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return false;
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  out.resize(done);  // a short file reads short; the entry check reports it as truncated
  return true;
}

// Opens a stored file for reading without following a link at its name and without blocking on a
// FIFO; the caller checks it is a regular file before reading.
int OpenStoredFile(const std::string& path, int flags, mode_t mode = 0) {
  return ::open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, mode);
}

// Lock files would otherwise pile up, one per program ever compiled. Removing one that a process
// holds or waits on lets a newcomer lock a fresh file: the program may then be compiled twice,
// which costs time, never correctness (entries are replaced whole).
// The persistence markers (HasCopyIn) go with their entry for the same reason.
void RemoveCompanionFiles(const fs::path& entry) {
  for (const char* extension : {".lock", ".persisted"}) {
    fs::path companion = entry;
    companion.replace_extension(extension);
    std::error_code error;
    fs::remove(companion, error);
  }
}

constexpr size_t kMaxMarkerBytes = 4096;

bool IsRegularFile(const fs::directory_entry& item) {
  std::error_code error;
  return item.symlink_status(error).type() == fs::file_type::regular && !error;
}

}  // namespace

DirectoryStore::DirectoryStore(std::string directory, int64_t max_bytes, bool private_to_user,
                               int64_t max_entry_bytes)
    : directory_(std::move(directory)),
      max_bytes_(max_bytes),
      private_to_user_(private_to_user),
      max_entry_bytes_(max_entry_bytes),
      file_mode_(private_to_user ? 0600 : 0666) {}

std::string DirectoryStore::CheckOwnership(bool* missing) const {
  if (missing != nullptr) *missing = false;
  if (!private_to_user_) return "";
  struct stat info{};
  if (::lstat(directory_.c_str(), &info) != 0) {
    if (missing != nullptr) *missing = errno == ENOENT;
    return ErrnoText("cannot use", directory_);
  }
  if (!S_ISDIR(info.st_mode) || info.st_uid != ::getuid() || (info.st_mode & 022) != 0) {
    return directory_ + " is not a directory of this user's that only they can write";
  }
  return "";
}

std::string DirectoryStore::Prepare() {
  std::error_code error;
  if (private_to_user_) {
    fs::create_directories(fs::path(directory_).parent_path(), error);
    if (::mkdir(directory_.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoText("cannot create", directory_);
    }
    if (std::string problem = CheckOwnership(); !problem.empty()) return problem;
  } else {
    fs::create_directories(directory_, error);
    if (error) return "cannot create " + directory_ + ": " + error.message();
  }
  if (::access(directory_.c_str(), R_OK | W_OK | X_OK) != 0) {
    return ErrnoText("cannot use", directory_);
  }
  return "";
}

std::string DirectoryStore::EntryPath(const std::string& digest, StoredKind kind) const {
  return directory_ + "/" + digest + SuffixOf(kind);
}

StoreResult DirectoryStore::Read(const std::string& digest, StoredKind kind) {
  // Checked before every read: whoever swapped the directory for one they control would have
  // their executables loaded. A missing directory holds nothing (manifests are read before the
  // store is prepared).
  bool missing = false;
  if (std::string problem = CheckOwnership(&missing); !problem.empty()) {
    if (missing) return {StoreResult::kMissing, ""};
    return {StoreResult::kUnavailable, problem};
  }
  const std::string path = EntryPath(digest, kind);
  FileDescriptor fd(OpenStoredFile(path, O_RDONLY));
  if (fd.get() < 0) {
    if (errno == ENOENT) return {StoreResult::kMissing, ""};
    if (errno == ELOOP) {
      return {StoreResult::kRejected, path + " is a symbolic link, not a stored entry", "symlink"};
    }
    return {StoreResult::kUnavailable, ErrnoText("cannot open", path)};
  }
  struct stat info{};
  if (::fstat(fd.get(), &info) != 0) {
    return {StoreResult::kUnavailable, ErrnoText("cannot read", path)};
  }
  if (!S_ISREG(info.st_mode)) {
    return {StoreResult::kRejected, path + " is not a regular file", "not_a_regular_file"};
  }
  if (info.st_size > max_entry_bytes_) {
    return {StoreResult::kRejected,
            path + " holds " + std::to_string(info.st_size) +
                " bytes, more than TORCH_TPU_CACHE_MAX_ENTRY_BYTES=" +
                std::to_string(max_entry_bytes_),
            "oversized"};
  }
  StoreResult result{StoreResult::kFound, ""};
  if (!ReadWholeFile(fd.get(), static_cast<size_t>(info.st_size), result.bytes)) {
    return {StoreResult::kUnavailable, ErrnoText("cannot read", path)};
  }
  // The modification time doubles as the last use, which eviction orders by.
  if (max_bytes_ > 0) ::futimens(fd.get(), nullptr);
  return result;
}

std::string DirectoryStore::Write(const std::string& digest, const std::string& bytes,
                                  StoredKind kind) {
  static std::atomic<uint64_t> counter{0};
  if (std::string problem = CheckOwnership(); !problem.empty()) return problem;
  const std::string path = EntryPath(digest, kind);
  const std::string temporary = path + kTemporaryMarker +
                                std::to_string(::getpid()) + "." + std::to_string(++counter);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, file_mode_);
  if (fd < 0) return ErrnoText("cannot create", temporary);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t put = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) break;
    done += static_cast<size_t>(put);
  }
  std::string error;
  if (done != bytes.size()) error = ErrnoText("cannot write", temporary);
  if (::close(fd) != 0 && error.empty()) error = ErrnoText("cannot write", temporary);
  if (error.empty() && ::rename(temporary.c_str(), path.c_str()) != 0) {
    error = ErrnoText("cannot rename into", path);
  }
  if (!error.empty()) {
    ::unlink(temporary.c_str());
    return error;
  }
  if (max_bytes_ > 0) EvictIfNeeded(static_cast<int64_t>(bytes.size()));
  return "";
}

void DirectoryStore::EvictIfNeeded(int64_t bytes) {
  std::lock_guard<std::mutex> lock(tally_mutex_);
  written_since_listing_ += bytes;
  // Other processes' writes show only in a listing: bounding what this one writes between
  // listings bounds how far past the cap the directory can get through it.
  if (listed_bytes_ >= 0 && listed_bytes_ + written_since_listing_ <= max_bytes_ &&
      written_since_listing_ <= max_bytes_ / 8) {
    return;
  }
  listed_bytes_ = EvictPastLimit();
  written_since_listing_ = 0;
}

int64_t DirectoryStore::EvictPastLimit() {
  struct Entry {
    fs::path path;
    fs::file_time_type last_use;
    uintmax_t size;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code error;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& item : fs::directory_iterator(directory_, error)) {
    std::error_code item_error;
    const std::string name = item.path().filename().string();
    const auto last_use = item.last_write_time(item_error);
    if (item_error) continue;
    if (name.find(kTemporaryMarker) != std::string::npos) {
      if (now - last_use > kAbandonedTemporaryAge) fs::remove(item.path(), item_error);
      continue;
    }
    if ((!EndsWith(name, SuffixOf(StoredKind::kExecutable)) &&
         !EndsWith(name, SuffixOf(StoredKind::kManifest))) ||
        !IsRegularFile(item)) {
      continue;
    }
    const uintmax_t size = item.file_size(item_error);
    if (item_error) continue;
    entries.push_back({item.path(), last_use, size});
    total += static_cast<int64_t>(size);
  }
  if (total <= max_bytes_) return total;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
  for (const Entry& entry : entries) {
    if (total <= max_bytes_) break;
    std::error_code remove_error;
    // Another process may have evicted it first; either way it no longer counts.
    fs::remove(entry.path, remove_error);
    RemoveCompanionFiles(entry.path);
    total -= static_cast<int64_t>(entry.size);
  }
  return total;
}

StoreStats DirectoryStore::Stats() const {
  StoreStats stats{0, 0};
  std::error_code error;
  for (const auto& item : fs::directory_iterator(directory_, error)) {
    std::error_code item_error;
    if (!EndsWith(item.path().filename().string(), SuffixOf(StoredKind::kExecutable)) ||
        !IsRegularFile(item)) {
      continue;
    }
    const uintmax_t size = item.file_size(item_error);
    if (item_error) continue;
    *stats.entries += 1;
    *stats.bytes += static_cast<int64_t>(size);
  }
  return stats;
}

std::string DirectoryStore::Clear() {
  std::error_code error;
  for (const auto& item : fs::directory_iterator(directory_, error)) {
    const std::string name = item.path().filename().string();
    if (!EndsWith(name, SuffixOf(StoredKind::kExecutable)) &&
        !EndsWith(name, SuffixOf(StoredKind::kManifest))) {
      continue;
    }
    std::error_code remove_error;
    fs::remove(item.path(), remove_error);
    RemoveCompanionFiles(item.path());
    if (remove_error)
      return "cannot remove " + item.path().string() + ": " + remove_error.message();
  }
  if (error && error != std::errc::no_such_file_or_directory) {
    return "cannot list " + directory_ + ": " + error.message();
  }
  return "";
}

DirectoryStore::Lock DirectoryStore::LockEntry(const std::string& digest) {
  if (!CheckOwnership().empty()) return Lock(-1);
  const std::string path = directory_ + "/" + digest + ".lock";
  FileDescriptor fd(OpenStoredFile(path, O_RDWR | O_CREAT, file_mode_));
  struct stat info{};
  if (fd.get() < 0 || ::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) return Lock(-1);
  while (::flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return Lock(-1);
  }
  return Lock(fd.release());
}

bool DirectoryStore::HasCopyIn(const std::string& digest, const std::string& store_tag) {
  const std::string path = directory_ + "/" + digest + ".persisted";
  FileDescriptor fd(OpenStoredFile(path, O_RDONLY));
  struct stat info{};
  if (fd.get() < 0 || ::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) return false;
  std::string tags;
  if (!ReadWholeFile(fd.get(), std::min<size_t>(info.st_size, kMaxMarkerBytes), tags)) {
    return false;
  }
  return tags.find(store_tag + "\n") != std::string::npos;
}

void DirectoryStore::RecordCopyIn(const std::string& digest, const std::string& store_tag) {
  if (!CheckOwnership().empty()) return;
  const std::string path = directory_ + "/" + digest + ".persisted";
  FileDescriptor fd(OpenStoredFile(path, O_WRONLY | O_CREAT | O_APPEND, file_mode_));
  struct stat info{};
  if (fd.get() < 0 || ::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode) ||
      info.st_size > static_cast<off_t>(kMaxMarkerBytes)) {
    return;  // a marker only saves a write to the persistent tier
  }
  const std::string line = store_tag + "\n";
  [[maybe_unused]] const ssize_t written = ::write(fd.get(), line.data(), line.size());
}

DirectoryStore::Lock::~Lock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

}  // namespace torch_tpu::cache
