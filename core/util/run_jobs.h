// util/run_jobs: run one job body on N threads (the caller's included) and
// join them. The bodies pull their own work items; checkpoint jobs block on
// I/O, so they get threads of their own rather than libtorch's compute pool.
#pragma once

#include <functional>
#include <thread>
#include <vector>

namespace stoker {

inline void runJobs(int count, const std::function<void()>& body) {
  std::vector<std::thread> threads;
  for (int j = 1; j < count; ++j) threads.emplace_back(body);
  body();
  for (auto& t : threads) t.join();
}

}  // namespace stoker
