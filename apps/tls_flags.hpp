#pragma once
// --tls-cert, --tls-key and --tls-ca: TLS for a job's connections
// (job/tls.hpp), on the commands that start or join one (launch, node, svm
// train --procs, svm worker).

#include <string>

#include "job/tls.hpp"

namespace CLI {
class App;
}

namespace merak::apps {

// Adds the three flags to `c`, into `f`.
void add_tls_flags(CLI::App& c, job::tls_files& f);

// The files to use: the flags when given (all three), else MERAK_TLS_* from
// the environment, else none. Paths are made absolute and the files loaded
// once, so that a bad file is named before any process starts; they are
// exported as MERAK_TLS_* for the processes this one starts (a hostfile
// launch forwards them to every host, where the same paths must hold that
// host's files). Throws merak::error prefixed with `who`.
job::tls_files use_tls_flags(const job::tls_files& f, const std::string& who);

}  // namespace merak::apps
