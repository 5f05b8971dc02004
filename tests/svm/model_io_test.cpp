#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/files.hpp"
#include "svm/linear_model.hpp"

using namespace merak::svm;

namespace {

linear_model sample_model() {
  linear_model m;
  m.w = Eigen::VectorXd::Zero(5);
  m.w[1] = 0.125;
  m.w[4] = -3.0000000000000004;  // needs all 17 digits
  m.b = 0.1;
  m.pen = {penalty_kind::scad, 0.05, 3.7};
  m.objective = 0.4;
  m.iterations = 77;
  return m;
}

// Hand-written files carry no checksum: their parse errors are tested with
// verification off.
struct checksums_off {
  checksums_off() { merak::set_verify_checksums(false); }
  ~checksums_off() { merak::set_verify_checksums(true); }
};

std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("merak_svm_model_" + name)).string();
}

}  // namespace

TEST_CASE("models round-trip exactly through text and JSON", "[svm][io]") {
  for (const char* name : {"m.txt", "m.json"}) {
    linear_model m = sample_model();
    write_model(m, temp(name));
    linear_model r = read_model(temp(name));
    INFO(name);
    CHECK(r.w == m.w);
    CHECK(r.b == m.b);
    CHECK(r.pen.kind == m.pen.kind);
    CHECK(r.pen.lambda == m.pen.lambda);
    CHECK(r.pen.theta == m.pen.theta);
    CHECK(r.iterations == 77);
  }
  std::ifstream in(temp("m.txt"));
  std::string first;
  std::getline(in, first);
  CHECK(first == "solver_type L1R_L2LOSS_SVC");  // a solver LIBLINEAR's predict accepts
}

TEST_CASE("text models of earlier merak versions and of LIBLINEAR read", "[svm][io]") {
  checksums_off off;
  auto write = [](const std::string& name, const std::string& text) {
    std::ofstream(temp(name)) << text;
    return temp(name);
  };
  // merak's fields before `w`, merak's own solver name.
  linear_model m = read_model(write("old.txt",
                                    "solver_type ADMM_mcp\nnr_class 2\nlabel 1 -1\nnr_feature "
                                    "2\nbias 1\npenalty mcp\nlambda 0.02\ntheta 3\nobjective "
                                    "0.5\niterations 9\nw\n0.5\n-0.25\n0.125\n"));
  CHECK(m.pen.kind == penalty_kind::mcp);
  CHECK(m.pen.lambda == 0.02);
  CHECK(m.iterations == 9);
  CHECK(m.w[1] == -0.25);
  CHECK(m.b == 0.125);
  // LIBLINEAR's: classes in the order -1, 1 (a positive value means -1) and
  // a bias feature of value 2: the same decision as w = -w, b = -2 w_bias.
  m = read_model(write("liblinear.txt",
                       "solver_type L2R_L2LOSS_SVC_DUAL\nnr_class 2\nlabel -1 1\nnr_feature "
                       "2\nbias 2\nw\n0.5 \n-0.25 \n0.125 \n"));
  CHECK(m.w[0] == -0.5);
  CHECK(m.w[1] == 0.25);
  CHECK(m.b == -0.25);
  // Without a bias (bias -1): no bias weight.
  m = read_model(write("nobias.txt", "nr_feature 2\nbias -1\nw\n1\n2\n"));
  CHECK(m.b == 0);
  CHECK(m.w[1] == 2);
  CHECK_THROWS_WITH(read_model(write("long.txt", "nr_feature 1\nbias 1\nw\n1\n2\n3\n")),
                    Catch::Contains("more than the 2 weights of nr_feature 1 plus the bias"));
  CHECK_THROWS_WITH(read_model(write("after.txt", "nr_feature 1\nbias 1\nw\n1\n2\ncolour x\n")),
                    Catch::Contains("line 6: unknown key 'colour' after the weights"));
  CHECK_THROWS_WITH(read_model(write("three.txt", "nr_class 3\nnr_feature 1\nw\n1\n")),
                    Catch::Contains("nr_class must be 2"));
}

