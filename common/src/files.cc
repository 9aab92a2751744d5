#include "enclave/common/files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>

namespace enclave {
namespace {

// --- Temporary files removed on SIGINT, SIGTERM and SIGHUP -------------------------------
// An uncommitted output (often decrypted plaintext: `enclave-data open`, `open-model`,
// `enclave-train predict --out`) is removed by ~AtomicOutputFile, which a signal that kills
// the process never runs. So every temporary is also entered in this fixed table, which the
// handler walks with async-signal-safe calls only (atomic loads, unlink, sigaction, raise).

constexpr int kTempSlots = 128;
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

struct TempSlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled or emptied, 2 holds a live temporary
  char path[PATH_MAX];
};
TempSlot g_temp_slots[kTempSlots];
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler reads the slot states");

extern "C" void RemoveTempsAndDie(int sig) {
  const int saved = errno;
  for (TempSlot& slot : g_temp_slots) {
    if (slot.state.load(std::memory_order_acquire) == 2) ::unlink(slot.path);
  }
  // Then die of the signal as if there were no handler (the parent sees the usual status).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);  // delivered when the handler returns (the signal is blocked until then)
  errno = saved;
}

// Installs the handler for each signal whose disposition is still the default: a signal the
// parent ignores (nohup) stays ignored, and a handler the program installed (enclave-train's
// stop-after-this-step during training) is left alone.
void InstallCleanupHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : kCleanupSignals) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;
      struct sigaction sa {};
      sa.sa_handler = RemoveTempsAndDie;
      sigemptyset(&sa.sa_mask);
      for (int other : kCleanupSignals) sigaddset(&sa.sa_mask, other);
      ::sigaction(sig, &sa, nullptr);
    }
  });
}

// The slot index, or -1 when the path does not fit or the table is full.
int RegisterTemp(const std::string& temp) {
  if (temp.size() >= PATH_MAX) return -1;
  InstallCleanupHandlers();
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = 0;
    if (!g_temp_slots[i].state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) continue;
    std::memcpy(g_temp_slots[i].path, temp.c_str(), temp.size() + 1);
    g_temp_slots[i].state.store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void UnregisterTemp(int slot) {
  if (slot >= 0) g_temp_slots[slot].state.store(0, std::memory_order_release);
}

constexpr size_t kWriteBuffer = 1 << 20;

std::string DirectoryOf(const std::string& path) {
  std::filesystem::path p(path);
  auto parent = p.parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

Status WriteAll(int fd, const uint8_t* data, size_t size, const std::string& name) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("writing " + name, errno);
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace

Result<std::vector<uint8_t>> ReadWholeFile(const std::string& path, size_t max_bytes) {
  ASSIGN_OR_RETURN(FileReader reader, FileReader::Open(path));
  if (reader.size() > max_bytes) {
    return InvalidInput(path + ": file is " + std::to_string(reader.size()) +
                        " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  std::vector<uint8_t> bytes(reader.size());
  RETURN_IF_ERROR(reader.ReadAt(0, bytes.data(), bytes.size()));
  return bytes;
}

namespace {
// O_TMPFILE files are linked through /proc/self/fd (linkat with AT_EMPTY_PATH needs a
// capability); without /proc, named temporaries.
bool ProcFdAvailable() {
  static const bool available = ::access("/proc/self/fd", F_OK) == 0;
  return available;
}
}  // namespace

Result<AtomicOutputFile> AtomicOutputFile::Create(const std::string& path, bool allow_overwrite) {
  if (!allow_overwrite && ::access(path.c_str(), F_OK) == 0) {
    return AlreadyExists(path + ": output file exists (refusing to overwrite)");
  }
  if (!allow_overwrite && ProcFdAvailable()) {
    // Write-once: an unnamed file in the folder, linked to `path` on Commit (no temporary
    // name to create, remove, or leave behind).
    const int fd = ::open(DirectoryOf(path).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) return AtomicOutputFile(path, "", fd, allow_overwrite, -1);
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)  // else the file system has no O_TMPFILE
      return ErrnoStatus("creating a file for " + path, errno);
  }
  // Unique per process and thread (a random_device per file had cost a device open).
  thread_local std::mt19937_64 names{std::random_device{}()};
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string temp = DirectoryOf(path) + "/." + std::filesystem::path(path).filename().string() +
                       ".tmp-" + std::to_string(names());
    // Registered before it exists, so that no signal can leave it behind.
    const int slot = RegisterTemp(temp);
    if (slot < 0) return Internal("more than 128 output files open at once, or a path too long: " + temp);
    int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) return AtomicOutputFile(path, temp, fd, allow_overwrite, slot);
    const int err = errno;
    UnregisterTemp(slot);
    errno = err;
    if (errno != EEXIST) return ErrnoStatus("creating temporary file for " + path, errno);
  }
  return IoError("could not create a temporary file beside " + path);
}

AtomicOutputFile::AtomicOutputFile(AtomicOutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_(std::move(other.temp_)),
      fd_(std::exchange(other.fd_, -1)),
      allow_overwrite_(other.allow_overwrite_),
      slot_(std::exchange(other.slot_, -1)),
      buffer_(std::move(other.buffer_)) {
  other.temp_.clear();
}

AtomicOutputFile::~AtomicOutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty()) ::unlink(temp_.c_str());
  UnregisterTemp(slot_);
}

