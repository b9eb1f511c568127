// shard_layout_view: for one tensor, the source shards and the target shards
// drawn as two bars along its split dimension, so a user sees which source
// files each output reads before converting. A tensor split on two dimensions
// (DCP chunks of FSDP + tensor parallel) is drawn as two grids of boxes.
#pragma once

#include <QString>
#include <QVector>
#include <QWidget>

namespace stoker {

struct LayoutSegment {
  qint64 start = 0;
  qint64 length = 0;
  qint64 start2 = 0, length2 = 0;  // along the second dimension of a 2-D split
  QString label;   // file name
  int colour = 0;  // file index
};

struct ShardLayout {
  QString tensor;
  QString dimLabel;  // "dim 0 (rows 0-1023)"
  qint64 extent = 0;
  qint64 extent2 = 0;  // > 0: a 2-D split; boxes run down `extent` and across `extent2`
  QVector<LayoutSegment> source, target;
  QString targetTitle;  // "ranks:3", or empty before a plan
};

class ShardLayoutView : public QWidget {
  Q_OBJECT
 public:
  explicit ShardLayoutView(QWidget* parent = nullptr);
  void setLayout(const ShardLayout& layout);
  const ShardLayout& shardLayout() const { return layout_; }
  QSize sizeHint() const override { return {480, 170}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  ShardLayout layout_;
};

}  // namespace stoker
