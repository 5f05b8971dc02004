// Tokenizers on small hand-built files: GPT-2's encoder.json + vocab.bpe and
// Hugging Face's tokenizer.json, with ids worked out by hand and BPE checked
// against openai/gpt-2's merge loop written out here; damaged files refused
// in one line naming the file and the field. The real vocabularies are
// compared with their own tools in tokenizer_reference_test.sh.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "model/text/bpe.hpp"
#include "model/text/regex.hpp"
#include "model/text/tokenizer.hpp"
#include "model/text/unicode.hpp"

using namespace merak;
using namespace merak::model::text;
using nlohmann::json;

namespace {

// A directory removed at the end of the test.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("merak-tokenizer-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& content) const {
    const auto p = path / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
};

// The byte-level spelling of raw bytes (encoder.json's keys).
std::string bl(const std::string& bytes) {
  return byte_level_encode(bytes);
}

// A byte-level vocabulary: byte b has id b, then `merged` tokens from 256 on.
json byte_vocabulary(const std::vector<std::string>& merged) {
  json v = json::object();
  for (int b = 0; b < 256; ++b) v[bl(std::string(1, char(b)))] = b;
  for (size_t i = 0; i < merged.size(); ++i) v[bl(merged[i])] = 256 + int(i);
  return v;
}

// "left right" in byte-level spelling.
std::string merge_line(const std::string& left, const std::string& right) {
  return bl(left) + " " + bl(right);
}

// The small GPT-2 vocabulary of most cases: he, ll, hell, hello, " w", and
// <|endoftext|> (ids 256..261).
struct gpt2_files {
  temp_dir dir;
  std::string vocab, merges;
  explicit gpt2_files(std::string merges_text = "") {
    vocab = dir.write("encoder.json",
                      byte_vocabulary({"he", "ll", "hell", "hello", " w", "<|endoftext|>"}).dump());
    if (merges_text.empty())
      merges_text = "#version: 0.2\n" + merge_line("h", "e") + "\n" + merge_line("l", "l") + "\n" +
                    merge_line("he", "ll") + "\n" + merge_line("hell", "o") + "\n" +
                    merge_line(" ", "w") + "\n";
    merges = dir.write("vocab.bpe", merges_text);
  }
};

// The message of the merak::error `f` throws ("" when it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the byte-level alphabet is GPT-2's bytes_to_unicode", "[tokenizer]") {
  CHECK(byte_to_code_point(' ') == 0x120);   // "Ġ"
  CHECK(byte_to_code_point('\n') == 0x10A);  // "Ċ"
  CHECK(byte_to_code_point('A') == 'A');
  CHECK(byte_to_code_point(0xAD) == 0x143);  // the last of the 68 remapped bytes
  std::set<char32_t> seen;
  std::string all;
  for (int b = 0; b < 256; ++b) {
    seen.insert(byte_to_code_point(uint8_t(b)));
    all += char(b);
  }
  CHECK(seen.size() == 256);
  CHECK(byte_level_decode(byte_level_encode(all)) == all);
  char32_t bad = 0;
  CHECK_FALSE(byte_level_decode("a\u00ADb", &bad));  // U+00AD is not in the alphabet
  CHECK(bad == 0xAD);
  CHECK_FALSE(byte_level_decode("\u4e00", &bad));
  CHECK(bad == 0x4E00);
  CHECK_FALSE(byte_level_decode("\xC1\x81", &bad));  // an overlong "A"
  CHECK(bad == 0xFFFD);
}

TEST_CASE("UTF-8 validation finds the first bad byte", "[tokenizer]") {
  CHECK_FALSE(first_invalid_utf8("plain, 日本語, 😀"));
  CHECK(first_invalid_utf8("ab\xC3") == 2u);            // truncated
  CHECK(first_invalid_utf8("a\xC0\x80") == 1u);         // overlong NUL
  CHECK(first_invalid_utf8("xy\xED\xA0\x80") == 2u);    // a surrogate
  CHECK(first_invalid_utf8("\xF4\x90\x80\x80") == 0u);  // above U+10FFFF
  CHECK(first_invalid_utf8("ok\x80") == 2u);            // a lone continuation byte
}

