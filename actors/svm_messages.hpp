#pragma once
// Messages between the consensus ADMM actors (CAF 0.17), in one process and
// across processes (docs/svm.md, "Multi-process consensus"). Included only by
// actors/svm_*.cpp.
//
// Vectors travel as svm_vector: in one process it is moved, not copied;
// across processes its inspect() writes one block of bytes (dense, or sparse
// when shorter; host byte order: little-endian hosts assumed, as everywhere
// in merak), never element by element. Every worker reply names the worker's rank, so the consensus
// side can gather them with plain sends and still watch each worker's `down`.
//
//   consensus -> worker k                        worker k -> consensus
//   (svm_local, zeta)   first iteration          (svm_local, k, theta_k + U1_k)
//   (svm_dual, zeta)                             (svm_dual, k, residuals: 6 numbers,
//                                                  next theta_k + U1_k against zeta)
//   (svm_rho, factor)                            (svm_rho, k, theta_k + U1_k redone with
//                                                  the rhos scaled, duals rescaled)
//   worker processes only, before and after the iterations:
//   (svm_stats)                                  (svm_stats, k, rows, cols, [sum; sq_sum])
//   (svm_setup, scale, n, p, rho1, rho2,         (svm_setup, k): shard scaled, factored
//              method, dense_limit)
//   (svm_eval, w)                                (svm_eval, k, X_k w, y_k)
//   (svm_done)                                   - (the worker stops)
//   any phase, when the maths throw:             (svm_fail, k, what)
//
//   worker process -> rendezvous (the published actor of the consensus side):
//   (svm_hello, token, rank, world, worker)   -> verdict: "" accepted, else why not
//   rendezvous -> consensus side: (svm_joined, rank, worker), (svm_refused, why)

#include <caf/all.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "svm/consensus.hpp"

namespace merak::actors {

using svm_local_atom = caf::atom_constant<caf::atom("svmlocal")>;
using svm_dual_atom = caf::atom_constant<caf::atom("svmdual")>;
using svm_rho_atom = caf::atom_constant<caf::atom("svmrho")>;
using svm_stats_atom = caf::atom_constant<caf::atom("svmstats")>;
using svm_setup_atom = caf::atom_constant<caf::atom("svmsetup")>;
using svm_eval_atom = caf::atom_constant<caf::atom("svmeval")>;
using svm_done_atom = caf::atom_constant<caf::atom("svmdone")>;
using svm_fail_atom = caf::atom_constant<caf::atom("svmfail")>;
using svm_hello_atom = caf::atom_constant<caf::atom("svmhello")>;
using svm_joined_atom = caf::atom_constant<caf::atom("svmjoined")>;
using svm_refused_atom = caf::atom_constant<caf::atom("svmrefused")>;

struct svm_vector {
  std::vector<double> v;
};

// Wire form of an svm_vector (one block of bytes, host byte order):
//   'D' u64 n, n doubles                         dense
//   'S' u64 n, u64 nnz, nnz u32 indices, nnz doubles   sparse: used when
//       shorter, e.g. zeta after the prox (entries equal to +0.0 left out;
//       -0.0 is kept, so the decoded vector is bit-identical)
inline void encode_svm_vector(const std::vector<double>& v, std::vector<char>& out) {
  const uint64_t n = v.size();
  uint64_t nnz = 0;
  for (double x : v) nnz += x != 0 || std::signbit(x);
  auto put = [&out](const void* p, size_t bytes) {
    const char* c = static_cast<const char*>(p);
    out.insert(out.end(), c, c + bytes);
  };
  out.clear();
  if (n <= UINT32_MAX && nnz * (sizeof(uint32_t) + sizeof(double)) + 8 < n * sizeof(double)) {
    out.reserve(17 + nnz * 12);
    out.push_back('S');
    put(&n, 8);
    put(&nnz, 8);
    for (uint64_t i = 0; i < n; ++i)
      if (v[i] != 0 || std::signbit(v[i])) {
        const uint32_t k = uint32_t(i);
        put(&k, 4);
      }
    for (double x : v)
      if (x != 0 || std::signbit(x)) put(&x, 8);
  } else {
    out.reserve(9 + n * 8);
    out.push_back('D');
    put(&n, 8);
    put(v.data(), n * 8);
  }
}

// False when `in` is not a well-formed encoding.
inline bool decode_svm_vector(const std::vector<char>& in, std::vector<double>& v) {
  if (in.size() < 9) return false;
  uint64_t n = 0, nnz = 0;
  std::memcpy(&n, in.data() + 1, 8);
  if (in[0] == 'D') {
    if (in.size() != 9 + n * 8) return false;
    v.resize(n);
    if (n) std::memcpy(v.data(), in.data() + 9, n * 8);
    return true;
  }
  if (in[0] != 'S' || in.size() < 17) return false;
  std::memcpy(&nnz, in.data() + 9, 8);
  if (nnz > n || in.size() != 17 + nnz * 12) return false;
  v.assign(n, 0.0);
  const char* idx = in.data() + 17;
  const char* val = idx + nnz * 4;
  for (uint64_t j = 0; j < nnz; ++j) {
    uint32_t k = 0;
    std::memcpy(&k, idx + j * 4, 4);
    if (k >= n) return false;
    std::memcpy(&v[k], val + j * 8, 8);
  }
  return true;
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, svm_vector& x) {
  std::vector<char> bytes;
  if (Inspector::reads_state) encode_svm_vector(x.v, bytes);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (!decode_svm_vector(bytes, x.v)) return caf::sec::invalid_argument;
    return caf::none;
  });
  return f(caf::meta::type_name("merak.svm_vector"), bytes, load);
}

// Every type above that is not built into CAF, for a system that talks to
// other processes.
inline void add_svm_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<svm_vector>("merak.svm_vector");
}

inline svm_vector to_vector(const Eigen::VectorXd& v) {
  return {std::vector<double>(v.data(), v.data() + v.size())};
}
inline Eigen::VectorXd to_eigen(const svm_vector& v) {
  return Eigen::Map<const Eigen::VectorXd>(v.v.data(), Eigen::Index(v.v.size()));
}
inline svm_vector pack(const svm::worker_residuals& r) {
  return {
      {r.primal_sq, r.r_change_sq, r.local_norm_sq, r.aux_norm_sq, r.dual_norm_sq, double(r.rows)}};
}
// False when `v` is not 6 numbers.
inline bool unpack(const svm_vector& v, svm::worker_residuals& r) {
  if (v.v.size() != 6) return false;
  r.primal_sq = v.v[0], r.r_change_sq = v.v[1], r.local_norm_sq = v.v[2], r.aux_norm_sq = v.v[3];
  r.dual_norm_sq = v.v[4], r.rows = int64_t(v.v[5]);
  return true;
}

}  // namespace merak::actors
