// The frames a connecting peer sends before it is authenticated (the
// bootstrap's, the gates' of the CAF ports): the hello checked by the
// server, and a challenge and verdict as a client reads them. The first
// byte picks which; the rest is the frame body.
#include "job/auth.hpp"
#include "core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      merak::job::auth_server s("job-token", "bootstrap");
      std::string why;
      s.check(body, why);
    } else {
      // A challenge, then whatever follows as the verdict.
      merak::job::auth_client c("job-token", "bootstrap", "claim");
      const size_t cut = body.empty() ? 0 : static_cast<unsigned char>(body[0]) % body.size();
      try {
        c.answer(body.substr(0, cut));
      } catch (const merak::error&) {
      }
      c.verdict(body.substr(cut));
    }
  } catch (const merak::error&) {
  }
  return 0;
}