TEST_CASE("GPT-2's pattern splits words, numbers, contractions and space runs", "[tokenizer]") {
  unicode_regex re(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                   "test");
  const std::string text = "He's  été 42!\n\n x";
  std::vector<std::pair<size_t, size_t>> m;
  re.find_all(text, m);
  std::vector<std::string> pieces;
  for (auto [b, e] : m) pieces.push_back(text.substr(b, e - b));
  CHECK(pieces == std::vector<std::string>{"He", "'s", " ", " été", " 42", "!", "\n\n", " x"});
  CHECK_THROWS_WITH(unicode_regex("(unclosed", "the pattern"),
                    Catch::Contains("the pattern") && Catch::Contains("offset"));
}

TEST_CASE("GPT2BPETokenizer merges by rank and pre-splits like GPT-2", "[tokenizer]") {
  gpt2_files f;
  auto t = make_tokenizer({"GPT2BPETokenizer", f.vocab, f.merges, ""});
  CHECK(t->type_name() == "GPT2BPETokenizer");
  CHECK(t->vocab_size() == 262);
  CHECK(t->eod() == 261);
  // "hello" merges to one token; " world" only has " w".
  CHECK(t->encode("hello world") == std::vector<int32_t>{259, 260, 'o', 'r', 'l', 'd'});
  // "hel" stops at "he" + "l"; "ll" alone merges.
  CHECK(t->encode("hel") == std::vector<int32_t>{256, 'l'});
  // <|endoftext|> in the text is text, as in encoder.py.
  CHECK(t->encode("<|endoftext|>") ==
        std::vector<int32_t>{'<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>'});
  const std::string text = "hello, wörld\n\n  he'll\t日本 😀 \xE2\x80\x8F";
  CHECK(t->decode(t->encode(text)) == text);
  CHECK_THROWS_WITH(t->decode(std::vector<int32_t>{1, 262}),
                    Catch::Contains("id 262 at position 1"));
  CHECK_THROWS_WITH(t->encode("ok \xFF"), Catch::Contains("byte offset 3"));
}

TEST_CASE("equal ranks merge leftmost first", "[tokenizer]") {
  gpt2_files f("#version: 0.2\n" + merge_line("l", "l") + "\n");
  auto t = make_tokenizer({"GPT2BPETokenizer", f.vocab, f.merges, ""});
  CHECK(t->encode("lll") == std::vector<int32_t>{257, 'l'});
  CHECK(t->encode("llll") == std::vector<int32_t>{257, 257});
}

namespace {

// openai/gpt-2's bpe(): while some adjacent pair has a rank, merge every
// occurrence of the lowest-ranked pair, left to right.
std::vector<std::string> reference_bpe(
    const std::string& word, const std::map<std::pair<std::string, std::string>, int>& ranks) {
  std::vector<std::string> w;
  for (char c : word) w.push_back(std::string(1, c));
  while (w.size() > 1) {
    int best = INT32_MAX;
    std::pair<std::string, std::string> bigram;
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      auto it = ranks.find({w[i], w[i + 1]});
      if (it != ranks.end() && it->second < best) best = it->second, bigram = it->first;
    }
    if (best == INT32_MAX) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < w.size();) {
      if (i + 1 < w.size() && w[i] == bigram.first && w[i + 1] == bigram.second) {
        next.push_back(w[i] + w[i + 1]);
        i += 2;
      } else {
        next.push_back(w[i++]);
      }
    }
    w = std::move(next);
  }
  return w;
}

}  // namespace

