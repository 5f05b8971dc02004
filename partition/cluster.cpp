#include "partition/cluster.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace merak::partition {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The device description carries the cluster's links too (code that prices
// from a device_spec alone sees the same numbers).
void mirror_links(cluster_spec& c) {
  c.device.devices_per_node = c.devices_per_node;
  c.device.intra_bw = c.intra.bw;
  c.device.intra_latency = c.intra.latency;
  c.device.inter_bw = c.inter_bw_per_device();
  c.device.inter_latency = c.inter.latency;
}

// A DGX-style node: 8 devices on an NVSwitch, one NIC per device.
cluster_spec dgx(std::string name, const std::string& device, double nvswitch_busbw_gbs,
                 std::string nic_kind, double nic_gbs) {
  cluster_spec c;
  c.name = std::move(name);
  c.device = find_device(device);
  c.devices_per_node = 8;
  // Latency per ring step: about 1 us over NVLink and 5 us over
  // InfiniBand with NCCL's low-latency protocol (an 8-GPU all-reduce of a
  // few KB takes about 15 us).
  c.intra = {"nvswitch", nvswitch_busbw_gbs * 1e9, 1e-6};
  c.inter = {std::move(nic_kind), nic_gbs * 1e9, 5e-6};
  c.nics_per_node = 8;
  mirror_links(c);
  return c;
}

}  // namespace

const char* collective_algo_name(collective_algo a) {
  return a == collective_algo::ring ? "ring" : "tree";
}

const std::vector<cluster_spec>& builtin_clusters() {
  // NVSwitch all-reduce bus bandwidth per GPU as NCCL reaches it (about 77%
  // of NVLink's per-direction rate: A100 300 GB/s, H100 450 GB/s); NICs at
  // line rate (HDR 200 Gb/s, NDR 400 Gb/s). Sources: docs/planning.md.
  static const std::vector<cluster_spec> all = {
      dgx("dgx-a100-hdr", "a100-80gb", 230, "hdr-infiniband", 25),
      dgx("dgx-h100-ndr", "h100-sxm", 350, "ndr-infiniband", 50),
  };
  return all;
}

cluster_spec cluster_of(const device_spec& d) {
  cluster_spec c;
  c.name = d.name;
  c.device = d;
  c.devices_per_node = std::max(1, d.devices_per_node);
  c.intra = {"intra-node", d.intra_bw, d.intra_latency};
  c.inter = {"network", d.inter_bw, d.inter_latency};
  c.nics_per_node = c.devices_per_node;
  return c;
}

cluster_spec find_cluster(const std::string& name_or_file) {
  const bool file =
      name_or_file.ends_with(".json") || std::filesystem::is_regular_file(name_or_file);
  if (!file) {
    for (const auto& c : builtin_clusters())
      if (lower(c.name) == lower(name_or_file)) return c;
    std::string known;
    for (const auto& c : builtin_clusters()) known += (known.empty() ? "" : ", ") + c.name;
    fail("unknown --cluster '{}' (built-in: {}; or a JSON file)", name_or_file, known);
  }
  const std::string& path = name_or_file;
  const nlohmann::json j = read_json_file(path, "cluster file");
  if (!j.is_object()) fail("cluster file '{}': expected a JSON object", path);
  // A number from lo to hi (bounds far beyond any cluster: every cost stays
  // finite and every count fits an int); `whole`: an integer.
  auto number = [&](const nlohmann::json& object, const std::string& where, const char* key,
                    double lo, double hi, bool whole = false) -> double {
    if (!object.contains(key) || !object[key].is_number())
      fail("cluster file '{}': '{}{}' must be a number", path, where, key);
    double v = object[key].get<double>();
    if (!(v >= lo && v <= hi) || !std::isfinite(v) || (whole && v != std::floor(v)))
      fail("cluster file '{}': '{}{}' is {}, must be {} from {} to {}", path, where, key, v,
           whole ? "an integer" : "a number", lo, hi);
    return v;
  };
  auto object = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key) || !j[key].is_object())
      fail("cluster file '{}': '{}' must be an object", path, key);
    return j[key];
  };
  cluster_spec c;
  c.name = j.contains("name") && j["name"].is_string() ? j["name"].get<std::string>() : path;
  if (!j.contains("device")) fail("cluster file '{}': 'device' is missing", path);
  if (j["device"].is_string()) {
    c.device = find_device(j["device"].get<std::string>());
  } else if (j["device"].is_object()) {
    c.device = parse_device(j["device"], fmt::format("cluster file '{}': device", path));
  } else {
    fail("cluster file '{}': 'device' must be a device name or object", path);
  }
  c.devices_per_node = int(number(j, "", "devices_per_node", 1, 1 << 20, true));
  const auto& intra = object("intra");
  c.intra.kind = intra.value("kind", "intra-node");
  c.intra.bw = number(intra, "intra.", "bw_gbs", 1e-9, 1e9) * 1e9;
  c.intra.latency = number(intra, "intra.", "latency_us", 0, 1e9) * 1e-6;
  const auto& inter = object("inter");
  c.inter.kind = inter.value("kind", "network");
  c.nics_per_node = int(number(inter, "inter.", "nics_per_node", 1, 1 << 20, true));
  c.inter.bw = number(inter, "inter.", "nic_gbs", 1e-9, 1e9) * 1e9;
  c.inter.latency = number(inter, "inter.", "latency_us", 0, 1e9) * 1e-6;
  mirror_links(c);
  return c;
}

collective_cost allreduce_cost(const cluster_spec& c, double bytes, int ranks, int per_node) {
  collective_cost out;
  if (ranks <= 1 || bytes <= 0) return out;
  per_node = std::clamp(per_node, 1, ranks);
  const int nodes = (ranks + per_node - 1) / per_node;
  out.crosses_nodes = nodes > 1;
  const double n = ranks;
  if (!out.crosses_nodes) {
    out.seconds = 2.0 * (n - 1) / n * bytes / c.intra.bw + 2.0 * (n - 1) * c.intra.latency;
    return out;
  }
  const double bw = std::min(c.intra.bw, per_node * c.inter_bw_per_device());
  const double ring = 2.0 * (n - 1) / n * bytes / bw +
                      2.0 * (nodes * c.inter.latency + (n - nodes) * c.intra.latency);
  const double tree =
      2.0 * bytes / bw + 2.0 * (std::ceil(std::log2(double(nodes))) * c.inter.latency +
                                (per_node - 1) * c.intra.latency);
  out.algo = tree < ring ? collective_algo::tree : collective_algo::ring;
  out.seconds = std::min(ring, tree);
  return out;
}

double p2p_seconds(const cluster_spec& c, double bytes, bool same_node) {
  if (bytes <= 0) return 0;
  return same_node ? bytes / c.intra.bw + c.intra.latency
                   : bytes / c.inter_bw_per_device() + c.inter.latency;
}

}  // namespace merak::partition
