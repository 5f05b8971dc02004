// Clusters, collectives over their links, GEMMs by shape, Megatron's FLOP
// count, the critical path, and the planner on a cluster against published
// runs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "partition/cluster.hpp"
#include "partition/device.hpp"
#include "partition/planner.hpp"

using namespace merak;
using namespace merak::partition;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  auto path =
      std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << text;
  return path.string();
}

// A request for `cluster`'s devices, spread over `nodes` nodes.
plan_request cluster_request(const char* cluster, model::gpt_config m, int devices, int nodes,
                             int64_t batch) {
  plan_request r;
  r.model = m;
  r.cluster = find_cluster(cluster);
  r.device = r.cluster->device;
  r.devices = devices;
  r.nodes = nodes;
  r.global_batch = batch;
  return r;
}

}  // namespace

TEST_CASE("collectives are priced over the links they cross", "[planner][cluster]") {
  const cluster_spec c = find_cluster("dgx-a100-hdr");
  CHECK(c.devices_per_node == 8);
  CHECK(c.inter_bw_per_device() == Approx(25e9));
  const double bytes = 1e9;
  // Inside a node: a ring at the NVSwitch bus bandwidth.
  auto tp = allreduce_cost(c, bytes, 8, 8);
  CHECK_FALSE(tp.crosses_nodes);
  CHECK(tp.algo == collective_algo::ring);
  CHECK(tp.seconds == Approx(2.0 * 7 / 8 * bytes / 230e9 + 14 * 1e-6));
  // One rank per node (dp across nodes): the device's NIC share bounds it.
  auto dp = allreduce_cost(c, bytes, 16, 1);
  CHECK(dp.crosses_nodes);
  CHECK(dp.seconds > bytes / 25e9);
  CHECK(dp.seconds < 2 * bytes / 25e9 + 1e-3);
  // Four of the group on each node: four NICs' worth, capped by NVSwitch.
  auto dp4 = allreduce_cost(c, bytes, 16, 4);
  CHECK(dp4.seconds < dp.seconds / 3);
  // Small messages at scale: the tree's log latency wins.
  auto small = allreduce_cost(c, 1e3, 512, 1);
  CHECK(small.algo == collective_algo::tree);
  CHECK(allreduce_cost(c, 1e3, 512, 1).seconds < 2.0 * 512 * c.inter.latency);
  // Large messages: the ring's 2 (n-1)/n beats the tree's 2.
  CHECK(allreduce_cost(c, 1e10, 4, 1).algo == collective_algo::ring);
  CHECK(allreduce_cost(c, bytes, 1, 1).seconds == 0);
  // Point to point: NVSwitch inside a node, the NIC share across.
  CHECK(p2p_seconds(c, bytes, true) < p2p_seconds(c, bytes, false));
  CHECK(p2p_seconds(c, bytes, false) == Approx(bytes / 25e9 + 5e-6));
}

TEST_CASE("clusters come built in or from a JSON file that is checked field by field",
          "[planner][cluster]") {
  CHECK(find_cluster("DGX-H100-NDR").device.name == "h100-sxm");
  CHECK_THROWS_WITH(find_cluster("dgx-b200"), Catch::Contains("unknown --cluster 'dgx-b200'") &&
                                                  Catch::Contains("dgx-a100-hdr, dgx-h100-ndr"));
  auto good = write_temp("cluster", R"({"name": "pcie-box", "device": "a100-40gb",
      "devices_per_node": 4, "intra": {"kind": "pcie", "bw_gbs": 20, "latency_us": 15},
      "inter": {"nics_per_node": 1, "nic_gbs": 12.5, "latency_us": 20}})");
  auto c = find_cluster(good);
  CHECK(c.name == "pcie-box");
  CHECK(c.devices_per_node == 4);
  CHECK(c.intra.kind == "pcie");
  CHECK(c.inter_bw_per_device() == Approx(12.5e9 / 4));
  CHECK(c.device.name == "a100-40gb");
  auto bad = write_temp("cluster-bad", R"({"device": "a100-40gb", "devices_per_node": 4,
      "intra": {"latency_us": 15}, "inter": {"nics_per_node": 1, "nic_gbs": 12.5, "latency_us": 2}})");
  CHECK_THROWS_WITH(find_cluster(bad), Catch::Contains(bad) && Catch::Contains("'intra.bw_gbs'"));
  auto neg = write_temp("cluster-neg", R"({"device": "a100-40gb", "devices_per_node": 0,
      "intra": {"bw_gbs": 1, "latency_us": 1}, "inter": {"nics_per_node": 1, "nic_gbs": 1, "latency_us": 1}})");
  CHECK_THROWS_WITH(find_cluster(neg), Catch::Contains("'devices_per_node' is 0"));
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
  std::filesystem::remove(neg);
}

