// parallel_trainer across processes: core lending over a host, the tensor
// channel, groups over UCX (coordinator.hpp).
#include "actors/coordinator.hpp"
#include "actors/idle_wait.hpp"
#include "comm/device_links.hpp"
#include "comm/nccl_semantics.hpp"

namespace merak::actors {

coordinator::lending coordinator::find_host() {
  lending out;
  out.host_ranks = {me};
  if (!par.processes) return out;
  const std::string host = host_key();
  const uint64_t mine_nonce =
      std::random_device{}() * 0x9E3779B97F4A7C15ull ^ uint64_t(::getpid());
  auto blobs = par.processes->allgather(fmt::format("{:016x} {}", mine_nonce, host));
  out.host_ranks.clear();
  for (int r = 0; r < int(blobs.size()); ++r) {
    if (blobs[size_t(r)].substr(17) == host) out.host_ranks.push_back(r);
    if (r == 0) out.nonce = std::stoull(blobs[0].substr(0, 16), nullptr, 16);
  }
  return out;
}

coordinator::lending coordinator::make_lending(lending out, const std::vector<int>& mine,
                                               int cores, int per_actor) {
  const int virtual_stages = par.virtual_stages();
  const std::vector<int>& host_ranks = out.host_ranks;
  // Not with TP (shards run in step).
  if (!par.lend_cores || par.tp != 1) return out;
  // The host's actors in layout order: replica-major, so stage s of the
  // k-th replica here is pool index k * pp + s. A pipeline device's chunks
  // (interleaved) take turns on its cores: they share its index, that of
  // virtual stage s % pp.
  std::vector<int> actors;
  for (int r : host_ranks)
    for (int i : place.actors_of(r)) actors.push_back(i);
  std::sort(actors.begin(), actors.end());
  bool whole = int(actors.size()) <= core_pool_state::kmax_stages;
  for (int i : actors) {
    const int d = i / virtual_stages;
    for (int s = 0; s < virtual_stages; ++s)
      whole = whole && std::find(host_ranks.begin(), host_ranks.end(), place.rank(d, s, 0)) !=
                           host_ranks.end();
  }
  out.cores = cores * int(host_ranks.size());
  const bool lend = whole && out.cores > per_actor;
  std::map<int, int> slot_of_device;  // device actor index (chunk 0) -> pool index
  for (int i : actors) {
    const int device = i / virtual_stages * virtual_stages + i % virtual_stages % par.pp;
    auto it = slot_of_device.try_emplace(device, int(slot_of_device.size())).first;
    out.index_of[i] = it->second;
  }
  const int slots = int(slot_of_device.size());
  if (host_ranks.size() == 1) {
    if (lend) out.pool = std::make_shared<core_pool>(out.cores, slots, per_actor);
    if (par.processes) {  // the others' collectives below
      par.processes->allgather(std::string());
      par.processes->barrier();
      par.processes->barrier();
    }
    return out;
  }
  // Several processes here: the host's first creates the counters, the
  // others map them, then the name goes.
  const bool first = host_ranks.front() == me;
  const std::string name =
      first ? process_scoped_name("cores", fmt::format("{:016x}", out.nonce)) : std::string();
  // The creator's name, which carries its process (process_scoped_name).
  const auto names = par.processes->allgather(name);
  std::shared_ptr<shared_region> region;
  if (lend && first) {
    region = std::make_shared<shared_region>(shared_region::create(name, sizeof(core_pool_state)));
    auto* st = new (region->data()) core_pool_state();
    st->init(out.cores, slots, per_actor);
  }
  par.processes->barrier();
  if (lend && !first)
    region = std::make_shared<shared_region>(
        shared_region::open(names[size_t(host_ranks.front())], sizeof(core_pool_state)));
  par.processes->barrier();
  if (region) {
    region->unlink();
    out.pool = std::make_shared<core_pool>(static_cast<core_pool_state*>(region->data()), region);
  }
  return out;
}

std::string coordinator::host_key() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(name) + "/" + boot;
}

std::set<int> coordinator::pipeline_peers() const {
  std::set<int> peers;
  const int virtual_stages = par.virtual_stages();
  for (int d = 0; d < par.dp; ++d)
    for (int t = 0; t < par.tp; ++t)
      for (int v = 0; v + 1 < virtual_stages; ++v) {
        const int a = place.rank(d, v, t), b = place.rank(d, v + 1, t);
        if (a != b && (a == me || b == me)) peers.insert(a == me ? b : a);
      }
  return peers;
}

