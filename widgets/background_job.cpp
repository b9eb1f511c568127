#include "background_job.h"

#include <QString>

#include "util/error.h"
#include "util/progress.h"

namespace stoker {

BackgroundJob::BackgroundJob(QObject* parent) : QObject(parent), cancel_(std::make_unique<CancelToken>()) {}

BackgroundJob::~BackgroundJob() { stopAndWait(); }

void BackgroundJob::stop() { cancel_->cancel(); }

void BackgroundJob::stopAndWait() {
  cancel_->cancel();
  if (thread_.joinable()) thread_.join();
}

bool BackgroundJob::launch(std::function<void()> body) {
  if (busy_.load()) return false;
  if (thread_.joinable()) thread_.join();  // the previous body has ended; reap it
  cancel_ = std::make_unique<CancelToken>();
  busy_ = true;
  thread_ = std::thread([this, body = std::move(body)] {
    QString failure;
    bool cancelled = false;
    try {
      body();
    } catch (const Error& e) {
      cancelled = e.kind() == ErrorKind::Cancelled;
      failure = QString::fromStdString(e.what());
    } catch (const std::exception& e) {
      failure = QString::fromStdString(e.what());
    }
    busy_ = false;
    if (cancelled) Q_EMIT stopped();
    else if (!failure.isEmpty()) Q_EMIT failed(failure);
  });
  return true;
}

}  // namespace stoker
