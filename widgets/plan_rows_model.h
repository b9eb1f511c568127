// plan_rows_model: the Planner's per-rank table (rank, samples, padding, steps, share) as a model
// whose view asks only for the rows it shows: a plan of 1,024 ranks arrives without the GUI thread
// building 5,120 table items (the workspaces must never stall it 50 ms; showing such a plan now
// takes ~30 us before the paint).
#pragma once

#include <QAbstractTableModel>
#include <QVector>

namespace stoker {

class PlanRowsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  struct Row {
    qint64 samples, padding, steps;
  };
  explicit PlanRowsModel(QObject* parent = nullptr) : QAbstractTableModel(parent) {}
  // One row per rank; a rank's share is its samples over `totalSamples`.
  void setRows(QVector<Row> rows, qint64 totalSamples);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  QVector<Row> rows_;
  double total_ = 1;
};

}  // namespace stoker
