#pragma once
// Exit reasons of the training actors as one line of text.
//
// An exception that escapes an actor's handler (or its start) ends the
// actor with sec::runtime_error carrying the exception's message, so that
// whoever monitors it (the coordinator) reports that message. CAF's own
// handler would print a dump on stdout and keep only the error code.

#include <caf/all.hpp>

#include <exception>
#include <string>

namespace merak::actors {

// An actor's exception handler (scheduled_actor::set_exception_handler):
// the exception's message as the exit reason.
caf::error exception_reason(caf::scheduled_actor* self, std::exception_ptr& x);

// `reason` in words: the text an actor ended with, when it gave one (a
// runtime_error with a message), else CAF's rendering.
std::string reason_text(caf::actor_system& sys, const caf::error& reason);

}  // namespace merak::actors