TEST_CASE("a GEMM's time follows its shape: waves of tiles and the memory bound",
          "[planner][cluster]") {
  const device_spec a100 = find_device("a100-80gb");
  // 108 tiles of 128 x 128 fill the 108 SMs once; one more tile needs a
  // second wave that leaves 107 of them idle.
  const double full = gemm_compute_seconds(a100, 128 * 108, 128, 4096, 1);
  const double spill = gemm_compute_seconds(a100, 128 * 109, 128, 4096, 1);
  CHECK(spill / full == Approx(2.0 * 109 / 109).epsilon(0.05));
  CHECK(full == Approx(2.0 * 128 * 108 * 128 * 4096 / (312e12 * 0.85)));
  // A thin product is bound by memory, not by FLOPs.
  const double thin = gemm_seconds(a100, 8192, 8192, 8, 1, 2);
  CHECK(thin > 8192.0 * 8192 * 2 / (a100.memory_bw * a100.memory_efficiency));  // the output
  CHECK(gemm_compute_seconds(a100, 8192, 8192, 8, 1) < thin / 10);
}

TEST_CASE("Megatron's FLOP count of a step", "[planner][cluster]") {
  model::gpt_config m{.vocab = 51200, .max_seq = 2048, .layers = 80, .dim = 12288, .heads = 96};
  const double B = 2304, s = 2048, l = 80, h = 12288, V = 51200;
  CHECK(megatron_flops(m, 2304, true) ==
        Approx(96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))));
  CHECK(megatron_flops(m, 2304, false) ==
        Approx(72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))));
  CHECK(megatron_flops(m, 2304, true) / megatron_flops(m, 2304, false) ==
        Approx(4.0 / 3).epsilon(0.01));
}

// Llama-3-8B's shape, counted matrix by matrix: per token and layer the
// forward multiplies by Wq and Wo (2 h^2 each), Wk and Wv (2 h g h each, g
// key/value heads per query head), the three MLP matrices (2 h F each) and
// does Q K^T and P V (2 s h each); the LM head adds 2 h V per token; a
// training step is three forwards' worth.
TEST_CASE("Megatron's FLOP count of a Llama step", "[planner][cluster]") {
  model::gpt_config m{.vocab = 128256, .max_seq = 8192, .layers = 32, .dim = 4096, .heads = 32};
  m.family = model::model_family::llama;
  m.query_groups = 8;
  m.ffn_hidden = 14336;
  const double B = 512, s = 8192, L = 32, h = 4096, V = 128256, g = 8.0 / 32, F = 14336;
  const double per_token_forward =
      L * (2 * h * h + 2 * h * h + 2 * (2 * h * g * h) + 3 * 2 * h * F + 2 * 2 * s * h) + 2 * h * V;
  CHECK(megatron_flops(m, 512, false) == Approx(3 * B * s * per_token_forward));
  // Without groups, each query head has its own K and V.
  m.query_groups = 0;
  const double ungrouped = L * (2 * 4 * h * h + 3 * 2 * h * F + 2 * 2 * s * h) + 2 * h * V;
  CHECK(megatron_flops(m, 512, false) == Approx(3 * B * s * ungrouped));
}

