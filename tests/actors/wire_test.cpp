#include <catch2/catch.hpp>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/messages.hpp"
#include "actors/svm_messages.hpp"

using namespace merak;
using namespace merak::actors;

namespace {

template <class T>
std::vector<char> save(T& x) {
  std::vector<char> buf;
  caf::binary_serializer s(static_cast<caf::execution_unit*>(nullptr), buf);
  REQUIRE(!s(x));
  return buf;
}

template <class T>
caf::error load(const std::vector<char>& buf, T& x) {
  caf::binary_deserializer bd(static_cast<caf::execution_unit*>(nullptr), buf);
  caf::deserializer& d = bd;  // as CAF loads a message: through the base class
  return d(x);
}

// Puts `v` as a big-endian u64 at `at` (CAF's byte order).
void put_be64(std::vector<char>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = char(v >> (56 - 8 * i));
}

}  // namespace

TEST_CASE("wire messages round-trip and refuse lengths their bytes do not hold", "[actors][wire]") {
  svm_stats_reply r;
  r.from = {3, "out of memory"};
  r.rows = 10, r.cols = 2;
  r.sums.v = {1.0, 2.0, 3.0, 4.0};
  auto buf = save(r);
  svm_stats_reply back;
  REQUIRE(!load(buf, back));
  CHECK(back.from.rank == 3);
  CHECK(back.from.error == "out of memory");
  CHECK(back.rows == 10);
  CHECK(back.sums.v == r.sums.v);
  // The error text's length (after the rank's 4 bytes) claims 2^60 bytes:
  // refused without allocating them.
  auto bad = buf;
  put_be64(bad, 4, uint64_t{1} << 60);
  CHECK(load(bad, back));
  // The column sums' length claims one byte more than the message holds.
  bad = buf;
  put_be64(bad, bad.size() - 32 - 8, 33);
  CHECK(load(bad, back));
}

TEST_CASE("a tensor's shape must account for its bytes before it is allocated", "[actors][wire]") {
  tensor_ref t{std::make_shared<model::tensor>(model::shape_t{2, 3})};
  for (int i = 0; i < 6; ++i) t.t->data<float>()[i] = float(i);
  auto buf = save(t);
  tensor_ref back;
  REQUIRE(!load(buf, back));
  REQUIRE(back.t);
  CHECK(back.t->shape() == model::shape_t{2, 3});
  CHECK(back.t->data<float>()[5] == 5.0f);
  // The shape's two entries follow its element count (a varint byte):
  // (3, 2) holds the same bytes and loads.
  auto swapped = buf;
  put_be64(swapped, 1, 3);
  put_be64(swapped, 9, 2);
  REQUIRE(!load(swapped, back));
  CHECK(back.t->shape() == model::shape_t{3, 2});
  // A shape of 2^40 x 2^40 with 24 bytes of data: refused, nothing allocated.
  auto hbuf = buf;
  put_be64(hbuf, 1, uint64_t{1} << 40);
  put_be64(hbuf, 9, uint64_t{1} << 40);
  tensor_ref hb;
  CHECK(load(hbuf, hb));
  CHECK_FALSE(hb.t);
}

TEST_CASE("a stage plan and every op kind cross processes whole", "[actors][wire]") {
  // Every field of the policy: a field left out of inspect() would run a
  // remote stage on another schedule than the scheduler chose.
  stage_plan p{partition::make_policy(partition::schedule_kind::zb_h1, 4, 8, 1), 3};
  auto buf = save(p);
  stage_plan back;
  REQUIRE(!load(buf, back));
  CHECK(back.policy.split_weight);
  CHECK(back.policy.steady == p.policy.steady);
  CHECK(back.checkpoint_nodes == 3);
  stage_plan q{partition::make_policy(partition::schedule_kind::interleaved, 2, 4, 1, false, 3), 0};
  buf = save(q);
  REQUIRE(!load(buf, back));
  CHECK(back.policy.chunks == 3);
  CHECK(back.policy.warm == q.policy.warm);
  using partition::op_kind;
  for (auto kind : {op_kind::F, op_kind::Fpc, op_kind::R, op_kind::B, op_kind::W}) {
    chunk_command c{{kind, 5, 2}};
    buf = save(c);
    chunk_command got;
    REQUIRE(!load(buf, got));
    CHECK(got.op == c.op);
  }
  // An op kind past W is refused on arrival.
  tp_command t{{op_kind::W, 1, 0}};
  buf = save(t);
  buf[0] = char(uint8_t(op_kind::W) + 1);
  tp_command bad;
  CHECK(load(buf, bad));
}
