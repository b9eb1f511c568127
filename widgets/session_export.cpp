#include "session_export.h"

#include <fcntl.h>
#include <unistd.h>

#include <QFile>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "telemetry/telemetry_csv.h"
#include "telemetry/telemetry_record.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/progress.h"

namespace stoker {
namespace {

// Closes the job's own descriptor of the session however the body ends.
struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;  // a copy's destructor closed the descriptor the job was to read
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

SessionExport::~SessionExport() { stopAndWait(); }

bool SessionExport::saveCopy(const QString& session, qint64 bytes, const QString& path) { return start(session, bytes, path, false); }
bool SessionExport::saveCsv(const QString& session, qint64 bytes, const QString& path) { return start(session, bytes, path, true); }

bool SessionExport::start(const QString& session, qint64 bytes, const QString& path, bool csv) {
  if (busy()) return false;
  auto own = std::make_shared<Fd>();
  own->fd = ::open(QFile::encodeName(session).constData(), O_RDONLY | O_CLOEXEC);
  if (own->fd < 0) return false;
  return launch([this, own, bytes, csv, dst = path.toStdString(), path] {
    const CancelToken* cancel = cancelToken();
    AtomicFile out(dst);
    if (csv) {
      const std::string header = telemetryCsvHeader() + "\n";
      out.write(header.data(), header.size());
    }
    std::vector<char> buffer(4 << 20);
    std::string line;  // a CSV row's record, across reads
    qint64 records = 0;
    for (qint64 at = 0; at < bytes;) {
      cancel->throwIfCancelled(dst);
      const ssize_t n = ::pread(own->fd, buffer.data(), static_cast<std::size_t>(std::min<qint64>(bytes - at, static_cast<qint64>(buffer.size()))), at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throwIo("the recorded session", "cannot read it", errno);
      if (n == 0) break;  // shorter than it was: what there is
      at += n;
      if (!csv) {
        for (ssize_t i = 0; i < n; ++i) records += buffer[static_cast<std::size_t>(i)] == '\n';
        out.write(buffer.data(), static_cast<std::size_t>(n));
        continue;
      }
      for (ssize_t i = 0; i < n; ++i) {
        const char c = buffer[static_cast<std::size_t>(i)];
        if (c != '\n') {
          line += c;
          continue;
        }
        if (line.find_first_not_of(" \t\r") != std::string::npos) {
          try {
            const std::string row = telemetryCsvRow(telemetryFromJson(line)) + "\n";
            out.write(row.data(), row.size());
            ++records;
          } catch (const std::exception&) {
            // every recorded line came from telemetryToJson: none is expected here
          }
        }
        line.clear();
      }
    }
    out.commit();
    markIdle();
    Q_EMIT written(path, records);
  });
}

}  // namespace stoker
