#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "job/auth.hpp"
#include "job/bootstrap.hpp"
#include "job/identity.hpp"
#include "job/socket_io.hpp"
#include "tests/job/bootstrap_ranks.hpp"

using namespace merak::job;
using merak::job::test::fake_env;
using merak::job::test::join_ranks;
using namespace std::chrono_literals;

namespace {

job_settings base() {
  return {{"--seed", "1337"}, {"--layers", "2"}, {"--steps", "10"}};
}

std::vector<std::string> encoded(const std::vector<job_settings>& ranks) {
  std::vector<std::string> out;
  for (auto& r : ranks) out.push_back(encode_settings(r));
  return out;
}

std::vector<bootstrap_options> ranks(int P, std::string job_id,
                                     std::chrono::milliseconds timeout = 5000ms) {
  std::vector<bootstrap_options> v(P);
  const int port = pick_free_port();
  for (int r = 0; r < P; ++r) {
    v[r].rank = r;
    v[r].world_size = P;
    v[r].port = port;
    v[r].token = "shared";
    v[r].job_id = job_id;
    v[r].timeout = timeout;
  }
  return v;
}

}  // namespace

TEST_CASE("a bootstrap claim round-trips and a malformed one is refused", "[job][identity]") {
  const auto c = decode_claim(encode_claim({3, 8, "slurm-17.0"}));
  CHECK(c.rank == 3);
  CHECK(c.world_size == 8);
  CHECK(c.job_id == "slurm-17.0");
  CHECK(decode_claim(encode_claim({1, 2, ""})).job_id.empty());
  CHECK_THROWS_WITH(decode_claim("abc"), Catch::Contains("malformed bootstrap claim (3 bytes)"));
  CHECK_THROWS_WITH(decode_claim(encode_claim({1, 2, "a b"})),
                    Catch::Contains("printable ASCII without spaces"));
  CHECK_THROWS_WITH(decode_claim(encode_claim({1, 2, "\x1b[31m"})), Catch::Contains("'\\x1b[31m'"));
  CHECK_THROWS_WITH(decode_claim(encode_claim({1, 2, std::string(kmax_job_id + 1, 'x')})),
                    Catch::Contains("129 bytes long, more than 128"));
}

TEST_CASE("the job id comes from the launcher's variables, in order", "[job][identity]") {
  bootstrap_options one;
  one.rank = 0;
  one.world_size = 1;
  auto id = [&](std::map<std::string, std::string> env) {
    return resolve_bootstrap(one, fake_env(std::move(env))).job_id;
  };
  CHECK(id({}).empty());
  CHECK(id({{"TORCHELASTIC_RUN_ID", "r9"}}) == "torchrun-r9");
  CHECK(id({{"OMPI_MCA_ess_base_jobid", "4242"}, {"TORCHELASTIC_RUN_ID", "r9"}}) == "ompi-4242");
  CHECK(id({{"SLURM_JOB_ID", "17"}, {"SLURM_STEP_ID", "2"}, {"OMPI_MCA_ess_base_jobid", "1"}}) ==
        "slurm-17.2");
  CHECK(id({{"SLURM_JOB_ID", "17"}}) == "slurm-17.0");
  CHECK(id({{"MERAK_JOB_ID", "mine"}, {"SLURM_JOB_ID", "17"}}) == "mine");
  auto given = one;
  given.job_id = "flag";
  CHECK(resolve_bootstrap(given, fake_env({{"MERAK_JOB_ID", "env"}})).job_id == "flag");
  CHECK_THROWS_WITH(id({{"MERAK_JOB_ID", "two words"}}), Catch::Contains("MERAK_JOB_ID"));
}

TEST_CASE("settings round-trip and malformed ones are refused naming the rank", "[job][identity]") {
  const job_settings s = {{"--seed", "1"}, {"--data (contents)", std::string("a\0b", 3)}, {"", ""}};
  const auto back = decode_settings(encode_settings(s), "rank 1");
  REQUIRE(back.size() == 3);
  CHECK(back[1].value == std::string("a\0b", 3));
  const std::string blob = encode_settings(s);
  CHECK_THROWS_WITH(decode_settings(blob.substr(0, blob.size() - 1), "rank 5"),
                    Catch::Contains("rank 5 sent malformed job settings"));
  std::string huge;
  put_u32(huge, 0xffffffffu);
  CHECK_THROWS_WITH(decode_settings(huge, "rank 2"), Catch::Contains("rank 2"));
}

