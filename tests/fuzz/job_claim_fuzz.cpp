// What a peer sends to claim its place in a job (job/identity.hpp): the
// bootstrap claim rank 0 decodes at admission, and the settings every rank
// all-gathers; bad input ends in merak::error, and whatever a peer sends is
// printed escaped. The first byte picks the reader; the rest is the body.
#include <algorithm>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "job/identity.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      merak::job::decode_claim(body);
    } else {
      // Two ranks' settings: the body's first byte is the first one's length.
      if (body.empty()) return 0;
      const std::string rest = body.substr(1);
      const size_t cut = std::min<size_t>(static_cast<unsigned char>(body[0]), rest.size());
      const std::string why =
          merak::job::settings_disagreement({rest.substr(0, cut), rest.substr(cut)});
      for (unsigned char ch : why)
        if (ch < 0x20 || ch >= 0x7f) __builtin_trap();  // peer text printed raw
    }
  } catch (const merak::error&) {
  }
  return 0;
}