TEST_CASE("a TP group never straddles two nodes", "[planner][cluster]") {
  auto r = cluster_request(
      "dgx-a100-hdr",
      {.vocab = 51200, .vocab_divisible_by = 384,  // rows tp 6 divides
       .max_seq = 2048, .layers = 24, .dim = 2304, .heads = 24},
      48, 6, 48);
  auto costs = costs_for(r, 1, "");
  CHECK_THROWS_WITH(
      evaluate_plan(r, *costs, 8, 6, 1, 1, schedule_kind::one_f_one_b, recompute_kind::none, 0),
      Catch::Contains("tp within a node") &&
          Catch::Contains("tp 6 does not divide 8 devices per node"));
  auto ok =
      evaluate_plan(r, *costs, 6, 8, 1, 1, schedule_kind::one_f_one_b, recompute_kind::none, 0);
  CHECK(ok.tp_algo == "ring");
  CHECK(ok.tp_allreduce_s > 0);
  CHECK(ok.dp_allreduce_s > 0);
}

TEST_CASE("the critical path of a plan ends at the pipeline's end and accounts for it",
          "[planner][cluster]") {
  auto r = cluster_request(
      "dgx-h100-ndr", {.vocab = 51200, .max_seq = 1024, .layers = 16, .dim = 2048, .heads = 16}, 16,
      2, 64);
  auto costs = costs_for(r, 1, "");
  // pp 1: the path is every op of the one stage, back to back.
  auto one =
      evaluate_plan(r, *costs, 16, 1, 1, 4, schedule_kind::one_f_one_b, recompute_kind::none, 0);
  CHECK(one.path.ops == 8);
  CHECK(one.path.forward_s + one.path.backward_s == Approx(one.pipeline_s));
  CHECK(one.path.links_s == 0);
  // pp 4 over two nodes (tp 4: stages 0-1 on node 0, 2-3 on node 1): the
  // path starts at stage 0's first forward and ends at its last backward;
  // its ops and messages cover the pipeline exactly.
  auto four =
      evaluate_plan(r, *costs, 1, 4, 4, 8, schedule_kind::one_f_one_b, recompute_kind::none, 0);
  CHECK(four.path.first_op == "s0:F0");
  CHECK(four.path.last_op == "s0:B7");
  CHECK(four.path.forward_s + four.path.backward_s + four.path.links_s == Approx(four.pipeline_s));
  CHECK(four.path.links_s > 0);
  // The boundary between the nodes goes over the network.
  CHECK(four.p2p_s == Approx(p2p_seconds(*r.cluster, 1024.0 * 8 * 2048 * 2, false)));
}

TEST_CASE("compute beside a collective runs on the SMs the collective leaves",
          "[planner][cluster]") {
  device_spec h100 = find_device("h100-sxm");
  REQUIRE(h100.collective_sms == 24);
  const double share = 24.0 / 132;
  CHECK(overlapped_seconds(h100, 1.0, 0) == 1.0);
  // A short collective slows the work for as long as it runs ...
  CHECK(overlapped_seconds(h100, 1.0, 0.5) == Approx(1.0 + share * 0.5));
  // ... a long one outlasts the slowed work and sets the time.
  CHECK(overlapped_seconds(h100, 1.0, 2.0) == Approx(2.0));
  CHECK(overlapped_seconds(h100, 1.0, 1.0 / (1 - share)) == Approx(1.0 / (1 - share)));
  h100.collective_sms = 0;  // no contention: the longer of the two
  CHECK(overlapped_seconds(h100, 1.0, 0.5) == 1.0);
  CHECK(find_device("cpu").collective_sms == 0);
  // Device files: optional, below the SM count.
  nlohmann::json e = {{"name", "x"},           {"peak_tflops", 100}, {"memory_gb", 80},
                      {"memory_bw_gbs", 2000}, {"intra_bw_gbs", 200}, {"intra_latency_us", 1},
                      {"inter_bw_gbs", 25},    {"inter_latency_us", 5}, {"devices_per_node", 8},
                      {"sms", 100}};
  CHECK(parse_device(e, "devices.json").collective_sms == 0);
  e["collective_sms"] = 20;
  CHECK(parse_device(e, "devices.json").collective_sms == 20);
  e["collective_sms"] = 100;
  CHECK_THROWS_WITH(parse_device(e, "devices.json"),
                    Catch::Contains("devices.json") && Catch::Contains("collective_sms (100)"));
}

