#include "telemetry_source.h"

#include <chrono>
#include <fstream>
#include <thread>

#include "telemetry/telemetry_listener.h"
#include "telemetry/telemetry_queue.h"
#include "util/error.h"
#include "util/progress.h"

namespace stoker {

TelemetrySource::TelemetrySource(QObject* parent) : BackgroundJob(parent), queue_(std::make_shared<TelemetryQueue>()) {}
TelemetrySource::~TelemetrySource() { stopAndWait(); }

std::vector<TelemetryRecord> TelemetrySource::takeRecords() { return queue_->takeAll(); }
qint64 TelemetrySource::dropped() const { return queue_->dropped(); }

bool TelemetrySource::listen(const QString& address) {
  return launch([this, address] {
    TelemetryListener listener(address.toStdString());
    connections_ = 0;
    badLines_ = 0;
    Q_EMIT listening(listener.port());
    while (!cancelToken()->cancelled()) {
      for (auto& r : listener.poll(100)) queue_->push(std::move(r));
      connections_ = listener.connections();
      badLines_ = listener.badLines();
    }
    cancelToken()->throwIfCancelled("monitor");
  });
}

bool TelemetrySource::connectTo(const QString& address) {
  return launch([this, address] {
    TelemetryListener listener("");
    listener.dial(address.toStdString());  // a malformed address fails the job with its message
    connections_ = 0;
    badLines_ = 0;
    Q_EMIT dialling(address);
    while (!cancelToken()->cancelled()) {
      for (auto& r : listener.poll(100)) queue_->push(std::move(r));
      connections_ = listener.connections();
      badLines_ = listener.badLines();
    }
    cancelToken()->throwIfCancelled("monitor");
  });
}

bool TelemetrySource::follow(const QString& path) {
  return launch([this, path] {
    std::ifstream in(path.toStdString());
    if (!in) throwIo(path.toStdString(), "cannot open", errno);
    badLines_ = 0;
    Q_EMIT following(path);
    std::string line, partial;
    while (!cancelToken()->cancelled()) {
      const bool got = static_cast<bool>(std::getline(in, line));
      if (!got || in.eof()) {
        // At the end: keep an unfinished last line and wait for the rest.
        if (got) partial += line;
        in.clear();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      partial += line;
      if (partial.empty()) continue;
      // A file waits for the reader (a live listener cannot): a long session replays whole.
      while (queue_->size() >= queue_->limit() / 2 && !cancelToken()->cancelled())
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      try {
        queue_->push(telemetryFromJson(partial));
      } catch (const Error&) {
        ++badLines_;
      }
      partial.clear();
    }
    cancelToken()->throwIfCancelled("monitor");
  });
}

}  // namespace stoker
