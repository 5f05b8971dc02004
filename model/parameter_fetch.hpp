#pragma once
// Which buckets of parameter values a stage holds whole while it runs its
// nodes under parameter shards (ZeRO stage 3, optim_grads_params): each
// replica keeps only its slice of every bucket (model/distributed_adamw.hpp),
// and a node's buckets are all-gathered just before it runs, the next
// node's fetched ahead, and let go of once neither the running node nor the
// one fetched ahead reads them, nor the next node that reads a bucket
// (nodes that read nothing in between do not let a bucket go that is read
// again right after them). The node fetched ahead is the caller's guess,
// or past it (in the direction it goes) while the nodes read only pinned
// buckets (below).
//
// The gathers are collectives over the data-parallel replicas, matched by
// order: every replica must call before_node and release_all in the same
// sequence (the stage's ops in the same order), and then
// requests the same buckets in the same order. The fetcher decides; the
// caller's hooks do the communication:
//   request(b): start bucket b's all-gather (returns at once);
//   take(b): wait for it and make the parameters' values whole;
//   release(b): let go of bucket b's values.
// Every bucket is requested at most once between its releases, and taken
// (in request order) before it is released: no gather is left behind.
//
// A bucket pinned stays whole once gathered, until release_all: one read
// by more than two separate runs of the nodes that read buckets, and read
// around all of another bucket's readers (the norms and biases of a
// sequence-parallel region, whose gradients end the backward together and
// so fill the last buckets, read between every layer's GEMMs). A gather
// for each run would move it again and again in every pass. Runs are
// counted looking past the nodes of buckets pinned already (the most
// scattered first): a tied weight read at both ends of a stage (two runs)
// is gathered for each, though it shares a bucket with a layer and norms
// sit between its readers.

#include <cstdint>
#include <functional>
#include <vector>

namespace merak::model {

class parameter_fetcher {
 public:
  struct hooks {
    std::function<void(int)> request, take, release;
  };
  // node_buckets[i]: the buckets node first + i reads; `buckets`: how many.
  parameter_fetcher(std::vector<std::vector<int>> node_buckets, int first, int buckets,
                    hooks h);

  // Node n is about to run; `next` (-1: none) will most likely run after it.
  // On return every bucket n reads is whole.
  void before_node(int n, int next);
  // Until the next call, the buckets of nodes [lo, hi) are not let go of,
  // nor those requested meanwhile (fetched ahead for the next span); an
  // empty range holds none. Sub-pipelined tensor parallelism runs one span
  // of nodes once per sub-batch, and a bucket released between them would
  // be gathered again. Requests stay as before_node makes them.
  void hold(int lo, int hi);
  // Every bucket let go of (the end of a step's backward; before a load).
  void release_all();

  // Buckets whole or requested now, and the most held at once so far.
  int held() const;
  int most_held() const { return most_held_; }
  // Gathers requested since construction.
  int64_t requests() const { return requests_; }
  // Whether bucket b stays whole once gathered (above).
  bool pinned(int b) const { return pinned_.at(size_t(b)) != 0; }

 private:
  enum class where : uint8_t { absent, requested, whole };
  const std::vector<int>& of(int n) const;
  // From `next` on, away from n: the first node that reads a bucket not
  // pinned, or (unless past_empty) reads nothing; -1: none.
  int next_reader(int n, int next, bool past_empty) const;
  void request(int b);
  void take(int b);
  void release(int b);

  std::vector<std::vector<int>> node_buckets_;
  int first_;
  hooks hooks_;
  std::vector<where> state_;
  std::vector<int> pending_;  // requested, not taken: in request order
  std::vector<char> held_;    // per bucket: read by a node of the held span
  std::vector<char> fresh_;   // per bucket: requested while this span is held
  std::vector<char> pinned_;  // per bucket: kept whole until release_all
  bool holding_ = false;
  int most_held_ = 0;
  int64_t requests_ = 0;
};

}  // namespace merak::model
