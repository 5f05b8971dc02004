#pragma once
// Test helpers for the bootstrap: an environment from a map, and a job's
// ranks joined on one thread each.

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "job/bootstrap.hpp"

namespace merak::job::test {

inline env_lookup fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* v) -> const char* {
    auto it = vars.find(v);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// connect_bootstrap, then fn, on one thread per rank; the errors by rank
// ("" where none).
inline std::vector<std::string> join_ranks(const std::vector<bootstrap_options>& opts,
                                           const std::function<void(bootstrap&)>& fn) {
  std::vector<std::string> errors(opts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < opts.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        auto b = connect_bootstrap(resolve_bootstrap(opts[i], fake_env({})));
        fn(*b);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace merak::job::test