TEST_CASE("broken model files are refused with the file and line named", "[svm][io]") {
  checksums_off off;
  auto write = [](const std::string& name, const std::string& text) {
    std::ofstream(temp(name)) << text;
    return temp(name);
  };
  auto p = write("short.txt", "nr_feature 3\nbias 1\nw\n1\n2\n");
  CHECK_THROWS_WITH(read_model(p), Catch::Contains("2 weights after 'w', expected 4"));
  p = write("badnum.txt", "nr_feature 1\nbias 1\nw\n1\nx\n");
  CHECK_THROWS_WITH(read_model(p), Catch::Contains(p + "', line 5: 'x' is not a number"));
  p = write("key.txt", "nr_feature 1\ncolour red\nw\n1\n");
  CHECK_THROWS_WITH(read_model(p), Catch::Contains("line 2: unknown key 'colour'"));
  p = write("bad.json", "{\"format\": \"merak-svm-model\", \"penalty\": \"l1\"}");
  CHECK_THROWS_WITH(read_model(p), Catch::Contains(p));
  p = write(
      "theta.json",
      R"({"format":"merak-svm-model","penalty":"mcp","lambda":0.1,"theta":0.5,"bias":0,"weights":[1]})");
  CHECK_THROWS_WITH(read_model(p), Catch::Contains("MCP gamma"));
  CHECK_THROWS_WITH(read_model(temp("none")), Catch::Contains("cannot open model file"));
  // Counts are whole numbers in range, refused rather than converted (an
  // nr_feature of 2e49 converted to an integer is undefined behaviour).
  p = write("huge.txt", "nr_feature 22222222222222222222222222222222222222222222222213\nw\n");
  CHECK_THROWS_WITH(read_model(p), Catch::Contains("line 1: nr_feature is '2222"));
  p = write("half.txt", "nr_feature 1\niterations 2.5\nw\n1\n");
  CHECK_THROWS_WITH(read_model(p), Catch::Contains("line 2: iterations is '2.5', not a whole"));
  p = write(
      "huge.json",
      R"({"format":"merak-svm-model","penalty":"l1","lambda":0.1,"bias":0,"weights":[1],"features":1e300})");
  CHECK_THROWS_WITH(read_model(p), Catch::Contains("key 'features' is 1e+300, not a whole number"));
  p = write(
      "iter.json",
      R"({"format":"merak-svm-model","penalty":"l1","lambda":0.1,"bias":0,"weights":[1],"iterations":-4})");
  CHECK_THROWS_WITH(read_model(p), Catch::Contains("key 'iterations' is -4"));
}

TEST_CASE("a model is written through a new temporary file, never through a planted link",
          "[svm][io]") {
  const auto target = temp("precious");
  { std::ofstream(target) << "keep me"; }
  const auto path = temp("linked.json");
  std::filesystem::remove(path + ".tmp");
  std::filesystem::create_symlink(target, path + ".tmp");
  write_model(sample_model(), path);
  std::ifstream in(target);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(kept == "keep me");
  CHECK(read_model(path).w == sample_model().w);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove(target);
  std::filesystem::remove(path);
}

TEST_CASE("a model file's checksum covers every byte and is required", "[svm][io]") {
  for (const char* name : {"sum.txt", "sum.json"}) {
    INFO(name);
    const auto path = temp(name);
    write_model(sample_model(), path);
    std::string text;
    {
      std::ifstream in(path);
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    CHECK(text.find("crc32c:00000000") == std::string::npos);
    // One weight's digit changed: still a valid model, caught by the checksum.
    std::string edited = text;
    const size_t at = edited.find("0.125");
    REQUIRE(at != std::string::npos);
    edited[at + 4] = '6';
    { std::ofstream(path) << edited; }
    CHECK_THROWS_WITH(read_model(path), Catch::Contains(path) && Catch::Contains("is corrupted") &&
                                            Catch::Contains("--skip-checksum"));
    {
      checksums_off off;
      CHECK(read_model(path).w[1] == 0.126);
    }
    // Without its checksum: refused, naming the way out.
    std::string bare = text;
    const bool json = std::string(name).ends_with(".json");
    if (json) {
      const size_t k = bare.find(",\"checksum\"");
      bare.erase(k, bare.find('"', bare.find("crc32c:")) + 1 - k);
    } else {
      bare.erase(bare.rfind("checksum "));
    }
    { std::ofstream(path) << bare; }
    CHECK_THROWS_WITH(read_model(path), Catch::Contains("has no checksum"));
    checksums_off off;
    CHECK(read_model(path).w == sample_model().w);
    std::filesystem::remove(path);
  }
}