Status AtomicOutputFile::FlushBuffer() {
  if (buffer_.empty()) return OkStatus();
  RETURN_IF_ERROR(WriteAll(fd_, buffer_.data(), buffer_.size(), path_));
  buffer_.clear();
  return OkStatus();
}

Status AtomicOutputFile::Write(const void* data, size_t size) {
  if (fd_ < 0) return FailedPrecondition(path_ + ": write after commit");
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (buffer_.size() + size > kWriteBuffer) {
    RETURN_IF_ERROR(FlushBuffer());
    if (size >= kWriteBuffer) return WriteAll(fd_, bytes, size, path_);
  }
  buffer_.insert(buffer_.end(), bytes, bytes + size);
  return OkStatus();
}

Status SyncFolder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening folder " + dir + " to sync it", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus("fsync of folder " + dir, err);
  return OkStatus();
}

Status AtomicOutputFile::Commit() {
  RETURN_IF_ERROR(CommitLeavingFolderUnsynced());
  return SyncFolder(DirectoryOf(path_));
}

Status AtomicOutputFile::CommitLeavingFolderUnsynced() {
  if (fd_ < 0) return FailedPrecondition(path_ + ": committed twice");
  RETURN_IF_ERROR(FlushBuffer());
  if (::fsync(fd_) != 0) return ErrnoStatus("fsync " + path_, errno);
  if (temp_.empty()) {  // an O_TMPFILE: linked in place (fails if the name exists)
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, path_.c_str(), AT_SYMLINK_FOLLOW) != 0)
      return ErrnoStatus("creating " + path_, errno);
  }
  if (::close(std::exchange(fd_, -1)) != 0) return ErrnoStatus("close " + path_, errno);
  if (temp_.empty()) {
    // linked above
  } else if (allow_overwrite_) {
    if (::rename(temp_.c_str(), path_.c_str()) != 0) return ErrnoStatus("rename to " + path_, errno);
  } else {
    // link() fails if the name appeared meanwhile: never replace someone else's file.
    if (::link(temp_.c_str(), path_.c_str()) != 0) return ErrnoStatus("creating " + path_, errno);
    ::unlink(temp_.c_str());
  }
  temp_.clear();
  UnregisterTemp(std::exchange(slot_, -1));
  return OkStatus();
}

Result<FileReader> FileReader::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidInput(path + ": not a regular file");
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return FileReader(path, fd, static_cast<uint64_t>(st.st_size));
}

FileReader::FileReader(FileReader&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status FileReader::ReadAt(uint64_t offset, void* out, size_t size) const {
  auto* dst = static_cast<uint8_t*>(out);
  while (size > 0) {
    ssize_t n = ::pread(fd_, dst, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("reading " + path_, errno);
    }
    if (n == 0) return InvalidInput(path_ + ": unexpected end of file at byte " + std::to_string(offset));
    dst += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Status FileReader::Read(void* out, size_t size, size_t* got) {
  *got = 0;
  while (true) {
    ssize_t n = ::read(fd_, out, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("reading " + path_, errno);
    }
    *got = static_cast<size_t>(n);
    return OkStatus();
  }
}

}  // namespace enclave
