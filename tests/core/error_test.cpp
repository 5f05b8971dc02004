#include <catch2/catch.hpp>

#include <string>

#include "core/error.hpp"

using namespace merak;

TEST_CASE("quoted_cut keeps short values and cuts long ones with their size", "[core]") {
  CHECK(quoted_cut("1f1b") == "1f1b");
  CHECK(quoted_cut(std::string(80, 'a')) == std::string(80, 'a'));
  CHECK(quoted_cut(std::string(1000000, 'a')) == std::string(80, 'a') + "... (1000000 bytes)");
  // Never half a UTF-8 character: "é" is 2 bytes.
  std::string accents;
  for (int i = 0; i < 50; ++i) accents += "\xc3\xa9";
  CHECK(quoted_cut(accents, 5) == "\xc3\xa9\xc3\xa9... (100 bytes)");
}

TEST_CASE("error_line escapes control characters and cuts the middle", "[core]") {
  CHECK(error_line("bad\nline\x1b[31m") == "bad\\x0aline\\x1b[31m");
  const std::string value(100000, 'a');
  const std::string line = error_line("unknown schedule '" + value + "' (expected 1f1b)");
  CHECK(line.size() < 450);
  CHECK(line.rfind("unknown schedule 'aaa", 0) == 0);
  CHECK(line.find("bytes cut]") != std::string::npos);
  CHECK(line.substr(line.size() - 17) == "' (expected 1f1b)");
  CHECK(error_line("short") == "short");
}