TEST_CASE("BPE equals openai/gpt-2's merge loop on random merges and words", "[tokenizer]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    // Merges over {a, b, c} whose parts are made by earlier merges, as in
    // every published merge list.
    std::vector<std::string> tokens = {"a", "b", "c"};
    std::map<std::pair<std::string, std::string>, int> ranks;
    std::vector<std::pair<std::string, std::string>> merges;
    while (merges.size() < 60) {
      const auto& l = tokens[rng() % tokens.size()];
      const auto& r = tokens[rng() % tokens.size()];
      if (ranks.count({l, r}) || l.size() + r.size() > 12) continue;
      ranks[{l, r}] = int(merges.size());
      merges.push_back({l, r});
      if (std::find(tokens.begin(), tokens.end(), l + r) == tokens.end()) tokens.push_back(l + r);
    }
    std::unordered_map<std::string, int32_t> vocabulary;
    std::vector<int32_t> bytes(256);
    std::vector<std::string> names(256);
    for (int b = 0; b < 256; ++b) {
      vocabulary[std::string(1, char(b))] = b;
      bytes[size_t(b)] = b;
      names[size_t(b)] = std::string(1, char(b));
    }
    for (auto& tok : tokens)
      if (!vocabulary.count(tok)) {
        vocabulary[tok] = int32_t(names.size());
        names.push_back(tok);
      }
    std::vector<bpe_merge> resolved;
    for (auto& [l, r] : merges)
      resolved.push_back({vocabulary[l], vocabulary[r], vocabulary[l + r]});
    bpe_model model(bytes, vocabulary, resolved, false);
    for (int w = 0; w < 200; ++w) {
      std::string word;
      const size_t n = 2 + rng() % (w % 2 ? 120 : 40);
      for (size_t i = 0; i < n; ++i) word += char('a' + rng() % 3);
      std::vector<std::string> expected = reference_bpe(word, ranks);
      std::vector<int32_t> long_ids, short_ids;
      model.encode_long_word(word, long_ids);
      std::vector<std::string> got;
      for (int32_t id : long_ids) got.push_back(names[size_t(id)]);
      REQUIRE(got == expected);
      if (word.size() <= bpe_model::kshort_word) {
        model.encode_short_word(word, short_ids);
        REQUIRE(short_ids == long_ids);
      }
    }
  }
}

namespace {

// A Llama-3-shaped tokenizer.json over the small vocabulary: a Split with
// Llama 3's pattern, ByteLevel without regex, added tokens, ignore_merges.
json small_tokenizer_json() {
  json merges = json::array({merge_line("h", "e"), merge_line("l", "l"), merge_line("he", "ll"),
                             json::array({bl("hell"), bl("o")}), merge_line(" ", "w")});
  json vocab = byte_vocabulary({"he", "ll", "hell", "hello", " w", "wor"});  // "wor": no merge
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       json::array({{{"id", 262}, {"content", "<|end_of_text|>"}, {"special", true}},
                    {{"id", 263}, {"content", "<|x|>"}, {"special", true}},
                    {{"id", 264}, {"content", "<|x|>y"}, {"special", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Split"},
               {"pattern",
                {{"Regex",
                  R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", true},
               {"use_regex", false}}})}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"ignore_merges", true},
        {"vocab", vocab},
        {"merges", merges}}}};
}

}  // namespace

TEST_CASE("HuggingFaceTokenizer: Split, ByteLevel, added tokens, ignore_merges", "[tokenizer]") {
  temp_dir dir;
  const std::string path = dir.write("tokenizer.json", small_tokenizer_json().dump());
  auto t = make_tokenizer({"HuggingFaceTokenizer", "", "", path});
  CHECK(t->vocab_size() == 265);
  CHECK(t->eod() == 262);
  // Llama 3's pattern keeps the space with the word and splits digits by 3.
  CHECK(t->encode("hello 12345") == std::vector<int32_t>{259, ' ', '1', '2', '3', '4', '5'});
  // "wor" is a token no merge makes: ignore_merges takes it whole.
  CHECK(t->encode("wor") == std::vector<int32_t>{261});
  // Added tokens first, the longest at each place; "<|x|" is text.
  CHECK(t->encode("<|x|>y<|x|>z<|x|") == std::vector<int32_t>{264, 263, 'z', '<', '|', 'x', '|'});
  CHECK(t->encode("he<|end_of_text|>") == std::vector<int32_t>{256, 262});
  const std::string text = "hello<|x|> wor\r\n\n 日本 IT'S 1234567";
  CHECK(t->decode(t->encode(text)) == text);

  // ByteLevel with its own regex and a prefix space (GPT-2's tokenizer.json).
  json j = small_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  j["model"]["ignore_merges"] = false;
  auto g = make_tokenizer({"HuggingFaceTokenizer", "", "", dir.write("g.json", j.dump())});
  CHECK(g->encode("hello") == std::vector<int32_t>{' ', 259});
  CHECK(g->encode("wor") == std::vector<int32_t>{260, 'o', 'r'});
}