TEST_CASE("the first setting a rank differs in is named with both values", "[job][identity]") {
  CHECK(settings_disagreement(encoded({base(), base(), base()})).empty());
  CHECK(settings_disagreement({}).empty());
  auto seed = base();
  seed[0].value = "7";
  auto layers = base();
  layers[1].value = "3";
  CHECK(settings_disagreement(encoded({base(), base(), seed, layers})) ==
        "rank 2 was started with other settings than rank 0: --seed is '7' on rank 2 and '1337' "
        "on rank 0 (every rank of a job takes the same flags)");
  auto extra = base();
  extra.push_back({"--load", "/runs/a"});
  CHECK_THAT(settings_disagreement(encoded({base(), extra})),
             Catch::Contains("--load is '/runs/a' on rank 1 and not given on rank 0"));
  CHECK_THAT(settings_disagreement(encoded({extra, base()})),
             Catch::Contains("--load is not given on rank 1 and '/runs/a' on rank 0"));
  // The order of the settings does not matter.
  auto swapped = base();
  std::swap(swapped[0], swapped[2]);
  CHECK(settings_disagreement(encoded({base(), swapped})).empty());
  // A long or hostile value is cut and escaped.
  auto hostile = base();
  hostile[0].value = "\x1b[2J" + std::string(1000, 'x');
  const std::string why = settings_disagreement(encoded({base(), hostile}));
  CHECK(why.find('\x1b') == std::string::npos);
  CHECK_THAT(why, Catch::Contains("'\\x1b[2J") && Catch::Contains("(1004 bytes in all)'"));
  CHECK(why.size() < 300);
}

TEST_CASE("peer text is printed escaped and cut", "[job][identity]") {
  CHECK(printable("plain text") == "plain text");
  CHECK(printable("a\nb\x1b[31mc\xff") == "a\\x0ab\\x1b[31mc\\xff");
  CHECK(printable(std::string(500, 'y'), 10) == "yyyyyyyyyy... (500 bytes in all)");
}

TEST_CASE("a refusal's reason from an unproven server is printed escaped and cut",
          "[job][identity]") {
  auth_server server("token", "bootstrap");
  auth_client client("token", "bootstrap", "claim");
  client.answer(server.challenge());
  const std::string reason =
      client.verdict(auth_server::refuse("\x1b]0;owned\x07" + std::string(2000, 'z')));
  CHECK(reason.find('\x1b') == std::string::npos);
  CHECK(reason.find('\x07') == std::string::npos);
  CHECK_THAT(reason, Catch::StartsWith("\\x1b]0;owned\\x07zz"));
  CHECK(reason.size() < 400);
}

TEST_CASE("a rank of another job is refused and rank 0 admits its own", "[job][identity]") {
  auto opts = ranks(2, "job-a");
  auto intruder = opts[1];
  intruder.job_id = "job-b";
  std::string rank0_error = "did not run", intruder_error;
  std::thread rank0([&] {
    try {
      connect_bootstrap(resolve_bootstrap(opts[0], fake_env({})))->barrier();
      rank0_error.clear();
    } catch (const std::exception& e) {
      rank0_error = e.what();
    }
  });
  // Retries until rank 0 listens, then is refused: it holds the token but
  // belongs to another job.
  try {
    connect_bootstrap(resolve_bootstrap(intruder, fake_env({})));
  } catch (const std::exception& e) {
    intruder_error = e.what();
  }
  CHECK_THAT(intruder_error,
             Catch::Contains("this process belongs to job 'job-b', rank 0 runs job 'job-a'"));
  const auto own = join_ranks({opts[1]}, [](bootstrap& b) { b.barrier(); });
  rank0.join();
  CHECK(own[0] == "");
  CHECK(rank0_error == "");
}

TEST_CASE("ranks whose settings differ all fail naming the setting, before anything else",
          "[job][identity]") {
  auto opts = ranks(3, "");
  auto errors = join_ranks(opts, [](bootstrap& b) {
    auto mine = base();
    if (b.rank() == 2) mine[2].value = "11";
    agree_on_settings(b, mine);
  });
  for (auto& e : errors)
    CHECK(e ==
          "rank 2 was started with other settings than rank 0: --steps is '11' on rank 2 and '10' "
          "on rank 0 (every rank of a job takes the same flags)");
  auto same = join_ranks(ranks(2, ""), [](bootstrap& b) { agree_on_settings(b, base()); });
  CHECK(same == std::vector<std::string>(2));
}
