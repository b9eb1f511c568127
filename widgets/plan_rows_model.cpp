#include "plan_rows_model.h"

#include <QBrush>
#include <QLocale>
#include <algorithm>

#include "plan_grid_view.h"

namespace stoker {

void PlanRowsModel::setRows(QVector<Row> rows, qint64 totalSamples) {
  beginResetModel();
  rows_ = std::move(rows);
  total_ = std::max<double>(1, static_cast<double>(totalSamples));
  endResetModel();
}

int PlanRowsModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(rows_.size()); }

int PlanRowsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : 5; }

QVariant PlanRowsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rows_.size()) return {};
  const int k = index.row();
  if (role == Qt::BackgroundRole) return index.column() == 0 ? QVariant(QBrush(PlanGridView::rankColor(k))) : QVariant();
  if (role != Qt::DisplayRole) return {};
  const Row& row = rows_[k];
  switch (index.column()) {
    case 0: return QString::number(k);
    case 1: return QLocale().toString(row.samples);
    case 2: return QLocale().toString(row.padding);
    case 3: return QLocale().toString(row.steps);
    case 4: return QString::number(100.0 * static_cast<double>(row.samples) / total_, 'f', 1) + " %";
    default: return {};
  }
}

QVariant PlanRowsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, orientation, role);
  switch (section) {
    case 0: return tr("rank");
    case 1: return tr("samples");
    case 2: return tr("padding");
    case 3: return tr("steps");
    case 4: return tr("share");
    default: return {};
  }
}

}  // namespace stoker