TEST_CASE("Split behaviours cut as Hugging Face's do", "[tokenizer]") {
  temp_dir dir;
  auto encode_with = [&](const std::string& behavior, bool invert, const std::string& text) {
    json j = small_tokenizer_json();
    j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Split"},
                                              {"pattern", {{"String", "-"}}},
                                              {"behavior", behavior},
                                              {"invert", invert}};
    j["model"]["ignore_merges"] = false;
    auto t = make_tokenizer({"HuggingFaceTokenizer", "", "", dir.write("s.json", j.dump())});
    return t->encode(text);
  };
  // "he-ll--he": pieces decide whether "he" and "ll" can merge across '-'.
  CHECK(encode_with("Isolated", false, "he-ll") == std::vector<int32_t>{256, '-', 257});
  CHECK(encode_with("Removed", false, "he-ll") == std::vector<int32_t>{256, 257});
  CHECK(encode_with("MergedWithPrevious", false, "ll-he") == std::vector<int32_t>{257, '-', 256});
  CHECK(encode_with("Contiguous", false, "he--ll") == std::vector<int32_t>{256, '-', '-', 257});
  // Inverted: '-' stretches are the content, the rest the delimiters (removed).
  CHECK(encode_with("Removed", true, "he-ll") == std::vector<int32_t>{'-'});
  // MergedWithNext: "-he" then "ll": the merge of he+ll cannot happen.
  CHECK(encode_with("MergedWithNext", false, "hell-hell") == std::vector<int32_t>{258, '-', 258});
}

