#include "actors/actor_errors.hpp"

#include <fmt/format.h>

#include <new>
#include <typeinfo>

namespace merak::actors {

caf::error exception_reason(caf::scheduled_actor* self, std::exception_ptr& x) {
  const std::string who = self ? self->name() : "an actor";
  try {
    std::rethrow_exception(x);
  } catch (const std::bad_alloc& e) {
    return caf::make_error(caf::sec::runtime_error,
                           fmt::format("out of memory: an allocation failed ({})", e.what()));
  } catch (const std::exception& e) {
    return caf::make_error(caf::sec::runtime_error, std::string(e.what()));
  } catch (...) {
    return caf::make_error(caf::sec::runtime_error,
                           fmt::format("{} ended by an exception of an unknown type", who));
  }
}

std::string reason_text(caf::actor_system& sys, const caf::error& reason) {
  const caf::message& context = reason.context();
  if (reason.category() == caf::atom("system") && context.match_elements<std::string>())
    return context.get_as<std::string>(0);
  return sys.render(reason);
}

}  // namespace merak::actors
