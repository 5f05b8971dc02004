// `merak data prepare` and `merak data inspect`: Megatron indexed datasets
// (docs/datasets.md).
//
//   merak data prepare --input FILE... --output-prefix P [tokenizer flags]
//                      [--append-eod] [--workers N] [--json-keys K...] [--json]
//   merak data inspect PREFIX [--json] [--ids]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>

#include <nlohmann/json.hpp>

#include "apps/commands.hpp"
#include "apps/tokenizer_flags.hpp"
#include "core/error.hpp"
#include "model/text/indexed_dataset.hpp"
#include "model/text/prepare.hpp"
#include "model/text/token_file.hpp"

namespace merak::apps {
namespace {

struct prepare_flags {
  model::text::prepare_options options;
  model::text::tokenizer_options tokenizer;
  bool json = false;
};

int run_prepare(prepare_flags& f) {
  auto tok = model::text::make_tokenizer(f.tokenizer);
  double last = -1;
  f.options.progress = [&](const model::text::prepare_progress& p) {
    if (p.seconds - last < 1 && p.bytes_read < p.bytes_total) return;
    last = p.seconds;
    const double mb = double(p.bytes_read) / 1e6;
    std::fprintf(stderr,
                 "prepare: %.1f of %.1f MB (%.0f%%), %lld documents, %lld tokens, %.1f MB/s\n", mb,
                 double(p.bytes_total) / 1e6,
                 p.bytes_total > 0 ? 100.0 * double(p.bytes_read) / double(p.bytes_total) : 100.0,
                 static_cast<long long>(p.documents), static_cast<long long>(p.tokens),
                 p.seconds > 0 ? mb / p.seconds : 0.0);
  };
  const auto r = model::text::prepare_dataset(f.options, *tok);
  const auto& t = r.totals;
  if (f.json) {
    nlohmann::json out = {
        {"outputs", r.outputs},
        {"documents", t.documents},
        {"tokens", t.tokens},
        {"input_bytes", t.bytes_total},
        {"workers", f.options.workers},
        {"tokenizer", tok->type_name()},
        {"seconds", t.seconds},
        {"mb_per_s", t.seconds > 0 ? double(t.bytes_total) / 1e6 / t.seconds : 0}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    for (const auto& p : r.outputs) std::printf("%s.bin %s.idx\n", p.c_str(), p.c_str());
  }
  return 0;
}

struct inspect_flags {
  std::string prefix;
  bool json = false, ids = false;
};

int run_inspect(const inspect_flags& f) {
  const auto docs = model::text::open_documents(f.prefix);
  nlohmann::json out = {{"path", f.prefix}};
  if (const auto* d = dynamic_cast<const model::text::indexed_dataset*>(docs.get())) {
    out["format"] = "MMIDIDX";
    out["version"] = 1;
    out["dtype"] = model::text::dtype_name(d->dtype());
    out["sequences"] = d->sequences();
  } else if (const auto* t = dynamic_cast<const model::text::token_file*>(docs.get())) {
    out["format"] = "llm.c";
    out["version"] = t->version();
    out["dtype"] = t->version() == 1 ? "uint16" : "uint32";
  }
  // One pass over the tokens, a document at a time.
  constexpr int64_t kAnyId = int64_t(std::numeric_limits<int32_t>::max()) + 1;
  int64_t tokens = 0, lo = std::numeric_limits<int64_t>::max(), hi = -1;
  nlohmann::json all_ids = nlohmann::json::array();
  std::vector<int32_t> buf;
  for (int64_t d = 0; d < docs->documents(); ++d) {
    buf.resize(size_t(docs->document_tokens(d)));
    docs->read(d, 0, int64_t(buf.size()), buf.data(), kAnyId);
    tokens += int64_t(buf.size());
    for (int32_t id : buf) {
      lo = std::min<int64_t>(lo, id);
      hi = std::max<int64_t>(hi, id);
    }
    if (f.ids) all_ids.push_back(buf);
  }
  out["documents"] = docs->documents();
  out["tokens"] = tokens;
  out["min_id"] = tokens > 0 ? nlohmann::json(lo) : nlohmann::json(nullptr);
  out["max_id"] = tokens > 0 ? nlohmann::json(hi) : nlohmann::json(nullptr);
  if (f.ids) out["ids"] = std::move(all_ids);
  if (f.json) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("%s: %s v%d, dtype %s\n", f.prefix.c_str(), out["format"].get<std::string>().c_str(),
              out["version"].get<int>(), out["dtype"].get<std::string>().c_str());
  std::printf("documents %lld, tokens %lld", static_cast<long long>(docs->documents()),
              static_cast<long long>(tokens));
  if (tokens > 0)
    std::printf(", ids %lld..%lld", static_cast<long long>(lo), static_cast<long long>(hi));
  std::printf("\n");
  return 0;
}

}  // namespace

std::vector<subcommand> add_dataset_commands(CLI::App& data) {
  std::vector<subcommand> runs;
  auto pf = std::make_shared<prepare_flags>();
  auto* prepare = data.add_subcommand(
      "prepare",
      "Tokenize text or JSONL into Megatron's indexed dataset PREFIX_KEY_document.bin/.idx");
  prepare
      ->add_option("--input", pf->options.inputs,
                   "Plain-text files (each a document) or JSONL files (*.jsonl, *.json: one "
                   "object per line)")
      ->required()
      ->expected(1, -1);
  prepare
      ->add_option("--output-prefix", pf->options.output_prefix,
                   "Output prefix: writes PREFIX_KEY_document.bin/.idx")
      ->required();
  prepare->add_option("--json-keys", pf->options.json_keys, "JSONL keys to read, one dataset each")
      ->expected(1, -1)
      ->capture_default_str();
  prepare->add_flag("--append-eod", pf->options.append_eod,
                    "Append the tokenizer's end-of-document id to every document");
  prepare->add_option("--workers", pf->options.workers, "Tokenizing threads")
      ->capture_default_str();
  prepare->add_flag("--json", pf->json, "Print the totals and timing as one JSON object");
  add_tokenizer_flags(*prepare, pf->tokenizer);
  runs.push_back({prepare, [pf] { return run_prepare(*pf); }});

  auto inf = std::make_shared<inspect_flags>();
  auto* inspect = data.add_subcommand(
      "inspect", "Print an indexed dataset's (or llm.c file's) documents, tokens, dtype and ids");
  inspect->add_option("prefix", inf->prefix, "PREFIX of PREFIX.idx/.bin, or an llm.c .bin file")
      ->required();
  inspect->add_flag("--json", inf->json, "One JSON object");
  inspect->add_flag("--ids", inf->ids, "With --json: every document's ids");
  runs.push_back({inspect, [inf] { return run_inspect(*inf); }});
  return runs;
}

}  // namespace merak::apps
