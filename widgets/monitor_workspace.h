// monitor_workspace: watch a running job's data feeding. Listens for
// telemetry from any number of ranks, dials publishers that listen, or reads
// a telemetry file (a saved session replays, a growing one is followed).
// Plots each rank's devices live -- past 8 series, the median across ranks
// with a min-max band -- and a ranks x time heat map of the data-wait share
// or samples/s. A sortable per-rank table classifies each device by its
// data-wait share (< 5 % fine, 5-20 % moderate, >= 20 % input-bound), and a
// banner names the straggler ranks (telemetry/stragglers). Every session is
// recorded as JSON lines: Save session… keeps it, Export… writes the plots as
// PNG and the records as CSV. With a Prometheus address, what arrives is also
// served on /metrics (telemetry/prometheus_exporter), for existing dashboards.
#pragma once

#include <QHash>
#include <QPair>
#include <QStringList>
#include <QElapsedTimer>
#include <QWidget>
#include <tuple>
#include <map>
#include <memory>
#include <vector>

#include "telemetry/telemetry_record.h"

class QComboBox;
class QFile;
class QLabel;
class QLineEdit;
class QPushButton;
class QTabWidget;
class QTableWidget;
class QTableWidgetItem;
class QTimer;

namespace stoker {

class MetricsHttpServer;
class SessionExport;
// What tells two series apart: rank, device, host, pid, loader name.
using SeriesKey = std::tuple<int, std::string, std::string, std::int64_t, std::string>;
SeriesKey seriesKey(const TelemetryRecord& r);
class PrometheusExporter;
class RankHeatMap;
class StageBreakdownView;
class TelemetryPlots;
class TelemetrySource;

class MonitorWorkspace : public QWidget {
  Q_OBJECT
 public:
  explicit MonitorWorkspace(QWidget* parent = nullptr);
  ~MonitorWorkspace() override;

  StageBreakdownView* stages() const { return stages_; }
  TelemetryPlots* plots() const { return plots_; }
  RankHeatMap* heatMap() const { return heatMap_; }
  QTabWidget* views() const { return views_; }
  QTableWidget* table() const { return table_; }
  TelemetrySource* source() const { return source_; }
  void setAddress(const QString& address);
  // "[HOST]:PORT" to serve /metrics on from the next session; "" for none.
  void setPrometheusAddress(const QString& address);
  int prometheusPort() const;  // 0 when not serving
  int port() const { return port_; }
  QString statusText() const;
  QString stragglerText() const;  // the banner's text, "" when no straggler
  // The classification shown for (rank, device), or "" when no row; with several jobs publishing
  // as (rank, device), these read the newest one's row. "ended HH:MM:SS" once it stopped publishing.
  QString verdict(int rank, const QString& device) const;
  // The table's text for (rank, device) in the column headed `header`, or "" when none.
  QString cellText(int rank, const QString& device, const QString& header) const;
  qint64 recordCount() const { return records_; }
  // How long a series may be silent (at least; 5 of its intervals otherwise) before it is shown
  // as ended. 5 s by default.
  void setEndedAfterMs(qint64 ms) { endedMs_ = ms; }
  // Hands the loader publishing as (rank, device) to the Loader workspace (tuneRequested) when its
  // records carry its dataset spec and options (stoker.Loader in a Python script sends them);
  // false, with the reason in the status line, when they do not.
  bool tuneLoader(int rank, const QString& device);

 public Q_SLOTS:
  void listen();
  void connectToPublisher();  // dial the address (a publisher started with --publish listen:PORT)
  void followFile(const QString& path);
  void stop();
  // The session so far as JSON lines (reopen it with followFile), written off the GUI thread:
  // sessionWritten says when. False when no session is recorded or a write is under way.
  bool saveSession(const QString& path);
  // BASE.png (the plots) and BASE-heatmap.png now, BASE.csv (every record) off the GUI thread
  // (sessionWritten), for BASE.png/BASE.csv/BASE. False when the PNGs cannot be written or the
  // CSV cannot start.
  bool exportSession(const QString& path);
  // A Save session or Export is writing its file (closing the window would stop it).
  bool writingSession() const;