TEST_CASE("published Megatron-LM runs on DGX A100 fit 80 GB and are predicted within 15%",
          "[planner][cluster]") {
  // Narayanan et al., SC'21, Table 1: rows (heads, hidden, layers, tp, pp,
  // GPUs, batch) -> TFLOP/s per GPU; scored as they ran: every layer
  // recomputed on every stage (one checkpoint a layer), unfused attention,
  // the pipelined rows interleaved with 2 chunks, the stages waiting for
  // their sends, which scatter/gather over the TP ranks.
  struct row {
    int heads, hidden, layers, tp, pp, gpus, batch;
    double published;
  };
  for (row w : {row{24, 2304, 24, 1, 1, 32, 512, 137}, row{32, 4096, 36, 4, 1, 128, 512, 142},
                row{64, 8192, 48, 8, 2, 512, 1536, 138}, row{96, 12288, 80, 8, 8, 1536, 2304, 148},
                row{128, 20480, 105, 8, 35, 2520, 2520, 163},
                row{160, 25600, 128, 8, 64, 3072, 3072, 163}}) {
    auto r = cluster_request(
        "dgx-a100-hdr",
        {.vocab = 51200, .max_seq = 2048, .layers = w.layers, .dim = w.hidden, .heads = w.heads},
        w.gpus, w.gpus / 8, w.batch);
    r.attention = attention_kernel::unfused;
    r.recompute_every_stage = true;
    r.recompute_layers = 1;
    r.overlap_p2p_comm = false;
    r.scatter_gather_p2p = true;
    r.chunks = 2;
    const int dp = w.gpus / (w.tp * w.pp);
    auto costs = costs_for(r, 1, "");
    auto p = evaluate_plan(r, *costs, dp, w.tp, w.pp, w.batch / dp,
                           w.pp > 1 ? schedule_kind::interleaved : schedule_kind::one_f_one_b,
                           recompute_kind::full, 0);  // throws if over the 80 GB budget
    INFO(w.hidden << ": predicted " << p.tflops_per_device << " TFLOP/s, published "
                  << w.published);
    CHECK(p.flops_count_recompute);
    for (auto& s : p.stages) CHECK(s.memory_bytes <= int64_t(80e9));
    CHECK(p.tflops_per_device / w.published > 0.85);
    CHECK(p.tflops_per_device / w.published < 1.15);
  }
  // Half-layer checkpoints, merak's default, hold twice the inputs: the 1T
  // model's first stage no longer fits.
  auto r = cluster_request(
      "dgx-a100-hdr", {.vocab = 51200, .max_seq = 2048, .layers = 128, .dim = 25600, .heads = 160},
      3072, 384, 3072);
  r.attention = attention_kernel::unfused;
  r.recompute_every_stage = true;
  r.chunks = 2;
  auto costs = costs_for(r, 1, "");
  CHECK_THROWS_WITH(evaluate_plan(r, *costs, 6, 8, 64, 512, schedule_kind::interleaved,
                                  recompute_kind::full, 0),
                    Catch::Contains("memory"));
  // A search of the layout as published finds none with half-layer
  // checkpoints; searching the segments' size too, it keeps a layer's input
  // a layer, as Megatron-LM ran it.
  r.tp = 8;
  r.pp = 64;
  r.dp = 6;
  r.micro_batches = 512;
  r.schedules = {schedule_kind::interleaved};
  r.recomputes = {recompute_kind::full};
  CHECK_THROWS_WITH(search_plans(r, *costs), Catch::Contains("no plan for 3072 devices fits"));
  r.search_recompute_layers = true;
  const plan best = search_plans(r, *costs).best;
  CHECK(best.recompute_layers == 1);
  for (auto& st : best.stages) CHECK(st.memory_bytes <= int64_t(80e9));
}

