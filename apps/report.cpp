#include "apps/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.hpp"

namespace merak::apps {
namespace fs = std::filesystem;
namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("cannot read '{}'", p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

struct series {
  std::string name, color;
  std::vector<double> x, y;
};

// A line chart of `s` (x: step) as an <svg id=ID>; data-last holds each
// series' last value.
std::string line_chart(const std::string& id, const std::string& title,
                       const std::vector<series>& s) {
  constexpr double W = 720, H = 260, L = 64, R = 16, T = 28, B = 36;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (auto& v : s)
    for (size_t i = 0; i < v.x.size(); ++i) {
      x0 = std::min(x0, v.x[i]), x1 = std::max(x1, v.x[i]);
      y0 = std::min(y0, v.y[i]), y1 = std::max(y1, v.y[i]);
    }
  std::string out =
      fmt::format("<svg id=\"{}\" class=\"chart\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\"",
                  id, W, H, W, H);
  for (auto& v : s)
    if (!v.y.empty())
      out += fmt::format(" data-{}-points=\"{}\" data-{}-last=\"{:.6g}\"", v.name, v.y.size(),
                         v.name, v.y.back());
  out += fmt::format("><text x=\"{}\" y=\"18\" class=\"title\">{}</text>", L, escape(title));
  if (!std::isfinite(x0)) return out + "<text x=\"64\" y=\"120\">no data</text></svg>";
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return T + (y1 - y) / (y1 - y0) * (H - T - B); };
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"frame\"/>", L, T,
                     W - L - R, H - T - B);
  out += fmt::format("<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">{:.4g}</text>",
                     L - 4, T + 4, y1);
  out += fmt::format("<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">{:.4g}</text>",
                     L - 4, H - B, y0);
  out += fmt::format("<text x=\"{}\" y=\"{}\" class=\"axis\">step {:g}</text>", L, H - B + 16, x0);
  out += fmt::format("<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">step {:g}</text>",
                     W - R, H - B + 16, x1);
  double legend = W - R - 8;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    const series& v = *it;
    if (v.y.empty()) continue;
    std::string pts;
    for (size_t i = 0; i < v.x.size(); ++i)
      pts += fmt::format("{}{:.1f},{:.1f}", i ? " " : "", px(v.x[i]), py(v.y[i]));
    out += fmt::format(
        "<polyline class=\"{}\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>",
        v.name, pts, v.color);
    if (v.x.size() == 1)
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>", px(v.x[0]),
                         py(v.y[0]), v.color);
    const std::string label = fmt::format("{} {:.4g}", v.name, v.y.back());
    out += fmt::format(
        "<text x=\"{}\" y=\"{}\" class=\"last\" text-anchor=\"end\" fill=\"{}\">{}</text>", legend,
        T + 16, v.color, escape(label));
    legend -= 9.0 * double(label.size()) + 16;
  }
  return out + "</svg>";
}

series column(const std::vector<nlohmann::json>& lines, const char* key, const char* name,
              const char* color) {
  series s{name, color, {}, {}};
  for (auto& l : lines)
    if (l.contains(key) && l[key].is_number() && l.contains("step")) {
      s.x.push_back(l["step"].get<double>());
      s.y.push_back(l[key].get<double>());
    }
  return s;
}

// The trace's slices per actor as lanes; slices named F..., B... and R...
// (forward, backward, recomputation) in their own colours.
std::string timeline(const nlohmann::json& trace) {
  std::map<int64_t, std::string> lanes;
  struct slice {
    int64_t tid;
    double ts, dur;
    std::string name;
  };
  std::vector<slice> slices;
  for (auto& e : trace) {
    if (!e.is_object() || !e.contains("ph") || !e.contains("tid")) continue;
    const int64_t tid = e["tid"].get<int64_t>();
    if (e["ph"] == "M" && e.contains("args") && e["args"].contains("name"))
      lanes[tid] = e["args"]["name"].get<std::string>();
    if (e["ph"] == "X")
      slices.push_back({tid, e.value("ts", 0.0), e.value("dur", 0.0), e.value("name", "")});
  }
  for (auto& x : slices)
    if (!lanes.count(x.tid)) lanes[x.tid] = fmt::format("track {}", x.tid);
  constexpr double W = 720, L = 150, R = 16, T = 28, lane_h = 22;
  const double H = T + lane_h * double(std::max<size_t>(1, lanes.size())) + 24;
  double t1 = 1;
  for (auto& x : slices) t1 = std::max(t1, x.ts + x.dur);
  std::string out = fmt::format(
      "<svg id=\"timeline\" class=\"chart\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "data-lanes=\"{}\" data-slices=\"{}\"><text x=\"{}\" y=\"18\" class=\"title\">Pipeline "
      "timeline (per actor; F forward, B backward, R recomputation)</text>",
      W, H, W, H, lanes.size(), slices.size(), L);
  std::map<int64_t, int> row;
  int r = 0;
  for (auto& [tid, name] : lanes) {
    row[tid] = r;
    out += fmt::format("<text x=\"{}\" y=\"{}\" class=\"lane\" text-anchor=\"end\">{}</text>",
                       L - 6, T + lane_h * r + 15, escape(name));
    ++r;
  }
  const double scale = (W - L - R) / t1;
  for (auto& x : slices) {
    const char k = x.name.empty() ? '?' : x.name[0];
    const char* color = k == 'F' ? "#4c78a8" : k == 'B' ? "#f58518" : k == 'R' ? "#54a24b" : "#999";
    out += fmt::format(
        "<rect class=\"slice\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" "
        "fill=\"{}\"><title>{} {:.3f} ms</title></rect>",
        L + x.ts * scale, T + lane_h * row[x.tid] + 3, std::max(0.5, x.dur * scale), lane_h - 6,
        color, escape(x.name), x.dur / 1000);
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" class=\"axis\">0</text>", L, H - 6);
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">{:.1f} ms</text></svg>", W - R,
      H - 6, t1 / 1000);
  return out;
}

}  // namespace

