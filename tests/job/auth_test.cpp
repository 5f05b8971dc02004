#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "job/auth.hpp"
#include "job/bootstrap.hpp"
#include "core/error.hpp"

using namespace merak::job;

namespace {

std::string hex(const std::string& s) {
  std::string h;
  for (unsigned char c : s) h += fmt::format("{:02x}", c);
  return h;
}

}  // namespace

TEST_CASE("HMAC-SHA256 matches RFC 4231", "[job][auth]") {
  CHECK(hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST_CASE("client and server prove the token to each other without sending it", "[job][auth]") {
  const std::string token = "job-token-6f1c2a";
  auth_server s(token, "bootstrap");
  auth_client c(token, "bootstrap", "rank 3");
  const std::string hello = c.answer(s.challenge());
  CHECK(hello.find(token) == std::string::npos);
  CHECK(s.challenge().find(token) == std::string::npos);
  std::string why;
  REQUIRE(s.check(hello, why));
  CHECK(s.payload() == "rank 3");
  const std::string verdict = s.accept();
  CHECK(verdict.find(token) == std::string::npos);
  CHECK(c.verdict(verdict) == "");
  // Fresh nonces: two challenges differ.
  CHECK(auth_server(token, "bootstrap").challenge() != s.challenge());
}

TEST_CASE("a wrong token, a replayed hello or an edited claim is refused", "[job][auth]") {
  std::string why;
  {
    auth_server s("right", "bootstrap");
    auth_client c("wrong", "bootstrap", "rank 1");
    CHECK_FALSE(s.check(c.answer(s.challenge()), why));
    CHECK(why == "wrong job token");
    CHECK(s.payload().empty());
  }
  {
    auth_server first("t", "bootstrap");
    auth_client c("t", "bootstrap", "rank 1");
    const std::string hello = c.answer(first.challenge());
    auth_server second("t", "bootstrap");  // another connection, another nonce
    CHECK_FALSE(second.check(hello, why));
    CHECK(why == "wrong job token");
    std::string edited = hello;
    edited[8 + kauth_nonce + 4 + 5] ^= 1;  // "rank 1" -> "rank 0"
    CHECK_FALSE(first.check(edited, why));
  }
  {
    auth_server s("t", "bootstrap");
    CHECK_FALSE(s.check("", why));
    CHECK(why == "not a merak hello");
    auth_client c("t", "bootstrap", "x");
    std::string hello = c.answer(s.challenge());
    hello.pop_back();
    CHECK_FALSE(s.check(hello, why));
    CHECK(why == "malformed hello");
  }
}

TEST_CASE("a server that does not hold the token cannot pass for the job's", "[job][auth]") {
  auth_server rogue("guess", "bootstrap");
  auth_client c("t", "bootstrap", "rank 1");
  c.answer(rogue.challenge());
  // It accepts anyone, but its proof is made with the wrong key.
  std::string why;
  rogue.check(auth_client("guess", "bootstrap", "rank 1").answer(rogue.challenge()), why);
  CHECK_THAT(c.verdict(rogue.accept()), Catch::Contains("could not prove"));
  CHECK_THAT(c.verdict(std::string(1, '\1') + std::string(kauth_mac, 'x')),
             Catch::Contains("could not prove"));
  CHECK(c.verdict(auth_server::refuse("rank 1 already joined")) == "rank 1 already joined");
  CHECK(c.verdict("") == "empty verdict");
}

TEST_CASE("a client names the service it reached when it is not the one it wants", "[job][auth]") {
  auth_server svm("t", "svm");
  auth_client c("t", "bootstrap", "");
  CHECK_THROWS_WITH(c.answer(svm.challenge()), Catch::Contains("'svm' service, not 'bootstrap'"));
  CHECK_THROWS_WITH(c.answer("HTTP/1.1 200 OK"), Catch::Contains("not a merak service"));
  // A proof made for one service is refused by another.
  auth_server boot("t", "bootstrap");
  auth_client for_svm("t", "svm", "");
  std::string hello = for_svm.answer(svm.challenge());
  std::string why;
  CHECK_FALSE(boot.check(hello, why));
}

TEST_CASE("a token file must be private, one line and not empty", "[job][auth]") {
  const std::string path = "/tmp/merak-token-test-" + std::to_string(::getpid());
  auto write = [&](const std::string& text, mode_t mode) {
    std::remove(path.c_str());
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f);
    std::fputs(text.c_str(), f);
    std::fclose(f);
    ::chmod(path.c_str(), mode);
  };
  write("s3cret\n", 0600);
  CHECK(read_token_file(path) == "s3cret");
  write("s3cret", 0400);
  CHECK(read_token_file(path) == "s3cret");
  write("s3cret\n", 0644);
  CHECK_THROWS_WITH(read_token_file(path), Catch::Contains(path) && Catch::Contains("mode 0644") &&
                                               Catch::Contains("chmod 600"));
  write("\n", 0600);
  CHECK_THROWS_WITH(read_token_file(path), Catch::Contains("is empty"));
  write("a\nb\n", 0600);
  CHECK_THROWS_WITH(read_token_file(path), Catch::Contains("more than one line"));
  std::remove(path.c_str());
  CHECK_THROWS_WITH(read_token_file(path), Catch::Contains("cannot open the token file"));
  CHECK_THROWS_WITH(read_token_file("/tmp"), Catch::Contains("not a regular file"));
  // MERAK_JOB_TOKEN_FILE, when MERAK_JOB_TOKEN is not set.
  write("from-file\n", 0600);
  auto env = [&](const char* v) -> const char* {
    if (std::string(v) == "MERAK_JOB_TOKEN_FILE") return path.c_str();
    if (std::string(v) == "MASTER_PORT") return "4000";
    return nullptr;
  };
  bootstrap_options o;
  o.rank = 0, o.world_size = 2;
  CHECK(resolve_bootstrap(o, env).token == "from-file");
  std::remove(path.c_str());
}
