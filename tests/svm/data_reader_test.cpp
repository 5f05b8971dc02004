#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "svm/data_reader.hpp"

using namespace merak::svm;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / ("merak_svm_" + name);
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace

TEST_CASE("LIBSVM text is read into a sparse matrix", "[svm][io]") {
  auto path = write_temp("ok.libsvm", "+1 1:0.5 3:-2\n-1 2:1e-1\n\n0 4:3 # comment\n");
  dataset d = read_libsvm(path);
  REQUIRE(d.x.is_sparse());
  CHECK(d.rows() == 3);
  CHECK(d.cols() == 4);
  CHECK(d.x.nnz() == 4);
  CHECK(d.y[0] == 1);
  CHECK(d.y[1] == -1);
  CHECK(d.y[2] == -1);  // label 0 reads as -1
  CHECK(d.x.sparse().coeff(0, 2) == -2);
  CHECK(d.x.sparse().coeff(1, 1) == Approx(0.1));
  CHECK(read_libsvm(path, 10).cols() == 10);
}

TEST_CASE("CSV is read into a dense matrix", "[svm][io]") {
  auto path = write_temp("ok.csv", "1,0.5,2\n-1, 3 ,4\r\n");
  dataset d = read_csv(path);
  REQUIRE(!d.x.is_sparse());
  CHECK(d.rows() == 2);
  CHECK(d.cols() == 2);
  CHECK(d.x.dense()(1, 0) == 3);
  CHECK(parse_data_format("auto", "a.csv") == data_format::csv);
  CHECK(parse_data_format("auto", "a.libsvm") == data_format::libsvm);
}

TEST_CASE("a leading UTF-8 byte-order mark is not part of the first sample", "[svm][io]") {
  dataset csv = read_csv(write_temp("bom.csv", "\xEF\xBB\xBF-1,0.5,2\n1,3,4\n"));
  CHECK(csv.rows() == 2);
  CHECK(csv.y[0] == -1);
  CHECK(csv.x.dense()(0, 1) == 2);
  dataset libsvm = read_libsvm(write_temp("bom.libsvm", "\xEF\xBB\xBF-1 1:0.5\n+1 2:3\n"));
  CHECK(libsvm.rows() == 2);
  CHECK(libsvm.y[0] == -1);
}

TEST_CASE("numbers read as strtod reads them, bit for bit", "[svm][io]") {
  // The reader parses with from_chars (no copy, no locale): the same doubles
  // as strtod for every decimal form, a leading '+', and underflow to a
  // subnormal or zero (kept, as strtod keeps it).
  const char* forms[] = {"0.1",
                         "+2.5",
                         "-3",
                         "1e-1",
                         "1E+05",
                         ".5",
                         "5.",
                         "-0",
                         "0.30000000000000004",
                         "4.9e-324",
                         "2.2250738585072011e-308",
                         "1.7976931348623157e308",
                         "123456789012345678901234567890"};
  std::string text;
  for (const char* f : forms) text += std::string("1,") + f + "\n";
  dataset d = read_csv(write_temp("forms.csv", text));
  REQUIRE(d.rows() == int64_t(std::size(forms)));
  for (size_t i = 0; i < std::size(forms); ++i) {
    INFO(forms[i]);
    CHECK(d.x.dense()(int64_t(i), 0) == std::strtod(forms[i], nullptr));
  }
  dataset u = read_libsvm(write_temp("under.libsvm", "+1 1:1e-400 2:+1e-310\n"));
  CHECK(u.x.nnz() == 1);  // 1e-400 is zero; 1e-310 a subnormal
  CHECK(u.x.sparse().coeff(0, 1) == std::strtod("1e-310", nullptr));
}

