#pragma once
// Checks on the files a user names before they are read.

#include <string>

namespace merak {

// Fails (merak::error) naming `what` and `path` unless `path` is a file
// that can be read to its end: a regular file or a pipe. A directory, a
// device (/dev/zero never ends) or a socket is refused; a path that does not
// exist is left to the caller's open, which names it.
void check_input_file(const std::string& path, const char* what);

}  // namespace merak
