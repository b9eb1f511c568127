#include "background_settings.h"

#include <QHash>
#include <QMutex>
#include <QMutexLocker>
#include <QSettings>
#include <QThreadPool>
#include <algorithm>

namespace stoker::background_settings {
namespace {

struct Queue {
  Queue() { writer.setMaxThreadCount(1); }  // one writer: the writes stay in the order asked
  // At exit: the last write done, then the queue emptied under its mutex, so the writer's last
  // touch of it is ordered before the frees for any reader of the program (TSan sees the mutex,
  // not the pool's own wait, and reported the hash's free racing with the writer's remove).
  ~Queue() {
    writer.waitForDone();
    QMutexLocker lock(&mutex);
    waiting.clear();
    unwritten.clear();
  }
  QMutex mutex;
  QList<QPair<QString, QVariant>> waiting;  // not yet taken by the writer; guarded by mutex
  QHash<QString, QVariant> unwritten;       // each key queued or being written, its newest value; guarded by mutex
  QThreadPool writer;
};

Queue& queue() {
  static Queue q;
  return q;
}

void writeWaiting() {
  Queue& q = queue();
  QList<QPair<QString, QVariant>> batch;
  {
    QMutexLocker lock(&q.mutex);
    batch.swap(q.waiting);
  }
  if (batch.isEmpty()) return;
  {
    QSettings s;
    for (const auto& [key, value] : batch) s.setValue(key, value);
  }  // synced to the file here
  QMutexLocker lock(&q.mutex);
  for (const auto& entry : batch) {
    const bool queuedAgain =
        std::any_of(q.waiting.begin(), q.waiting.end(), [&](const auto& w) { return w.first == entry.first; });
    if (!queuedAgain) q.unwritten.remove(entry.first);
  }
}

}  // namespace

void set(const QList<QPair<QString, QVariant>>& values) {
  Queue& q = queue();
  {
    QMutexLocker lock(&q.mutex);
    for (const auto& entry : values) {
      q.waiting.append(entry);
      q.unwritten.insert(entry.first, entry.second);
    }
  }
  q.writer.start(writeWaiting);
}

QVariant value(const QString& key, const QVariant& fallback) {
  {
    Queue& q = queue();
    QMutexLocker lock(&q.mutex);
    if (const auto it = q.unwritten.constFind(key); it != q.unwritten.constEnd()) return *it;
  }
  return QSettings().value(key, fallback);
}

void flush() { queue().writer.waitForDone(); }

}  // namespace stoker::background_settings
