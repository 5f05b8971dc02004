#pragma once
// The shared body of the `merak` programs' main: global flags, the given
// sub-commands, config files, errors as one line and exit status 1.

#include <exception>

#include "apps/commands.hpp"

namespace CLI {
class ParseError;
}

namespace merak::apps {

struct command_entry {
  const char* name;
  action (*add)(CLI::App& parent);
};

// Registers `commands` on the program's CLI, parses argv and runs the chosen
// one. Returns the exit status.
int run_cli(int argc, char** argv, const command_entry* commands, int count);

// Prints what escaped a command as one line on stderr, "merak: error: ..."
// (control characters escaped, a long line cut: core/error.hpp's
// error_line): merak::error's message; out of memory, a failed system call
// or file-system operation named as such. A process that a launcher
// started (MERAK_FAILURE_FD) also hands the line to it (job/launcher.hpp).
// Returns the exit status, 1.
int report_error(const std::exception& e);

// A CLI11 parse error as the `merak` programs report it (CLI11's own text,
// cut as above; --help and --version print in full). Returns its exit status.
int report_parse_error(CLI::App& app, const CLI::ParseError& e);

// mallopt settings of the training runtime (see cli_main.cpp).
void keep_large_blocks_in_heap();

}  // namespace merak::apps
