// data/device_fence: a point in a device's queue of work -- on CUDA an event recorded on a stream
// -- so that memory the device may still be reading or writing is not handed out again before
// the device got past it. Host devices (cpu, sim) finish their work before returning and have
// no fences (a null pointer stands for "already done").
#pragma once

#include <functional>
#include <memory>
#include <vector>

namespace stoker {

class DeviceFence {
 public:
  virtual ~DeviceFence() = default;
  // Whether the device got past the fence; never blocks, never throws (a device that failed
  // counts as past it: it does no more work).
  virtual bool done() const = 0;
  // Blocks the calling thread until done(). Never throws.
  virtual void wait() const = 0;
};

// Makes a fence when called: bound at a batch's hand-over to the stream its consumer uses, called
// when the batch's block is released, so the fence follows everything queued on it until then.
using FenceMaker = std::function<std::shared_ptr<DeviceFence>()>;

// Past all of its fences (a batch read on several streams: Batch::recordStream).
class FenceSet : public DeviceFence {
 public:
  explicit FenceSet(std::vector<std::shared_ptr<DeviceFence>> fences) : fences_(std::move(fences)) {}
  bool done() const override {
    for (const auto& f : fences_)
      if (!f->done()) return false;
    return true;
  }
  void wait() const override {
    for (const auto& f : fences_) f->wait();
  }

 private:
  std::vector<std::shared_ptr<DeviceFence>> fences_;
};

// The fences that are not null as one: null for none, the fence itself for one.
inline std::shared_ptr<DeviceFence> allOf(std::vector<std::shared_ptr<DeviceFence>> fences) {
  std::vector<std::shared_ptr<DeviceFence>> kept;
  for (auto& f : fences)
    if (f) kept.push_back(std::move(f));
  if (kept.empty()) return nullptr;
  if (kept.size() == 1) return kept.front();
  return std::make_shared<FenceSet>(std::move(kept));
}

}  // namespace stoker
