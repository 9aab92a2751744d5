// Files: whole-file reads, and outputs that appear only when complete.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enclave/common/status.h"

namespace enclave {

Result<std::vector<uint8_t>> ReadWholeFile(const std::string& path, size_t max_bytes);

// fsyncs the folder `dir`: what makes its new, renamed or removed entries durable.
Status SyncFolder(const std::string& dir);

// Writes to a fresh temporary file beside `path`; Commit() fsyncs it, renames it over
// `path` and fsyncs the directory. Destroyed uncommitted, it removes the temporary, so a
// failed operation never leaves partial output under the final name. Without
// allow_overwrite the temporary is an unnamed O_TMPFILE in that folder where the file
// system has them (and /proc is mounted), linked to `path` by Commit, which fails if
// `path` exists; elsewhere a named temporary, linked and then removed.
//
// Signals: the first Create() in a process installs a handler for SIGINT, SIGTERM and
// SIGHUP (each only if its disposition is still the default) that unlinks every temporary
// not yet committed or destroyed and then dies of the signal as without the handler. So an
// interrupted `enclave-data open` leaves no partial plaintext. (SIGKILL cannot be caught.)
class AtomicOutputFile {
 public:
  static Result<AtomicOutputFile> Create(const std::string& path, bool allow_overwrite);
  AtomicOutputFile(AtomicOutputFile&& other) noexcept;
  AtomicOutputFile& operator=(AtomicOutputFile&&) = delete;
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  ~AtomicOutputFile();

  Status Write(const void* data, size_t size);
  // Syncs the file, puts it in place, and syncs its folder.
  Status Commit();
  // The same but for the folder's sync, which the caller does (one for many files).
  Status CommitLeavingFolderUnsynced();
  const std::string& path() const { return path_; }

 private:
  AtomicOutputFile(std::string path, std::string temp, int fd, bool allow_overwrite, int slot)
      : path_(std::move(path)), temp_(std::move(temp)), fd_(fd), allow_overwrite_(allow_overwrite), slot_(slot) {}
  Status FlushBuffer();

  std::string path_;
  std::string temp_;
  int fd_ = -1;
  bool allow_overwrite_ = false;
  int slot_ = -1;  // entry in the table of temporaries removed on a signal
  std::vector<uint8_t> buffer_;
};

// Reads a file sequentially through a large buffer; a short read is reported, not hidden.
class FileReader {
 public:
  static Result<FileReader> Open(const std::string& path);
  FileReader(FileReader&& other) noexcept;
  FileReader& operator=(FileReader&&) = delete;
  FileReader(const FileReader&) = delete;
  ~FileReader();

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly `size` bytes at `offset`.
  Status ReadAt(uint64_t offset, void* out, size_t size) const;
  // Reads up to `size` bytes at the current position; sets *got.
  Status Read(void* out, size_t size, size_t* got);

 private:
  FileReader(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace enclave
