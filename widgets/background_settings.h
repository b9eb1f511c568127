// background_settings: QSettings written off the GUI thread. Qt writes a settings file through
// QSaveFile, which fdatasyncs it: on a disk busy with write-back (a fresh build's, a checkpoint
// being saved) a Loader run's start blocked the GUI thread for 63-65 ms, twice in a row (the
// fresh-clone CI, right after its build). Writes queue here and one background thread makes them
// in the order asked; value() answers from the queue first, so the GUI thread neither waits for a
// write it asked for nor opens the file while that write is being synced.
#pragma once

#include <QList>
#include <QPair>
#include <QString>
#include <QVariant>

namespace stoker::background_settings {

// Sets each key (as QSettings names it: "group/key") to its value; written soon, in order.
void set(const QList<QPair<QString, QVariant>>& values);
// The key's value as the settings will hold it once the queued writes are made.
QVariant value(const QString& key, const QVariant& fallback = {});
// Returns once every write queued so far is in the file (a workspace's destructor, tests).
void flush();

}  // namespace stoker::background_settings
