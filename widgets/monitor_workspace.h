// monitor_workspace: watch a running job's data feeding. Listens for
// telemetry from any number of ranks (or follows a telemetry file), plots
// each rank's devices live, and keeps a per-rank table that classifies each
// device by its data-wait share: < 5 % fine, 5-20 % moderate, >= 20 %
// input-bound (highlighted).
#pragma once

#include <QWidget>

class QLabel;
class QLineEdit;
class QPushButton;
class QTableWidget;
class QTimer;

namespace stoker {

class TelemetryPlots;
class TelemetrySource;

class MonitorWorkspace : public QWidget {
  Q_OBJECT
 public:
  explicit MonitorWorkspace(QWidget* parent = nullptr);
  ~MonitorWorkspace() override;

  TelemetryPlots* plots() const { return plots_; }
  QTableWidget* table() const { return table_; }
  TelemetrySource* source() const { return source_; }
  void setAddress(const QString& address);
  int port() const { return port_; }
  QString statusText() const;
  // The classification shown for (rank, device), or "" when no row.
  QString verdict(int rank, const QString& device) const;

 public Q_SLOTS:
  void listen();
  void followFile(const QString& path);
  void stop();

 Q_SIGNALS:
  void listening(int port);
  void recordsArrived(int count);
  void failed(const QString& message);

 private:
  void beginSession();  // a source started: clear the last session's rows and plots
  void drain();
  int rowFor(int rank, const QString& device);

  TelemetrySource* source_;
  TelemetryPlots* plots_;
  QLineEdit* address_;
  QPushButton* listenButton_;
  QPushButton* followButton_;
  QPushButton* stopButton_;
  QLabel* status_;
  QTableWidget* table_;
  QTimer* drainTimer_;
  QString sourceText_;
  int port_ = 0;
  qint64 records_ = 0;
};

}  // namespace stoker
