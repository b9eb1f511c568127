#include "data/worker_pool.h"

#include <system_error>

#include "util/error.h"

namespace stoker {
namespace {
std::atomic<std::int64_t> gThreadsStarted{0};
}

WorkerPool::WorkerPool(int threads, bool persistent) : threads_(threads), persistent_(persistent) {
  if (!persistent_) return;
  try {
    for (int w = 0; w < threads_; ++w) {
      pool_.emplace_back([this, w] { park(w); });
      gThreadsStarted.fetch_add(1);
    }
  } catch (const std::system_error& e) {
    // No thread to be had (a pids cgroup or RLIMIT_NPROC): the ones started are stopped and the
    // loader says why. Before, the destructor never ran and the joinable threads terminated the
    // process.
    stopThreads();
    throw Error(ErrorKind::Io, "worker threads", "cannot start " + std::to_string(threads_) + " (" + e.what() +
                                                     "; a limit on processes or threads? fewer num_workers need fewer)");
  }
}

WorkerPool::~WorkerPool() {
  join();
  stopThreads();
}

void WorkerPool::stopThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  for (auto& t : pool_)
    if (t.joinable()) t.join();
}

void WorkerPool::park(int worker) {
  std::uint64_t seen = 0;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return quit_ || generation_ != seen; });
      if (quit_) return;
      seen = generation_;
      job = job_;
    }
    job(worker);
    job = nullptr;  // drop what the job holds before join() can return
    std::lock_guard<std::mutex> lock(mutex_);
    if (--running_ == 0) done_.notify_all();
  }
}

void WorkerPool::run(Job job) {
  join();
  if (persistent_) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = std::move(job);
      running_ = threads_;
      ++generation_;
    }
    wake_.notify_all();
    return;
  }
  job_ = std::move(job);
  running_ = threads_;
  for (int w = 0; w < threads_; ++w) {
    try {
      pool_.emplace_back([this, w] {
        job_(w);
        std::lock_guard<std::mutex> lock(mutex_);
        if (--running_ == 0) done_.notify_all();
      });
    } catch (const std::system_error&) {
      // No more threads to be had: the workers started pull every batch (fewer of them); the
      // ones not started are not waited for (join() waited for ever).
      if (w == 0) throw Error(ErrorKind::Io, "worker threads", "cannot start one (a limit on processes or threads?)");
      std::lock_guard<std::mutex> lock(mutex_);
      running_ -= threads_ - w;
      if (running_ == 0) done_.notify_all();
      break;
    }
    gThreadsStarted.fetch_add(1);
  }
}

void WorkerPool::join() {
  if (persistent_) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return running_ == 0; });
    job_ = nullptr;
    return;
  }
  for (auto& t : pool_)
    if (t.joinable()) t.join();
  pool_.clear();
  running_ = 0;
  job_ = nullptr;
}

std::int64_t WorkerPool::threadsStarted() { return gThreadsStarted.load(); }

}  // namespace stoker