TEST_CASE("damaged tokenizer.json files are refused in one line naming file and field",
          "[tokenizer]") {
  temp_dir dir;
  struct damage {
    std::function<void(json&)> edit;
    std::string field;
  };
  const std::vector<damage> cases = {
      {[](json& j) { j["model"]["type"] = "Unigram"; }, "model.type"},
      {[](json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout"},
      {[](json& j) { j["model"].erase("vocab"); }, "model.vocab"},
      {[](json& j) { j["model"]["vocab"]["x"] = 99999; }, "model.vocab"},
      {[](json& j) { j["model"]["vocab"][bl("he")] = 1; }, "model.vocab"},    // an id twice
      {[](json& j) { j["model"]["vocab"]["\u4e00"] = 265; }, "model.vocab"},  // not byte-level
      {[](json& j) {                                                          // a byte missing
         j["model"]["vocab"].erase(bl("\n"));
         j["model"]["vocab"]["zz"] = 10;
       },
       "model.vocab"},
      {[](json& j) { j["model"]["merges"][2] = "nospace"; }, "model.merges[2]"},
      {[](json& j) { j["model"]["merges"][1] = merge_line("q", "q"); }, "model.merges[1]"},
      {[](json& j) { j["model"]["merges"][0] = 7; }, "model.merges[0]"},
      {[](json& j) { j["model"]["merges"].push_back(merge_line("h", "e")); }, "model.merges"},
      {[](json& j) {
         j["normalizer"] = {{"type", "NFC"}};
       },
       "normalizer"},
      {[](json& j) {
         j["decoder"] = {{"type", "Metaspace"}};
       },
       "decoder.type"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["type"] = "Digits"; },
       "pre_tokenizer.pretokenizers[0].type"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(["; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
       "pre_tokenizer.pretokenizers[0].behavior"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); }, "pre_tokenizer"},
      {[](json& j) { j["pre_tokenizer"] = nullptr; }, "pre_tokenizer"},
      {[](json& j) { j["added_tokens"][1]["id"] = "263"; }, "added_tokens[1].id"},
      {[](json& j) { j["added_tokens"][1]["id"] = 262; }, "added_tokens[1].id"},
      {[](json& j) { j["added_tokens"][0]["id"] = 5; }, "added_tokens[0].id"},  // byte 5's id
      {[](json& j) { j["added_tokens"][2]["lstrip"] = true; }, "added_tokens[2].lstrip"},
      {[](json& j) { j["added_tokens"][0]["content"] = ""; }, "added_tokens[0].content"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    json j = small_tokenizer_json();
    cases[i].edit(j);
    const std::string path = dir.write("bad" + std::to_string(i) + ".json", j.dump());
    const std::string message = error_of([&] {
      make_tokenizer({"HuggingFaceTokenizer", "", "", path});
    });
    INFO("case " << i << ": " << message);
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find(cases[i].field) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
  // Not JSON, cut short, missing, a directory.
  const std::string whole = small_tokenizer_json().dump();
  for (const std::string& bad : {std::string("{\"model\": "), whole.substr(0, whole.size() / 2),
                                 std::string("[1, 2]"), std::string()}) {
    const std::string path = dir.write("cut.json", bad);
    const std::string message = error_of([&] {
      make_tokenizer({"HuggingFaceTokenizer", "", "", path});
    });
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
  CHECK_THROWS_WITH(make_tokenizer({"HuggingFaceTokenizer", "", "", (dir.path / "none").string()}),
                    Catch::Contains("--tokenizer-model") && Catch::Contains("none"));
  CHECK_THROWS_WITH(make_tokenizer({"HuggingFaceTokenizer", "", "", dir.path.string()}),
                    Catch::Contains("not a regular file"));
}

TEST_CASE("damaged encoder.json and vocab.bpe are refused naming file and line", "[tokenizer]") {
  gpt2_files good;
  struct damage {
    std::string vocab, merges, expected;
  };
  const std::vector<damage> cases = {
      {"{\"a\": 0", "", "not valid JSON at byte"},
      {"[\"a\"]", "", "expected an object"},
      {"{\"a\": \"zero\"}", "", "is not an integer"},
      {"{\"a\": -1}", "", "outside [0, 1)"},
      {"{\"a\": 0, \"b\": 1}", "#version: 0.2\n", "no token for byte 0x00"},
      {"", "#version: 0.2\n" + merge_line("h", "e") + " x\n", "line 2: expected two tokens"},
      {"", "#version: 0.2\n" + merge_line("h", "e") + "\n" + merge_line("q", "z") + "\n",
       "line 3 (against --vocab-file): the merged token \"qz\" is not in the vocabulary"},
      {"", "#version: 0.2\n\n" + merge_line("h", "e") + "\n", "line 3: a merge after a blank line"},
      {"", "#version: 0.2\n" + merge_line("h", "e") + "\n" + merge_line("h", "e") + "\n",
       "merge 1 repeats merge 0"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    temp_dir dir;
    const std::string vocab =
        cases[i].vocab.empty() ? good.vocab : dir.write("encoder.json", cases[i].vocab);
    const std::string merges =
        cases[i].merges.empty() ? good.merges : dir.write("vocab.bpe", cases[i].merges);
    const std::string message = error_of([&] {
      make_tokenizer({"GPT2BPETokenizer", vocab, merges, ""});
    });
    INFO("case " << i << ": " << message);
    CHECK(message.find(cases[i].expected) != std::string::npos);
    CHECK(message.find(cases[i].vocab.empty() ? merges : vocab) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
  CHECK_THROWS_WITH(make_tokenizer({"GPT2BPETokenizer", good.vocab, "", ""}),
                    Catch::Contains("--merge-file"));
  CHECK_THROWS_WITH(make_tokenizer({"GPT2Tokenizer", "", "", ""}),
                    Catch::Contains("unknown tokenizer 'GPT2Tokenizer'"));
}

TEST_CASE("a damaged SentencePiece model is refused naming the file", "[tokenizer]") {
  temp_dir dir;
  const std::string path = dir.write("x.model", std::string("\x0a\xff\xff\xff\xff\x0f junk", 12));
  CHECK_THROWS_WITH(make_tokenizer({"SentencePieceTokenizer", "", "", path}),
                    Catch::Contains(path) && Catch::Contains("not a SentencePiece model"));
}

TEST_CASE("one tokenizer encodes from many threads at once", "[tokenizer]") {
  temp_dir dir;
  auto t = make_tokenizer(
      {"HuggingFaceTokenizer", "", "", dir.write("t.json", small_tokenizer_json().dump())});
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "hello <|x|>wor " + std::to_string(i) + " he'll\n";
  const std::vector<int32_t> expected = t->encode(text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) threads.emplace_back([&, k] { got[size_t(k)] = t->encode(text); });
  for (auto& th : threads) th.join();
  for (auto& g : got) CHECK(g == expected);
}
