// c_api_handles: the loader and epoch handles of the C ABI as ids into a table, not pointers.
//
// Why: a script may close a loader or an epoch from one thread (another Python thread, a signal
// handler, atexit) while another thread is inside a call with it -- waiting in next() with the GIL
// released. Freeing the object then was a use-after-free. Here every call holds the object
// (a shared_ptr) for its duration; closing removes the table's reference, so the object ends when
// the last call using it returns, and a closed id is refused, never dereferenced. Ids are never
// reused, so a stale id cannot reach a later object.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace stoker::capi {

// Calls in flight over every table: atexit waits for them to end (stoker_quiesce) so that no
// thread is still destroying a loader while the process exits.
class CallsInFlight {
 public:
  static CallsInFlight& instance() {
    static auto* calls = new CallsInFlight;  // never destroyed: used by threads still running at exit
    return *calls;
  }
  void begin() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++count_;
  }
  void end() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (--count_ == 0) idle_.notify_all();
  }
  // In a fork's child, where the parent's threads (and their calls) are gone: their count kept
  // the child's exit waiting the whole quiesce, and a mutex held at the fork would deadlock it.
  void forgetAfterFork() {
    new (&mutex_) std::mutex();
    new (&idle_) std::condition_variable();
    count_ = 0;
  }
  // True once none is in flight, false after `ms` with some still running.
  bool waitIdle(int ms) {
    std::unique_lock<std::mutex> lock(mutex_);
    return idle_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return count_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable idle_;
  std::int64_t count_ = 0;
};

// One call's hold on an object: the object outlives the call even when it is closed meanwhile
// (it is then destroyed here, at the call's end, on the caller's thread).
template <class T>
class Use {
 public:
  explicit Use(std::shared_ptr<T> held) : held_(std::move(held)) {
    if (held_) CallsInFlight::instance().begin();
  }
  ~Use() {
    if (!held_) return;
    held_.reset();
    CallsInFlight::instance().end();
  }
  Use(Use&& other) noexcept : held_(std::move(other.held_)) {}  // the hold moves, counted once
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;
  Use& operator=(Use&&) = delete;
  explicit operator bool() const { return static_cast<bool>(held_); }
  T* operator->() const { return held_.get(); }
  T& operator*() const { return *held_; }
  const std::shared_ptr<T>& shared() const { return held_; }

 private:
  std::shared_ptr<T> held_;
};

template <class T>
class HandleTable {
 public:
  // The id for `object`, as the opaque pointer the C ABI hands out.
  void* add(std::shared_ptr<T> object) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::uintptr_t id = next_++;
    live_.emplace(id, std::move(object));
    return reinterpret_cast<void*>(id);
  }
  // The object for a call, or an empty Use when the id was closed (or never given).
  Use<T> use(const void* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(reinterpret_cast<std::uintptr_t>(handle));
    return Use<T>(it == live_.end() ? nullptr : it->second);
  }
  // Takes the id out of the table: the object ends when the returned reference and every call
  // using it have let go (the caller drops it outside the table's lock: destroying can be slow).
  std::shared_ptr<T> remove(const void* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(reinterpret_cast<std::uintptr_t>(handle));
    if (it == live_.end()) return nullptr;
    std::shared_ptr<T> object = std::move(it->second);
    live_.erase(it);
    return object;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::uintptr_t, std::shared_ptr<T>> live_;
  std::uintptr_t next_ = 1;
};

}  // namespace stoker::capi
