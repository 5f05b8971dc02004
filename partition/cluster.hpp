#pragma once
// Clusters for planning without the hardware: nodes of identical devices,
// the links between devices of one node, the network between nodes, and
// what a collective or a point-to-point message costs over them
// (docs/planning.md, "Clusters").
//
// Built-in: dgx-a100-hdr (8 x A100-80GB per node, NVSwitch, 8 x 200 Gb/s HDR
// InfiniBand per node) and dgx-h100-ndr (8 x H100-SXM, NVSwitch, 8 x 400 Gb/s
// NDR). More in a JSON file:
//
//   {"name": "my-cluster", "device": "a100-80gb", "devices_per_node": 8,
//    "intra": {"kind": "nvswitch", "bw_gbs": 230, "latency_us": 8},
//    "inter": {"kind": "hdr-infiniband", "nics_per_node": 8, "nic_gbs": 25,
//              "latency_us": 10}}
//
// "device" names a built-in device (device.hpp) or is an object in the
// device file's format. Bandwidths are per direction: `intra.bw_gbs` is the
// bus bandwidth one device reaches in an all-reduce inside its node,
// `nic_gbs` one NIC's line rate.

#include <string>
#include <vector>

#include "partition/device.hpp"

namespace merak::partition {

struct link_spec {
  std::string kind;
  double bw = 0;       // bytes/s, one direction
  double latency = 0;  // s per message or ring step
};

struct cluster_spec {
  std::string name;
  device_spec device;
  int devices_per_node = 8;
  link_spec intra;  // between the devices of one node (bus bandwidth per device)
  link_spec inter;  // one NIC
  int nics_per_node = 1;
  // A node's network bandwidth shared evenly by its devices.
  double inter_bw_per_device() const { return nics_per_node * inter.bw / devices_per_node; }
};

// The built-in clusters.
const std::vector<cluster_spec>& builtin_clusters();
// A built-in cluster by name (case-insensitive), or the cluster a JSON file
// describes (a name ending in ".json" or naming an existing file). Throws
// merak::error naming the file and field, or the unknown name with the
// known ones.
cluster_spec find_cluster(const std::string& name_or_file);
// The cluster a device description implies: nodes of its devices_per_node,
// its intra-node link, and one NIC per device at its inter-node bandwidth.
cluster_spec cluster_of(const device_spec& d);

enum class collective_algo { ring, tree };
const char* collective_algo_name(collective_algo a);

struct collective_cost {
  double seconds = 0;
  collective_algo algo = collective_algo::ring;
  bool crosses_nodes = false;
};

// An all-reduce of `bytes` over `ranks` devices, `per_node` of them on each
// node the group spans (ranks / per_node nodes), by the cheaper of a ring
// and a tree (what NCCL chooses between):
//   ring  2 (n-1)/n x bytes / bw + 2 x (nodes x inter latency + (n - nodes)
//         x intra latency)
//   tree  2 x bytes / bw + 2 x (log2(nodes) x inter latency + (per_node - 1)
//         x intra latency)
// where bw is the intra-node bus bandwidth inside one node, and across nodes
// the lesser of it and per_node devices' share of the node's NICs (each of
// the group's devices on a node drives its own ring or tree through its
// share). Zero for one rank or no bytes.
collective_cost allreduce_cost(const cluster_spec& c, double bytes, int ranks, int per_node);

// One message of `bytes` between two devices, on one node or across nodes
// (the sender's share of its node's NICs).
double p2p_seconds(const cluster_spec& c, double bytes, bool same_node);

}  // namespace merak::partition