TEST_CASE("malformed LIBSVM lines are errors naming the file and line", "[svm][io]") {
  struct c {
    const char* text;
    const char* message;
  };
  const c cases[] = {
      {"+1 1:1\n+1 2:x\n", ":2: feature value 'x' is not a number"},
      {"+1 1:1\n\n+2 1:1\n", ":3: label '+2' is not +1 or -1"},
      {"abc 1:1\n", ":1: label 'abc' is not a number"},
      {"+1 3:1 2:1\n", ":1: feature index 2 does not follow 3"},
      {"+1 1:1 1:2\n", ":1: feature index 1 does not follow 1"},
      {"-1 0:1\n", ":1: feature index 0 is below 1"},
      {"-1 1.5:1\n", ":1: feature index '1.5' is not an integer"},
      {"-1 1:1\n-1 7\n", ":2: '7' is not index:value"},
      {"-1 1:inf\n", ":1: feature value 'inf' is not finite"},
      {"-1 1:\n", ":1: empty feature value"},
      {"+1 9223372036854775807:1\n", ":1: feature index 9223372036854775807 is above the largest"},
      {"+1 1:1\n+1 2147483648:1\n", ":2: feature index 2147483648 is above the largest"},
      {"+1 99999999999999999999:1\n", ":1: feature index '99999999999999999999' is not an"},
  };
  int k = 0;
  for (const auto& t : cases) {
    auto path = write_temp("bad" + std::to_string(k++) + ".libsvm", t.text);
    INFO(t.text);
    CHECK_THROWS_WITH(read_libsvm(path), Catch::Contains(path + t.message));
  }
  CHECK_THROWS_WITH(read_libsvm("/nonexistent/x.libsvm"),
                    Catch::Contains("cannot open data file '/nonexistent/x.libsvm'"));
  CHECK_THROWS_WITH(read_libsvm(write_temp("empty.libsvm", "\n\n")),
                    Catch::Contains("holds no samples"));
  // A directory is named as one, for either format.
  const auto dir = std::filesystem::path(write_temp("d.libsvm", "")).parent_path().string();
  CHECK_THROWS_WITH(read_libsvm(dir), Catch::Contains("'" + dir + "' is a directory"));
  CHECK_THROWS_WITH(read_csv(dir), Catch::Contains("'" + dir + "' is a directory"));
}

TEST_CASE("a CSV header row is skipped and a file in the wrong format is named briefly",
          "[svm][io]") {
  dataset d = read_csv(write_temp("header.csv", "label,height,weight\n1,0.5,2\n-1,3,4\n"));
  CHECK(d.rows() == 2);
  CHECK(d.cols() == 2);
  CHECK(d.y[1] == -1);
  CHECK_THROWS_WITH(read_csv(write_temp("only_header.csv", "y,x\n")),
                    Catch::Contains("holds no samples"));
  // A wide CSV read as LIBSVM text: said in one short line, not echoed.
  std::string wide = "1";
  for (int j = 0; j < 5000; ++j) wide += ",0.123456";
  auto path = write_temp("wide.data", wide + "\n");
  try {
    read_libsvm(path);
    FAIL("no error");
  } catch (const merak::error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains(path + ":1: commas and no index:value pairs") &&
                         Catch::Contains("--format csv"));
    CHECK(what.size() < 300);
  }
  // A long field in an error is cut to 40 characters and its length.
  path = write_temp("long.libsvm", "+1 " + std::string(10000, '7') + "\n");
  try {
    read_libsvm(path);
    FAIL("no error");
  } catch (const merak::error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("'" + std::string(40, '7') +
                                     "...' (10000 bytes) is not "
                                     "index:value"));
    CHECK(what.size() < 300);
  }
}

TEST_CASE("malformed CSV lines are errors naming the file, line and field", "[svm][io]") {
  struct c {
    const char* text;
    const char* message;
  };
  const c cases[] = {
      {"1,2,3\n-1,2\n", ":2: 2 fields where earlier lines (or the header) have 3"},
      {"label,a,b\n-1,2\n", ":2: 2 fields where earlier lines (or the header) have 3"},
      {"1,2,3\n-1,2,abc\n", ":2: field 3 'abc' is not a number"},
      {"1,2,,3\n", ":1: empty field 3"},
      {"1\n", ":1: a label but no features"},
      {"1,1\nyes,1\n", ":2: label 'yes' is not a number"},
      {"1,2\n3,4\n", ":2: label '3' is not +1 or -1"},
  };
  int k = 0;
  for (const auto& t : cases) {
    auto path = write_temp("bad" + std::to_string(k++) + ".csv", t.text);
    INFO(t.text);
    CHECK_THROWS_WITH(read_csv(path), Catch::Contains(path + t.message));
  }
}
