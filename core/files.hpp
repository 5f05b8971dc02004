#pragma once
// Checks on the files a user names before they are read.

#include <cstddef>
#include <functional>
#include <string>

namespace merak {

// Fails (merak::error) naming `what` and `path` unless `path` is a file
// that can be read to its end: a regular file or a pipe (standard input,
// /dev/fd/N). A directory, a device (/dev/zero never ends), a socket or a
// named FIFO (its open would block until a writer comes) is refused; a path
// that does not exist is left to the caller's open, which names it.
void check_input_file(const std::string& path, const char* what);

// Fails (merak::error) naming `what`, `path` and its type unless `path` is a
// regular file (through symbolic links) or does not exist: an output never
// replaces a device, a FIFO, a directory or a socket.
void check_output_file(const std::string& path, const char* what);

// Writes all `n` bytes to `fd`, retrying short writes; fails naming `path`.
void write_all(int fd, const void* data, size_t n, const std::string& path);

// Writes a file crash-safely: `path` is checked by check_output_file, then
// `fill(fd, tmp)` writes PATH.tmp, which is
// created new (O_EXCL | O_NOFOLLOW: never through a link planted there; a
// stale one is removed first), fsync'd, renamed over `path`, and the
// directory fsync'd. Fails naming the path; the temporary file is removed.
void write_file_atomic(const std::string& path,
                       const std::function<void(int fd, const std::string& tmp)>& fill);
void write_file_atomic(const std::string& path, const std::string& content);

// fsyncs a directory so that renames inside it are durable.
void fsync_directory(const std::string& dir);

// Whether readers verify the checksums of checkpoints and SVM model files
// (default: yes). `merak --skip-checksum` turns it off for one run, to load
// a file whose checksum is missing or damaged; every other check (sizes,
// shapes, finite values) still runs. Process-wide; thread-safe.
void set_verify_checksums(bool on);
bool verify_checksums();

// A file's checksum in merak's text form "crc32c:XXXXXXXX": CRC-32C over the
// whole file with these 8 digits read as "00000000" (so the checksum can sit
// inside what it covers). `digits` is where the 8 digits start in `text`.
std::string crc_field(const std::string& text, size_t digits);

}  // namespace merak
