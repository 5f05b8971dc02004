#pragma once
// The shared body of the `merak` programs' main: global flags, the given
// sub-commands, config files, errors as one line and exit status 1.

#include "apps/commands.hpp"

namespace merak::apps {

struct command_entry {
  const char* name;
  action (*add)(CLI::App& parent);
};

// Registers `commands` on the program's CLI, parses argv and runs the chosen
// one. Returns the exit status.
int run_cli(int argc, char** argv, const command_entry* commands, int count);

// mallopt settings of the training runtime (see cli_main.cpp).
void keep_large_blocks_in_heap();

}  // namespace merak::apps