 Q_SIGNALS:
  void listening(int port);
  void recordsArrived(int count);
  // "Tune in Loader": the dataset spec and LoaderOptions JSON of a running loader.
  void tuneRequested(const QString& dataset, const QString& optionsJson);
  void failed(const QString& message);
  // A Save session or Export's file is written (ok) or could not be (the status line says why).
  void sessionWritten(const QString& path, bool ok);

 private:
  void beginSession();  // a source started: clear the last session's rows and plots
  void drain();
  // Fills the series's row; a new series takes the next row the refresh added (nextNewRow_).
  void updateRow(const TelemetryRecord& rec);
  void updateStragglers();
  void showStragglers(const QStringList& lines);
  // The newest series publishing as (rank, device), or none: what the (rank, device) API reads.
  const TelemetryRecord* newest(int rank, const QString& device, SeriesKey* key = nullptr) const;
  QTableWidgetItem* rowItem(int rank, const QString& device) const;
  // Whether a series stopped publishing (no record for 5 of its intervals, at least 5 s).
  bool ended(const SeriesKey& key) const;
  int liveSeries() const;        // series not ended
  bool forgetAnEndedSeries();    // frees a row of an ended series; false when none has ended

  TelemetrySource* source_;
  TelemetryPlots* plots_;
  StageBreakdownView* stages_;
  RankHeatMap* heatMap_;
  QTabWidget* views_;
  QComboBox* heatFigure_;
  QLineEdit* address_;
  QLineEdit* prometheus_;
  QPushButton* listenButton_;
  QPushButton* connectButton_;
  QPushButton* followButton_;
  QPushButton* stopButton_;
  QPushButton* saveButton_;
  QPushButton* exportButton_;
  SessionExport* sessionExport_;  // Save session and Export's CSV, off the GUI thread
  QString sessionExportPath_;     // what it writes
  QPushButton* tuneButton_;
  QLabel* status_;
  QLabel* banner_;
  QTableWidget* table_;
  QTimer* drainTimer_;
  QString sourceText_;
  QString metricsNote_;  // "; Prometheus metrics on port N", or why not
  QString fileNote_;     // "; wrote N records to PATH" or why not: the last Save session / Export, kept in the status line
  int port_ = 0;
  qint64 records_ = 0;
  bool viewChosen_ = false;  // the user picked a tab: no automatic switch to the heat map
  bool stragglers_ = false;  // the banner names some
  bool tableDirty_ = false;  // records arrived since the table was last refreshed
  int nextNewRow_ = 0;  // the next of the rows a refresh added for new series
  qint64 refusedRows_ = 0;  // records of (rank, device)s beyond the table's limit
  // A series is one process's loader: (rank, device, host, pid, loader). Two jobs that both
  // publish rank 0 on cpu, or a job restarted, are two rows and two lines, never one.
  // key -> the row's rank item (rows move when sorted), its latest record, and when records came.
  std::map<SeriesKey, QTableWidgetItem*> rows_;
  std::map<SeriesKey, TelemetryRecord> latest_;
  struct Arrivals {
    qint64 lastMs = 0;       // monotonic ms of the latest record
    double intervalMs = 0;   // the usual gap between its records (moving average)
  };
  std::map<SeriesKey, Arrivals> arrivals_;
  QElapsedTimer clock_;
  qint64 endedMs_ = 5000;
  std::unique_ptr<QFile> session_;  // this session's records, JSON lines, in the temp folder
  bool sessionFull_ = false;        // the recording reached its limit
  std::unique_ptr<PrometheusExporter> exporter_;
  std::unique_ptr<MetricsHttpServer> metricsServer_;
};

}  // namespace stoker