comm::channel_rings coordinator::make_rings(const lending& host) {
  // The peers: this host's pipeline peers (none with the rings off: the
  // collective still runs).
  std::set<int> peers;
  if (par.shared_rings)
    for (int other : pipeline_peers())
      if (std::count(host.host_ranks.begin(), host.host_ranks.end(), other)) peers.insert(other);
  // Room for four micro-batches' activations in fp32, within [8, 256] MiB:
  // the receiver copies a tensor out as soon as its header arrives, so few
  // are ever in a ring at once.
  const size_t activation = size_t(par.micro_batch_rows(opts.batch)) * size_t(opts.model.max_seq) *
                            size_t(opts.model.dim) * sizeof(float);
  const size_t capacity = std::clamp<size_t>(4 * activation, size_t{8} << 20, size_t{256} << 20);
  auto out =
      comm::make_host_rings(*par.processes, {peers.begin(), peers.end()}, capacity, host.nonce);
  if (!out.to.empty() || !out.from.empty())
    spdlog::debug("process {}: shared rings of {} MiB to {} and from {} processes", me,
                  capacity >> 20, out.to.size(), out.from.size());
  return out;
}

void coordinator::make_channel(const lending& host, int host_threads) {
#ifdef MERAK_WITH_UCX
  auto rings = make_rings(host);
  comm::ucx_options uo;
  uo.timeout = timeout();
  // A tensor moves while both processes' stage threads compute on the same
  // cores: read by the receiver in one single-copy pass (cma) it arrives
  // whenever that thread runs once, whereas through the shared-memory FIFO
  // every segment waits for both channel threads to be scheduled together.
  uo.cma_min_bytes = size_t{64} << 10;
  std::shared_ptr<comm::transport> data = comm::make_ucx_transport(par.processes, uo);
  spdlog::debug("process {}: tensor channel over UCX ({})", me, comm::ucx_setting_of(*data));
  // Device tensors to the pipeline peers over device links (NCCL) where the
  // device's kind has them, else through host copies.
  const auto peers = pipeline_peers();
  auto links = comm::make_device_links(*data, {peers.begin(), peers.end()}, opts.where);
  if (!links.empty())
    spdlog::debug("process {}: {} links to {} peers", me, links.begin()->second->name(),
                  links.size());
  group_links.push_back(data);  // cancelled with the others when the job fails
  auto to = deliveries;
  auto home = caf::actor_cast<failure_api>(*self);
  // The channel's thread polls between tensors only where the host has a
  // core for it beside the compute (idle_wait.hpp).
  const auto spin = spin_budget(par.idle_spin_us, host_threads);
  spdlog::debug("process {}: tensor channel polls {} us after traffic", me, spin.count());
  channel = std::make_shared<comm::tensor_channel>(
      data,
      [to, home](int peer, const comm::tensor_label& l, model::tensor x) {
        const std::optional<tensor_kind> kind = tensor_kind_of(l.kind);
        if (!kind) {
          caf::anon_send(home, job_failed{fmt::format(
                                   "tensor channel: process {} sent a tensor of unknown kind {}",
                                   peer, l.kind)});
          return;
        }
        stage_api a;
        {
          std::lock_guard lock(to->mu);
          if (l.dst >= 0 && size_t(l.dst) < to->to.size()) a = to->to[size_t(l.dst)];
        }
        if (!a) return;  // not ours: the sender's placement differs (refused at start)
        caf::anon_send(a, stage_tensor{*kind, l.mb, l.value, tensor_ref::make(std::move(x))});
      },
      [home](const std::string& what) {
        caf::anon_send(home, job_failed{"tensor channel: " + what});
      },
      spin, std::move(rings), std::move(links));
#else
  fail("stage actors on several processes need the UCX transport, which this build lacks");
#endif
}

std::vector<std::shared_ptr<comm::transport>> coordinator::group_endpoints(
    const std::vector<int>& ranks) {
  std::vector<std::shared_ptr<comm::transport>> out(ranks.size());
  if (std::all_of(ranks.begin(), ranks.end(), [&](int r) { return r == ranks.front(); })) {
    if (ranks.front() != me) return out;
    auto group = comm::make_inproc_group(int(ranks.size()));
    for (auto& e : group) e->set_timeout(timeout());
    // MERAK_NCCL_SEMANTICS: matched by order, sends done at the receive.
    if (comm::nccl_semantics()) group = comm::with_nccl_semantics(std::move(group));
    for (size_t k = 0; k < ranks.size(); ++k)
      out[k] = std::shared_ptr<comm::transport>(std::move(group[k]));
    return out;
  }
#ifdef MERAK_WITH_UCX
  comm::ucx_options uo;
  uo.timeout = timeout();
  std::shared_ptr<comm::transport> world = comm::make_ucx_transport(par.processes, uo);
  group_links.push_back(world);
  for (size_t k = 0; k < ranks.size(); ++k)
    if (ranks[k] == me) out[k] = comm::make_group_view(world, ranks);
  return out;
#else
  fail(
      "actors of one group on several processes need the UCX transport, which this build "
      "lacks (MERAK_WITH_UCX)");
#endif
}

}  // namespace merak::actors
