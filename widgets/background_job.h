// background_job: one piece of long work at a time on a thread of its own,
// for the workspaces (a loader run, a conversion). Subclasses launch a body
// that polls the core's CancelToken; signals emitted from the body reach GUI
// receivers queued. Errors become failed(message), Error(Cancelled) becomes
// stopped(). The destructor cancels and joins, so no work outlives its widget.
#pragma once

#include <QObject>
#include <atomic>
#include <functional>
#include <memory>
#include <thread>

namespace stoker {

class CancelToken;

class BackgroundJob : public QObject {
  Q_OBJECT
 public:
  explicit BackgroundJob(QObject* parent = nullptr);
  ~BackgroundJob() override;

  bool busy() const { return busy_.load(); }
  void stop();  // asks the running body to stop at its next safe point
  // Cancels and joins: afterwards the body emits nothing more. Subclass destructors call it
  // first (their members must outlive the body), and so do the workspaces that own a job.
  void stopAndWait();

 Q_SIGNALS:
  void failed(const QString& message);
  void stopped();

 protected:
  // Runs `body` on the job's thread; false (nothing done) while busy.
  bool launch(std::function<void()> body);
  const CancelToken* cancelToken() const { return cancel_.get(); }
  // Call just before the body's last signal, so a slot may launch again.
  void markIdle() { busy_ = false; }

 private:
  std::unique_ptr<CancelToken> cancel_;
  std::thread thread_;
  std::atomic<bool> busy_{false};
};

}  // namespace stoker