TEST_CASE("Megatron-LM's 22B run fits an 80 GB A100 with full recomputation, not without",
          "[planner][cluster][memory]") {
  // "Reducing Activation Recomputation in Large Transformer Models"
  // (Korthikanti et al., 2022): 22B GPT, 48 layers, hidden 6144, 64 heads,
  // sequence 2048, tp 8, pp 1, micro-batch 4, full recomputation.
  auto r = cluster_request(
      "dgx-a100-hdr", {.vocab = 51200, .max_seq = 2048, .layers = 48, .dim = 6144, .heads = 64}, 8,
      1, 4);
  r.attention = attention_kernel::unfused;
  r.recompute_every_stage = true;
  auto costs = costs_for(r, 1, "");
  auto full =
      evaluate_plan(r, *costs, 1, 8, 1, 1, schedule_kind::one_f_one_b, recompute_kind::full, 0);
  INFO("predicted " << full.stages[0].memory_bytes << " bytes");
  // Weights and AdamW state (16 bytes a parameter: 2.64e9 parameters on a
  // shard, the 51200 x 6144 embedding split over the 8) plus each layer's
  // input kept and one layer rebuilt at a time.
  CHECK(full.stages[0].memory_bytes < int64_t(80e9));
  CHECK(full.stages[0].memory_bytes > int64_t(50e9));
  // Every layer's activations at once (about 1.3 GB each) do not fit.
  CHECK_THROWS_WITH(
      evaluate_plan(r, *costs, 1, 8, 1, 1, schedule_kind::one_f_one_b, recompute_kind::none, 0),
      Catch::Contains("memory budget"));
  // The paper's own configuration: sequence parallelism and selective
  // recomputation fit too, with more activations than full recomputation.
  auto sp = r;
  sp.sequence_parallel = true;
  auto selective = evaluate_plan(sp, *costs, 1, 8, 1, 1, schedule_kind::one_f_one_b,
                                 recompute_kind::selective, 0);
  CHECK(selective.stages[0].memory_bytes < int64_t(80e9));
  CHECK(selective.stages[0].activations_bytes > full.stages[0].activations_bytes);
  CHECK(selective.step_time_s < full.step_time_s);
}

TEST_CASE("zb-h1 is searched, wins where the drain costs, never recomputes", "[planner][cluster]") {
  model::gpt_config m{.vocab = 51200, .max_seq = 2048, .layers = 48, .dim = 8192, .heads = 64};
  auto r = cluster_request("dgx-a100-hdr", m, 32, 4, 32);
  r.tp = 8;
  r.pp = 4;
  r.dp = 1;
  r.micro_batches = 32;
  auto costs = analytic_costs(r.device, m);
  r.schedules = {schedule_kind::one_f_one_b, schedule_kind::zb_h1};
  auto best = search_plans(r, *costs).best;
  CHECK(best.schedule == schedule_kind::zb_h1);
  CHECK(best.recompute == recompute_kind::none);
  // Against 1F1B on the same layout: the weight gradients leave the
  // critical path's drain.
  auto one_f_one_b =
      evaluate_plan(r, *costs, 1, 8, 4, 32, schedule_kind::one_f_one_b, recompute_kind::none, 0);
  CHECK(best.pipeline_s < one_f_one_b.pipeline_s);
  CHECK(best.stages[0].weight_s > 0);
  CHECK(best.stages[0].weight_s < best.stages[0].backward_s);
  CHECK_THROWS_WITH(
      evaluate_plan(r, *costs, 1, 8, 4, 32, schedule_kind::zb_h1, recompute_kind::full, 0),
      Catch::Contains("zb-h1 without recomputation"));
}

TEST_CASE("interleaved 1F1B is priced per chunk and shortens the pipeline", "[planner][cluster]") {
  model::gpt_config m{.vocab = 51200, .max_seq = 2048, .layers = 48, .dim = 8192, .heads = 64};
  auto r = cluster_request("dgx-a100-hdr", m, 32, 4, 32);
  r.recompute_every_stage = true;  // as Megatron-LM ran
  auto costs = analytic_costs(r.device, m);
  auto one =
      evaluate_plan(r, *costs, 1, 8, 4, 8, schedule_kind::one_f_one_b, recompute_kind::full, 0);
  for (int v : {2, 4}) {
    r.chunks = v;
    auto inter =
        evaluate_plan(r, *costs, 1, 8, 4, 8, schedule_kind::interleaved, recompute_kind::full, 0);
    INFO("chunks " << v << ": " << inter.pipeline_s << " s against 1F1B's " << one.pipeline_s);
    CHECK(inter.pipeline_s < one.pipeline_s);
    // The bubble shrinks to about 1/v of 1F1B's: (p - 1)/(v m) of the ideal.
    const double ideal = one.pipeline_s * 8.0 / (8 + 3);
    CHECK(inter.pipeline_s - ideal < 1.25 * (one.pipeline_s - ideal) / v);
    CHECK(inter.path.ops > 0);
  }
  CHECK_THROWS_WITH(
      evaluate_plan(r, *costs, 1, 8, 4, 2, schedule_kind::interleaved, recompute_kind::none, 0),
      Catch::Contains("multiple of pp"));
}

