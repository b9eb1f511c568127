// series_namer: the Monitor's names for series. A series is one process's loader; a DDP job's
// ranks are processes of their own, so "rank 2 cuda:1" names one well -- until two series share
// that name (another job publishing rank 0 on cpu, a job restarted, two loaders in a process).
// Then each of those names says what tells it apart: "rank 0 cpu · pid 4121", "· node2" (another
// host), "· val" (another loader name). The plots and the Stages tab name series alike.
#pragma once

#include <QHash>
#include <QString>
#include <QStringList>
#include <functional>

#include "telemetry/telemetry_record.h"

namespace stoker {

class SeriesNamer {
 public:
  // `base` is what the record would be called alone ("rank 0 cpu"). When a new series makes a
  // name ambiguous, `renamed(old, new)` is called for each series already named, before this
  // returns the new series' name.
  QString name(const TelemetryRecord& r, const QString& base,
               const std::function<void(const QString& oldName, const QString& newName)>& renamed);
  void clear();

 private:
  struct Series {
    QString host, loader, base;
    qint64 pid = 0;
  };
  QString compose(const QString& identity) const;

  QHash<QString, QString> nameOf_;         // identity (host|pid|loader|base) -> the name shown
  QHash<QString, Series> seriesOf_;        // identity -> what it is
  QHash<QString, QStringList> sharing_;    // base -> the identities sharing it
};

}  // namespace stoker
