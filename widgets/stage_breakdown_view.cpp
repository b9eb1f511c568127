#include "stage_breakdown_view.h"

#include <qcustomplot.h>

#include <QLabel>
#include <QVBoxLayout>
#include <cmath>

#include "telemetry/stage_verdict.h"

namespace stoker {
namespace {

// Stage colours: a sequence readable on light and dark backgrounds.
const QColor kStageColours[] = {QColor(0x4e, 0x79, 0xa7), QColor(0xe1, 0x57, 0x59), QColor(0xf2, 0x8e, 0x2b),
                                QColor(0x76, 0xb7, 0xb2), QColor(0x59, 0xa1, 0x4f)};
constexpr int kStages = static_cast<int>(sizeof(kTelemetryStages) / sizeof(kTelemetryStages[0]));

}  // namespace

StageBreakdownView::StageBreakdownView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  plot_ = new QCustomPlot(this);
  plot_->setObjectName("stage_plot");
  plot_->setMinimumHeight(140);
  plot_->plotLayout()->insertRow(0);
  plot_->plotLayout()->addElement(0, 0, new QCPTextElement(plot_, tr("Worker time per batch by stage (ms)"), QFont("sans", 9, QFont::Bold)));
  // Horizontal bars: devices on the left axis, milliseconds along the bottom.
  for (int s = 0; s < kStages; ++s) {
    auto* bars = new QCPBars(plot_->yAxis, plot_->xAxis);
    bars->setName(kTelemetryStages[s]);
    bars->setPen(Qt::NoPen);
    bars->setBrush(kStageColours[s]);
    bars->setWidth(0.35);
    if (!bars_.empty()) bars->moveAbove(bars_.back());
    bars_.push_back(bars);
  }
  auto* wait = new QCPBars(plot_->yAxis, plot_->xAxis);
  wait->setName(tr("consumer's data wait"));
  wait->setPen(QPen(palette().color(QPalette::WindowText), 1, Qt::DashLine));
  wait->setBrush(Qt::NoBrush);
  wait->setWidth(0.25);
  bars_.push_back(wait);
  plot_->xAxis->setLabel(tr("ms per batch"));
  // The legend in a column beside the bars, never over them. Under them (two rows of three), it
  // left the bars 31 px of the tab's 165 at 1280 x 800 (now 70): the tab is wide, not tall. A
  // sub-grid keeps it at its own height (a legend alone in the plot's row would be stretched to the
  // bars' height, or cap them at its own), and the stretch factors give it its width, the bars the rest.
  plot_->legend->setVisible(true);
  plot_->legend->setFont(QFont("sans", 8));
  plot_->axisRect()->insetLayout()->take(plot_->legend);
  auto* side = new QCPLayoutGrid;
  plot_->plotLayout()->addElement(1, 1, side);
  side->addElement(0, 0, plot_->legend);
  side->addElement(1, 0, new QCPLayoutElement(plot_));  // the room under the legend
  side->setRowStretchFactor(0, 0.001);
  side->setMargins(QMargins(0, 4, 4, 0));
  plot_->plotLayout()->setColumnStretchFactor(1, 0.001);
  plot_->legend->setMargins(QMargins(4, 2, 4, 2));
  layout->addWidget(plot_, 1);
  verdict_ = new QLabel(tr("No stage timings yet: they come with streaming batches."), this);
  verdict_->setObjectName("stage_verdict");
  verdict_->setWordWrap(true);
  verdict_->setTextFormat(Qt::PlainText);
  layout->addWidget(verdict_);
}

void StageBreakdownView::addRecords(const std::vector<TelemetryRecord>& records) {
  bool changed = false;
  for (const auto& r : records) {
    if (r.stages_ms.empty()) continue;  // resident batches and the Python probe say nothing
    // Named like the plots' series; only records with stage times are named here (naming every
    // record doubled the Monitor's per-record work on the GUI thread).
    const QString device = QString::fromStdString(r.device);
    const QString label = !labelByRank_ ? device
                                        : namer_.name(r, QString("rank %1 %2").arg(r.rank).arg(device),
                                                      [this](const QString& old, const QString& renamed) {
                                                        if (latest_.contains(old)) latest_.insert(renamed, latest_.take(old));
                                                        const auto at = order_.indexOf(old);
                                                        if (at >= 0) order_[at] = renamed;
                                                      });
    if (!latest_.contains(label)) order_ << label;
    latest_[label] = r;
    changed = true;
  }
  if (changed) redraw();
}

void StageBreakdownView::setReadIsNetwork(bool network) {
  for (int s = 0; s < kStages; ++s)
    if (std::string(kTelemetryStages[s]) == "read")
      bars_[static_cast<std::size_t>(s)]->setName(network ? tr("read (network)") : QString(kTelemetryStages[s]));
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

QString StageBreakdownView::stageLegend(int stage) const { return bars_.at(static_cast<std::size_t>(stage))->name(); }

QRect StageBreakdownView::barsArea() const { return plot_->axisRect()->rect(); }

QRect StageBreakdownView::legendArea() const { return plot_->legend->outerRect(); }

bool StageBreakdownView::legendEntriesWhole() const {
  for (const QCPBars* bars : bars_) {
    const QCPAbstractLegendItem* item = plot_->legend->itemWithPlottable(bars);
    if (!item || item->outerRect().width() < item->minimumOuterSizeHint().width() || !legendArea().contains(item->outerRect()))
      return false;
  }
  return true;
}

void StageBreakdownView::clear() {
  latest_.clear();
  namer_.clear();
  order_.clear();
  redraw();
  verdict_->setText(tr("No stage timings yet: they come with streaming batches."));
}

double StageBreakdownView::stageMs(const QString& series, const QString& stage) const {
  const auto it = latest_.find(series);
  if (it == latest_.end()) return NAN;
  if (stage == "data_wait") return it->data_wait_ms;
  const auto s = it->stages_ms.find(stage.toStdString());
  return s == it->stages_ms.end() ? NAN : s->second;
}

QString StageBreakdownView::verdictText() const { return verdict_->text(); }

void StageBreakdownView::redraw() {
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  QStringList lines;
  double top = 0;
  for (auto& b : bars_) b->data()->clear();
  for (int i = 0; i < order_.size(); ++i) {
    const TelemetryRecord& r = latest_[order_[i]];
    const double key = i + 1;
    double sum = 0;
    for (int s = 0; s < kStages; ++s) {
      const auto it = r.stages_ms.find(kTelemetryStages[s]);
      const double v = it == r.stages_ms.end() ? 0 : it->second;
      bars_[static_cast<std::size_t>(s)]->addData(key + 0.15, v);
      sum += v;
    }
    bars_.back()->addData(key - 0.2, r.data_wait_ms);
    top = std::max({top, sum, r.data_wait_ms});
    ticker->addTick(key, order_[i]);
    lines << order_[i] + " " + QString::fromStdString(stageVerdict(r.stages_ms).text);
  }
  plot_->yAxis->setTicker(ticker);
  plot_->yAxis->setRange(0.4, order_.size() + 0.6);
  plot_->xAxis->setRange(0, top > 0 ? top * 1.1 : 1);
  if (!lines.isEmpty()) verdict_->setText(lines.join('\n'));
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace stoker
