// util/run_jobs: run one job body on N threads (the caller's included) and
// join them. The bodies pull their own work items; checkpoint jobs block on
// I/O, so they get threads of their own rather than libtorch's compute pool.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "util/open_progress.h"

namespace stoker {

// The threads carry the caller's open progress and cancel (util/open_progress): a remote open's
// requests made on them stop when the open is stopped, as the caller's own do.
inline void runJobs(int count, const std::function<void()>& body) {
  const OpenProgress open = currentOpenProgress();
  std::vector<std::thread> threads;
  for (int j = 1; j < count; ++j) {
    try {
      threads.emplace_back([&body, open] {
        OpenProgressScope scope(open);
        body();
      });
    } catch (const std::system_error&) {
      break;  // no more threads to be had: the bodies pull their items, so fewer threads do it all
    }
  }
  body();
  for (auto& t : threads) t.join();
}

// body(i) for every i in [0, count), on at most `threads` threads (the caller's included). The
// first exception stops the threads from taking more items and is rethrown here.
inline void forEachInParallel(std::int64_t count, int threads, const std::function<void(std::int64_t)>& body) {
  std::atomic<std::int64_t> next{0};
  std::exception_ptr failure;
  std::mutex failureMutex;
  runJobs(static_cast<int>(std::clamp<std::int64_t>(count, 1, std::max(threads, 1))), [&] {
    for (std::int64_t i; (i = next++) < count;) {
      {
        std::lock_guard<std::mutex> lock(failureMutex);
        if (failure) return;
      }
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failureMutex);
        if (!failure) failure = std::current_exception();
        return;
      }
    }
  });
  if (failure) std::rethrow_exception(failure);
}

}  // namespace stoker
