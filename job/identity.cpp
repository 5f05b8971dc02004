#include "job/identity.hpp"

#include <map>

#include "comm/control_plane.hpp"
#include "core/error.hpp"
#include "job/socket_io.hpp"

namespace merak::job {
namespace {

constexpr size_t kmax_setting = 1 << 16;  // bytes of one name or value

// Reads u32 n then n bytes at `pos`; false when the blob ends first.
bool read_field(std::string_view blob, size_t& pos, std::string& out) {
  if (blob.size() - pos < 4) return false;
  const uint64_t n = get_le(blob.data() + pos, 4);
  pos += 4;
  if (n > kmax_setting || blob.size() - pos < n) return false;
  out.assign(blob.substr(pos, n));
  pos += n;
  return true;
}

const setting* find(const job_settings& s, const std::string& name) {
  for (auto& e : s)
    if (e.name == name) return &e;
  return nullptr;
}

std::string shown(const setting* s) {
  return s ? "'" + printable(s->value, 80) + "'" : std::string("not given");
}

}  // namespace

std::string encode_claim(const bootstrap_claim& c) {
  std::string s;
  put_u32(s, static_cast<uint32_t>(c.rank));
  put_u32(s, static_cast<uint32_t>(c.world_size));
  return s + c.job_id;
}

bootstrap_claim decode_claim(std::string_view payload) {
  if (payload.size() < 8) fail("malformed bootstrap claim ({} bytes)", payload.size());
  bootstrap_claim c;
  c.rank = static_cast<int64_t>(get_le(payload.data(), 4));
  c.world_size = static_cast<int64_t>(get_le(payload.data() + 4, 4));
  c.job_id.assign(payload.substr(8));
  check_job_id(c.job_id, "the claim's job id");
  return c;
}

void check_job_id(std::string_view id, std::string_view source) {
  if (id.size() > kmax_job_id)
    fail("{} is {} bytes long, more than {}", source, id.size(), kmax_job_id);
  for (unsigned char ch : id)
    if (ch <= ' ' || ch >= 0x7f)
      fail("{} '{}' holds a byte other than printable ASCII without spaces", source,
           printable(id));
}

std::string encode_settings(const job_settings& settings) {
  std::string s;
  for (auto& e : settings) {
    put_u32(s, static_cast<uint32_t>(e.name.size()));
    s += e.name;
    put_u32(s, static_cast<uint32_t>(e.value.size()));
    s += e.value;
  }
  return s;
}

job_settings decode_settings(std::string_view blob, const std::string& who) {
  job_settings out;
  for (size_t pos = 0; pos < blob.size();) {
    setting e;
    if (!read_field(blob, pos, e.name) || !read_field(blob, pos, e.value))
      fail("{} sent malformed job settings (at byte {} of {})", who, pos, blob.size());
    out.push_back(std::move(e));
  }
  return out;
}

std::string settings_disagreement(const std::vector<std::string>& encoded) {
  if (encoded.empty()) return {};
  const job_settings root = decode_settings(encoded[0], "rank 0");
  for (size_t k = 1; k < encoded.size(); ++k) {
    const job_settings other = decode_settings(encoded[k], fmt::format("rank {}", k));
    auto differs = [&](const std::string& name) {
      const setting* a = find(root, name);
      const setting* b = find(other, name);
      if (a && b && a->value == b->value) return std::string();
      return fmt::format(
          "rank {} was started with other settings than rank 0: {} is {} on rank {} and {} on "
          "rank 0 (every rank of a job takes the same flags)",
          k, printable(name, 80), shown(b), k, shown(a));
    };
    for (auto& e : root)
      if (auto why = differs(e.name); !why.empty()) return why;
    for (auto& e : other)
      if (auto why = differs(e.name); !why.empty()) return why;
  }
  return {};
}

void agree_on_settings(comm::control_plane& plane, const job_settings& mine) {
  if (plane.size() <= 1) return;
  const std::string why = settings_disagreement(plane.allgather(encode_settings(mine)));
  if (!why.empty()) throw error(why);
}

std::string printable(std::string_view text, size_t most) {
  std::string out;
  const size_t kept = std::min(text.size(), most);
  for (size_t i = 0; i < kept; ++i) {
    const unsigned char ch = static_cast<unsigned char>(text[i]);
    if (ch >= 0x20 && ch < 0x7f)
      out += static_cast<char>(ch);
    else
      out += fmt::format("\\x{:02x}", ch);
  }
  if (kept < text.size()) out += fmt::format("... ({} bytes in all)", text.size());
  return out;
}

}  // namespace merak::job
