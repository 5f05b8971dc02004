#pragma once
// A job's identity: what proves that the processes meeting at one
// rendezvous belong to one job, started the same way.
//
// Two layers, checked before any training:
// - The job id, carried in the bootstrap claim (job/bootstrap.hpp) and
//   compared by rank 0 at admission: a rank of another job is refused even
//   when it holds the same token, and rank 0 goes on waiting for its own.
//   The id comes from the launcher (merak launch and merak node set
//   MERAK_JOB_ID; Slurm's job and step, Open MPI's job, torchrun's run id).
// - The settings: the flags every rank must share (model, layout, seed,
//   optimizer, data, steps, precision, ...) as name/value pairs, all-gathered
//   once the job has joined. A rank that differs from rank 0 ends the job on
//   every rank with one message naming the rank, the flag and both values.
//
// Wire forms (integers little-endian):
//   claim    = u32 rank, u32 world size, job id (the rest; at most
//              kmax_job_id bytes of printable ASCII, no spaces)
//   settings = for each setting: u32 n, name[n], u32 m, value[m]

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace merak::comm {
class control_plane;
}

namespace merak::job {

constexpr size_t kmax_job_id = 128;

struct bootstrap_claim {
  int64_t rank = 0;
  int64_t world_size = 0;
  std::string job_id;
};

std::string encode_claim(const bootstrap_claim& claim);
// Throws merak::error for a payload that is not a claim, or whose job id is
// not one (check_job_id).
bootstrap_claim decode_claim(std::string_view payload);

// Refuses (merak::error naming `source`, e.g. "MERAK_JOB_ID") an id longer
// than kmax_job_id or with bytes outside printable ASCII or a space. Empty
// is allowed: a job its launcher gave no id.
void check_job_id(std::string_view id, std::string_view source);

struct setting {
  std::string name;  // as the flag reads, "--seed"; unique among one rank's settings
  std::string value;
};
using job_settings = std::vector<setting>;

std::string encode_settings(const job_settings& settings);
// Throws merak::error naming `who` for a blob that is not settings.
job_settings decode_settings(std::string_view blob, const std::string& who);

// Every rank's encoded settings in rank order: "" when each rank's equal
// rank 0's; else one line naming the first rank that differs, the first
// setting it differs in (in rank 0's order, then its own), and both values.
std::string settings_disagreement(const std::vector<std::string>& encoded);

// All-gathers `mine` over the job and throws merak::error with
// settings_disagreement's line when the ranks differ. Collective.
void agree_on_settings(comm::control_plane& plane, const job_settings& mine);

// Text from a peer or a user, safe to print on one line: bytes outside
// printable ASCII as \xNN, and at most `most` bytes of it kept, the total
// length said after the cut.
std::string printable(std::string_view text, size_t most = 120);

}  // namespace merak::job
