// data/worker_pool: the loader's collate threads. run() starts one job on
// every thread and join() waits until all have returned from it. Persistent
// pools keep their threads parked between jobs (persistent_workers); the
// others start threads in run() and end them in join().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace stoker {

class WorkerPool {
 public:
  using Job = std::function<void(int worker)>;
  WorkerPool(int threads, bool persistent);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void run(Job job);
  void join();
  int size() const { return threads_; }
  // Threads started by all pools in this process (tests watch for leaks and
  // for persistent pools not restarting).
  static std::int64_t threadsStarted();

 private:
  void park(int worker);
  void stopThreads();  // parked threads quit, and every thread is joined

  int threads_;
  bool persistent_;
  std::vector<std::thread> pool_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  Job job_;
  std::uint64_t generation_ = 0;
  int running_ = 0;
  bool quit_ = false;
};

}  // namespace stoker