TEST_CASE("first-generation fused attention runs at half the fused rate in the same memory",
          "[planner][cluster]") {
  // MPT-3B's shape (head size 128) on A100s: attention's GEMMs at
  // FlashAttention-2's share of peak, or half of it; nothing else changes.
  model::gpt_config m{.vocab = 50368, .max_seq = 2048, .layers = 4, .dim = 2560, .heads = 20};
  const device_spec a100 = find_device("a100-80gb");
  const model::graph g = model::build_model(m);
  const int64_t tokens = 10 * 2048;
  auto fused = analytic_costs(a100, m, attention_kernel::fused);
  auto v1 = analytic_costs(a100, m, attention_kernel::fused_v1);
  int attention = 0;
  for (const auto& n : g.nodes()) {
    const node_time a = fused->time(n, tokens), b = v1->time(n, tokens);
    if (n.kind != "attention") {
      CHECK(b.forward_s == a.forward_s);
      CHECK(b.backward_s == a.backward_s);
      continue;
    }
    ++attention;
    // Causal half of Q K^T and P V per head: 2 T^2 d FLOPs a sequence and
    // head, at 0.6 x peak for FlashAttention-2 (forward; backward 2.5 x).
    const double gemm = 2.0 * 2048 * 2048 * 128 * 10 * 20 / (312e12 * 0.6);
    CHECK(a.forward_s - a100.launch_s == Approx(gemm).epsilon(0.01));
    CHECK(b.forward_s - a100.launch_s == Approx(2 * gemm).epsilon(0.01));
    CHECK(b.backward_s - a100.launch_s == Approx(2.5 * 2 * gemm).epsilon(0.01));
  }
  CHECK(attention == m.layers);
  // A plan: the same bytes, a longer step.
  auto r = cluster_request("dgx-a100-hdr", m, 8, 1, 80);
  r.memory_budget = int64_t(1e12);
  auto score = [&](attention_kernel k) {
    auto q = r;
    q.attention = k;
    return evaluate_plan(q, *costs_for(q, 1, ""), 8, 1, 1, 1, schedule_kind::one_f_one_b,
                         recompute_kind::none, 0);
  };
  const plan p2 = score(attention_kernel::fused), p1 = score(attention_kernel::fused_v1);
  CHECK(p1.stages[0].memory_bytes == p2.stages[0].memory_bytes);
  CHECK(p1.step_time_s > p2.step_time_s);
  CHECK(parse_attention_kernel("fused-v1") == attention_kernel::fused_v1);
  CHECK_THROWS_WITH(parse_attention_kernel("flash3"), Catch::Contains("fused, fused-v1 or unfused"));
}

