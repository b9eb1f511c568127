#include "series_namer.h"

#include <QSet>

namespace stoker {

QString SeriesNamer::name(const TelemetryRecord& r, const QString& base,
                          const std::function<void(const QString&, const QString&)>& renamed) {
  const Series series{QString::fromStdString(r.host), QString::fromStdString(r.loader), base, r.pid};
  const QString identity = QStringList{series.host, QString::number(series.pid), series.loader, base}.join('|');
  if (const auto it = nameOf_.constFind(identity); it != nameOf_.constEnd()) return *it;
  seriesOf_.insert(identity, series);
  QStringList& sharing = sharing_[base];
  sharing << identity;
  for (const QString& other : sharing) {  // a second series under this name: rename the first ones
    const QString now = compose(other), before = nameOf_.value(other);
    nameOf_.insert(other, now);
    if (!before.isEmpty() && before != now && renamed) renamed(before, now);
  }
  return nameOf_.value(identity);
}

// base + what differs among the series sharing it: the host (and pid), the pid, the loader name.
QString SeriesNamer::compose(const QString& identity) const {
  const Series s = seriesOf_.value(identity);
  QSet<QString> hosts, pids, loaders;
  for (const QString& other : sharing_.value(s.base)) {
    const Series o = seriesOf_.value(other);
    hosts.insert(o.host);
    pids.insert(o.host + "|" + QString::number(o.pid));
    loaders.insert(o.loader);
  }
  QString label = s.base;
  if (hosts.size() > 1) label += " · " + s.host + (pids.size() > hosts.size() ? ":" + QString::number(s.pid) : QString());
  else if (pids.size() > 1) label += " · pid " + QString::number(s.pid);
  if (loaders.size() > 1) label += " · " + (s.loader.isEmpty() ? QStringLiteral("(unnamed loader)") : s.loader);
  return label;
}

void SeriesNamer::clear() {
  nameOf_.clear();
  seriesOf_.clear();
  sharing_.clear();
}

}  // namespace stoker
