#pragma once
// Checks on the files a user names before they are read.

#include <cstddef>
#include <functional>
#include <string>

namespace merak {

// Fails (merak::error) naming `what` and `path` unless `path` is a file
// that can be read to its end: a regular file or a pipe. A directory, a
// device (/dev/zero never ends) or a socket is refused; a path that does not
// exist is left to the caller's open, which names it.
void check_input_file(const std::string& path, const char* what);

// Writes all `n` bytes to `fd`, retrying short writes; fails naming `path`.
void write_all(int fd, const void* data, size_t n, const std::string& path);

// Writes a file crash-safely: `fill(fd, tmp)` writes PATH.tmp, which is
// created new (O_EXCL | O_NOFOLLOW: never through a link planted there; a
// stale one is removed first), fsync'd, renamed over `path`, and the
// directory fsync'd. Fails naming the path; the temporary file is removed.
void write_file_atomic(const std::string& path,
                       const std::function<void(int fd, const std::string& tmp)>& fill);
void write_file_atomic(const std::string& path, const std::string& content);

// fsyncs a directory so that renames inside it are durable.
void fsync_directory(const std::string& dir);

}  // namespace merak
