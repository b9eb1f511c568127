#include "util/job_threads.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#include "util/run_jobs.h"

namespace stoker {
namespace {

// Helpers that run one job body at a time alongside their owner thread.
class KeptThreads {
 public:
  ~KeptThreads() {
    if (::getpid() != owner_) {
      // A forked child's copy: its helpers stayed in the parent. Nothing to join, and a
      // std::thread destroyed while joinable would terminate the process, so they are let go.
      new std::vector<std::thread>(std::move(threads_));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  bool busy() const { return busy_; }
  // This thread's helpers stayed in the parent of a fork.
  bool forkedAway() const { return ::getpid() != owner_; }

  // body() on `helpers` helper threads while the caller runs `own`; returns once every run has
  // returned. Neither may throw.
  void run(int helpers, const std::function<void()>& body, const std::function<void()>& own) {
    busy_ = true;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(threads_.size()) < helpers) threads_.emplace_back([this] { loop(); });
      job_ = &body;
      wanted_ = helpers;
      taken_ = 0;
    }
    wake_.notify_all();
    own();
    std::unique_lock<std::mutex> lock(mutex_);
    // The caller is done: every item is taken (or the rest are not wanted). Helpers not started
    // yet have nothing to do.
    wanted_ = taken_;
    done_.wait(lock, [&] { return running_ == 0; });
    job_ = nullptr;
    busy_ = false;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || (job_ && taken_ < wanted_); });
      if (stop_) return;
      ++taken_;
      ++running_;
      const std::function<void()>* job = job_;
      lock.unlock();
      (*job)();
      lock.lock();
      if (--running_ == 0) done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void()>* job_ = nullptr;  // guarded by mutex_
  int wanted_ = 0, taken_ = 0, running_ = 0;     // guarded by mutex_
  bool stop_ = false;                            // guarded by mutex_
  bool busy_ = false;                            // the owner thread's alone
  const pid_t owner_ = ::getpid();
};

}  // namespace

void forEachFetchedInOrder(std::int64_t count, int threads, const std::function<void(std::int64_t)>& fetch,
                           const std::function<void(std::int64_t)>& use, double* waited) {
  using Clock = std::chrono::steady_clock;
  thread_local std::unique_ptr<KeptThreads> keptThreads;
  if (keptThreads && keptThreads->forkedAway()) {
    // A forked child's copy holds the parent's helpers, which do not run here: the job was handed
    // to nobody and the caller waited for ever. Its lock may even have been held at the fork, so
    // it is left as it is (a few bytes) and new helpers are made.
    (void)keptThreads.release();
  }
  if (!keptThreads) keptThreads = std::make_unique<KeptThreads>();
  KeptThreads& kept = *keptThreads;
  const int helpers = static_cast<int>(std::clamp<std::int64_t>(count, 1, std::max(threads, 1)));
  if (count <= 1 || kept.busy()) {
    const auto start = Clock::now();
    forEachInParallel(count, threads, fetch);
    if (waited) *waited += std::chrono::duration<double>(Clock::now() - start).count();
    for (std::int64_t i = 0; i < count; ++i) use(i);
    return;
  }
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::condition_variable fetched;
  std::vector<char> done(static_cast<std::size_t>(count), 0);  // guarded by mutex
  std::exception_ptr failure;
  kept.run(
      helpers,
      [&] {
        for (std::int64_t i; !stop.load(std::memory_order_relaxed) && (i = next++) < count;) {
          fetch(i);
          {
            std::lock_guard<std::mutex> lock(mutex);
            done[static_cast<std::size_t>(i)] = 1;
          }
          fetched.notify_one();  // only the caller waits
        }
      },
      [&] {
        try {
          for (std::int64_t i = 0; i < count; ++i) {
            {
              std::unique_lock<std::mutex> lock(mutex);
              if (!done[static_cast<std::size_t>(i)]) {
                const auto start = Clock::now();
                fetched.wait(lock, [&] { return done[static_cast<std::size_t>(i)] != 0; });
                if (waited) *waited += std::chrono::duration<double>(Clock::now() - start).count();
              }
            }
            use(i);
          }
        } catch (...) {
          failure = std::current_exception();
          stop = true;  // run() then waits for the fetches still running
        }
      });
  if (failure) std::rethrow_exception(failure);
}

}  // namespace stoker