TEST_CASE("exposed shard collectives add each micro-batch's gathers and reduce-scatters to its ops",
          "[planner][cluster]") {
  // MPT-7B's shape on 8 A100s under ZeRO-3, micro-batches of 6 sequences.
  model::gpt_config m{.vocab = 50368, .max_seq = 2048, .layers = 32, .dim = 4096, .heads = 32};
  auto r = cluster_request("dgx-a100-hdr", m, 8, 1, 96);
  r.sharding = sharding_strategy::optim_grads_params;
  r.memory_budget = int64_t(1e12);
  auto costs = costs_for(r, 1, "");
  auto score = [&](bool exposed, sharding_strategy sh) {
    auto q = r;
    q.exposed_shard_collectives = exposed;
    q.sharding = sh;
    return evaluate_plan(q, *costs, 8, 1, 1, 2, schedule_kind::one_f_one_b, recompute_kind::none,
                         0);
  };
  const plan hidden = score(false, sharding_strategy::optim_grads_params);
  const plan exposed = score(true, sharding_strategy::optim_grads_params);
  const plan plain = score(false, sharding_strategy::no_shard);
  // Exposed, an op takes its compute and its collectives one after the
  // other: more than overlapped, which is at least the compute alone.
  CHECK(exposed.stages[0].forward_s > hidden.stages[0].forward_s);
  CHECK(exposed.stages[0].backward_s > hidden.stages[0].backward_s);
  CHECK(hidden.stages[0].forward_s >= plain.stages[0].forward_s);
  // The forward adds one bf16 all-gather of the parameters, the backward
  // that and an fp32 reduce-scatter: twice as many bytes, so the backward
  // gains three times the forward's addition.
  const double f = exposed.stages[0].forward_s - plain.stages[0].forward_s;
  const double b = exposed.stages[0].backward_s - plain.stages[0].backward_s;
  CHECK(f > 0);
  CHECK(b == Approx(3 * f).epsilon(0.02));
  CHECK(exposed.step_time_s > hidden.step_time_s);
  // Without sharded gradients there is nothing per micro-batch to expose.
  CHECK(score(true, sharding_strategy::no_shard).step_time_s == plain.step_time_s);
}

TEST_CASE("the memory model by category: sharding strategies, sequence parallelism, selective",
          "[planner][cluster][memory]") {
  // A 22B-shaped model on 32 A100s, tp 8, dp 4.
  model::gpt_config m{.vocab = 51200, .max_seq = 2048, .layers = 48, .dim = 6144, .heads = 64};
  auto r = cluster_request("dgx-a100-hdr", m, 32, 4, 16);
  r.attention = attention_kernel::unfused;
  r.memory_budget = int64_t(1e12);  // the categories, whatever fits
  auto costs = costs_for(r, 1, "");
  auto plan_with = [&](sharding_strategy s, recompute_kind rc, bool sp) {
    auto q = r;
    q.sharding = s;
    q.sequence_parallel = sp;
    return evaluate_plan(q, *costs, 4, 8, 1, 1, schedule_kind::one_f_one_b, rc, 0);
  };
  const auto plain = plan_with(sharding_strategy::no_shard, recompute_kind::none, false);
  const auto& a = plain.stages[0];
  const int64_t P = a.parameters_bytes / 4;  // a shard's parameters: about 22e9 / 8
  CHECK(P > int64_t(2.7e9));
  CHECK(P < int64_t(2.8e9));
  CHECK(a.gradients_bytes == 8 * P);  // gradients and the reducer's bucket copies
  CHECK(a.optimizer_bytes == 8 * P);
  const auto optim = plan_with(sharding_strategy::optim, recompute_kind::none, false);
  CHECK(optim.stages[0].optimizer_bytes == 8 * P / 4);
  CHECK(optim.stages[0].gradients_bytes == a.gradients_bytes);
  CHECK(optim.stages[0].activations_bytes == a.activations_bytes);
  const auto grads = plan_with(sharding_strategy::optim_grads, recompute_kind::none, false);
  CHECK(grads.stages[0].gradients_bytes == 4 * P / 4);
  const auto params = plan_with(sharding_strategy::optim_grads_params, recompute_kind::none, false);
  // 1/dp of the values, and what the fetcher holds at once at most: the
  // embedding whole (the shard's 51200 / 8 token rows and 2048 positions of
  // 6144, each bucket of its own) while the next node's small bucket (the
  // first norm's) arrives; less than another GEMM weight (QKV's shard) more.
  const int64_t embedding = 4 * int64_t(51200 / 8 + 2048) * 6144;
  const int64_t gathered = params.stages[0].parameters_bytes - 4 * P / 4;
  CHECK(gathered > embedding);
  CHECK(gathered < embedding + 4 * int64_t(6144) * 3 * 6144 / 8);
  // Sharded, the all-gather after the optimizer is exposed; the update is 1/dp.
  CHECK(optim.dp_exposed_s > plain.dp_exposed_s);
  CHECK(optim.optimizer_s < plain.optimizer_s);
  // Selective recomputation drops each layer's (b, a/t, s, s) probabilities
  // (2-byte elements) and runs the attention core twice.
  const auto selective = plan_with(sharding_strategy::no_shard, recompute_kind::selective, false);
  CHECK(a.activations_bytes - selective.stages[0].activations_bytes ==
        int64_t(48) * 4 * (64 / 8) * 2048 * 2048 * 2);
  CHECK(selective.stages[0].backward_s > a.backward_s);
  // Sequence parallelism splits the regions between the pairs: fewer bytes,
  // the same bytes communicated.
  const auto sp = plan_with(sharding_strategy::no_shard, recompute_kind::none, true);
  CHECK(sp.sequence_parallel);
  CHECK(sp.stages[0].activations_bytes < a.activations_bytes);
  // Its backward gathers each column-parallel input again for the weight
  // gradient, so it saves less there than in forward (Korthikanti et al.,
  // Table 4: 0.5 ms of a 22B layer's forward, 0.1 ms of its backward).
  CHECK(sp.stages[0].forward_s < a.forward_s);
  CHECK(a.backward_s - sp.stages[0].backward_s < a.forward_s - sp.stages[0].forward_s);
  auto odd = r;
  odd.model.max_seq = 2044;
  odd.sequence_parallel = true;
  CHECK_THROWS_WITH(
      evaluate_plan(odd, *costs, 4, 8, 1, 1, schedule_kind::one_f_one_b, recompute_kind::none, 0),
      Catch::Contains("tp 8 does not divide 2044 tokens"));
}