run_files read_run_dir(const std::string& dir) {
  run_files r;
  r.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("merak report: '{}' is not a directory", dir);
  fs::path metrics = fs::path(dir) / "metrics.jsonl";
  if (!fs::exists(metrics)) {
    std::vector<fs::path> found;
    for (auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".jsonl") found.push_back(e.path());
    if (found.size() != 1)
      fail(
          "merak report: '{}' holds {} metrics files (*.jsonl) where one is needed (merak train "
          "--metrics DIR/metrics.jsonl)",
          dir, found.size());
    metrics = found.front();
  }
  r.metrics_path = metrics.string();
  std::istringstream lines(slurp(metrics));
  int64_t n = 0;
  for (std::string l; std::getline(lines, l);) {
    ++n;
    if (l.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(l, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step"))
      fail("merak report: {}:{}: not a metrics line of merak train", r.metrics_path, n);
    r.lines.push_back(std::move(j));
  }
  if (r.lines.empty()) fail("merak report: {} holds no steps", r.metrics_path);
  const fs::path trace = fs::path(dir) / "trace.json";
  if (fs::exists(trace)) {
    r.trace_path = trace.string();
    auto j = nlohmann::json::parse(slurp(trace), nullptr, false);
    if (j.is_discarded() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
      fail("merak report: {} is not a trace of merak train --trace", r.trace_path);
    r.trace = j["traceEvents"];
  }
  std::vector<fs::path> configs = {r.metrics_path + ".config.toml", fs::path(dir) / "config.toml"};
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory()) configs.push_back(e.path() / "config.toml");
  for (auto& c : configs)
    if (fs::exists(c)) {
      r.config_path = c.string();
      r.config = slurp(c);
      break;
    }
  return r;
}

std::string render_report(const run_files& run) {
  const auto& m = run.lines;
  const auto& last = m.back();
  double tokens = 0;
  int counted = 0;
  for (size_t i = 1; i < m.size(); ++i)  // the first step warms up
    if (m[i].contains("tokens_per_s")) tokens += m[i]["tokens_per_s"].get<double>(), ++counted;
  if (counted == 0 && m.front().contains("tokens_per_s"))
    tokens = m.front()["tokens_per_s"].get<double>(), counted = 1;
  std::string wall = "-";
  if (m.front().contains("time") && last.contains("time"))
    wall = fmt::format("{:.1f} s", last["time"].get<double>() - m.front()["time"].get<double>());
  auto number = [](const nlohmann::json& l, const char* k) {
    return l.contains(k) && l[k].is_number() ? fmt::format("{:.4f}", l[k].get<double>())
                                             : std::string("-");
  };
  std::string val = "-";
  for (auto it = m.rbegin(); it != m.rend() && val == "-"; ++it) val = number(*it, "val_loss");
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>merak run " +
      escape(run.dir) +
      "</title><style>"
      "body{font:14px system-ui,sans-serif;margin:24px;color:#222}"
      "table{border-collapse:collapse}td,th{padding:2px 12px;text-align:left}"
      ".chart{display:block;margin:16px 0}.frame{fill:none;stroke:#ccc}"
      ".title{font-weight:600}.axis,.lane{font-size:11px;fill:#555}.last{font-size:12px}"
      "pre{background:#f6f6f6;padding:8px}"
      "</style></head><body>\n";
  html += "<h1>merak run " + escape(run.dir) + "</h1>\n<table id=\"summary\">";
  auto row = [&](const std::string& k, const std::string& v, const std::string& id) {
    html += fmt::format("<tr><th>{}</th><td id=\"{}\">{}</td></tr>", escape(k), id, escape(v));
  };
  row("steps", std::to_string(m.size()), "steps");
  row("last loss", number(last, "loss"), "last-loss");
  row("last validation loss", val, "last-val-loss");
  row("mean tokens/s", counted ? fmt::format("{:.0f}", tokens / counted) : "-", "tokens-per-s");
  row("wall time", wall, "wall-time");
  row("metrics", run.metrics_path, "metrics-file");
  html += "</table>\n";
  html += line_chart("loss", "Loss",
                     {column(m, "loss", "loss", "#4c78a8"),
                      column(m, "val_loss", "val_loss", "#e45756")}) +
          "\n";
  html += line_chart("throughput", "Tokens per second",
                     {column(m, "tokens_per_s", "tokens_per_s", "#54a24b")}) +
          "\n";
  html +=
      line_chart("grad-norm", "Gradient norm", {column(m, "grad_norm", "grad_norm", "#b279a2")}) +
      "\n";
  if (!run.trace.is_null()) html += timeline(run.trace) + "\n";
  if (!run.config.empty())
    html += "<h2>Flags</h2><pre id=\"config\">" + escape(run.config) + "</pre>\n";
  html += "</body></html>\n";
  return html;
}

}  // namespace merak::apps
