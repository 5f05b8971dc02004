#pragma once
// Helpers for tests of comm/: run one function per rank on its own thread.

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/inproc.hpp"

namespace merak::comm::testing {

// Runs fn(endpoint) for every rank of an in-process group of `size`, one
// thread per rank; returns each rank's error message ("" when it returned).
// With `wrap`, over the group it makes of the in-process endpoints.
inline std::vector<std::string> run_ranks(
    int size, const std::function<void(transport&)>& fn,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(20000),
    const std::function<std::vector<std::unique_ptr<transport>>(
        std::vector<std::unique_ptr<transport>>)>& wrap = {}) {
  auto group = make_inproc_group(size, timeout);
  if (wrap) group = wrap(std::move(group));
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(*group[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace merak::comm::testing