TEST_CASE("stages that wait for their sends hold each op for its transfer, scatter/gather splits it",
          "[planner][cluster]") {
  // 16 layers over 16 A100s on 2 nodes: tp 8, pp 2, the stage boundary
  // between the nodes; 8 micro-batches of one sequence.
  auto r = cluster_request(
      "dgx-a100-hdr", {.vocab = 51200, .max_seq = 2048, .layers = 16, .dim = 8192, .heads = 64}, 16,
      2, 8);
  r.attention = attention_kernel::unfused;
  r.memory_budget = int64_t(1e12);
  auto costs = costs_for(r, 1, "");
  auto with = [&](bool overlap, bool scatter, bool sp) {
    auto q = r;
    q.overlap_p2p_comm = overlap;
    q.scatter_gather_p2p = scatter;
    q.sequence_parallel = sp;
    return evaluate_plan(q, *costs, 1, 8, 2, 8, schedule_kind::one_f_one_b, recompute_kind::none,
                         0);
  };
  const auto async = with(true, false, false), blocking = with(false, false, false);
  const double transfer = async.p2p_s;
  CHECK(transfer == Approx(2048.0 * 8192 * 2 / 25e9).epsilon(0.05));  // one NIC a GPU
  // Stage 0 sends after each of its 8 forwards, stage 1 after each of its 8
  // backwards; overlapped, the transfers cost only the pipeline's fill and
  // drain (a forward and a backward crossing).
  CHECK(blocking.pipeline_s - async.pipeline_s > 6 * transfer);
  CHECK(blocking.pipeline_s - async.pipeline_s < 16 * transfer);
  CHECK(async.path.links_s > 0);
  CHECK(blocking.path.links_s == 0);  // inside the ops now
  // Scatter/gather: 1/8 of the activation over each rank's NIC, then the
  // all-gather inside the node.
  const auto scattered = with(false, true, false);
  CHECK(scattered.p2p_s < transfer / 2);
  CHECK(scattered.p2p_s > transfer / 8);
  CHECK(scattered.pipeline_s < blocking.pipeline_s);
  // Sequence parallelism leaves nothing to scatter: the plan is the same.
  CHECK(with(false, true, true).p2p_s == with(false, false, true).p2p_s);
  // One stage sends nothing.
  CHECK(evaluate_plan(r, *costs, 2, 8, 1, 4, schedule_kind::one_f_one_b, recompute_kind::none, 0)
            .pipeline_s == Approx([&] {
              auto q = r;
              q.overlap_p2p_comm = false;
              return evaluate_plan(q, *costs, 2, 8, 1, 4, schedule_kind::one_f_one_b,
                                   recompute_kind::none, 0)
                  .pipeline_s;
            }()));
}
