#include "planner_workspace.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "plan/shard_plan.h"
#include "plan_grid_view.h"
#include "plan_rows_model.h"
#include "util/byte_size.h"
#include "util/error.h"

namespace stoker {

// What the GUI shows of a plan, built on the worker thread: the plans
// themselves (tens of MB of indices at 10M samples) never reach the GUI.
struct PlannerResult {
  QString error;
  QString policy;
  qint64 samples = 0, steps = 0, padding = 0, dropped = 0;
  using Row = PlanRowsModel::Row;
  QVector<Row> rows;
  std::vector<double> weights;  // as asked (weighted), for "1 : 2 as asked"
  PlanGrid grid, resumeGrid;
  bool hasResume = false;
  double ms = 0;
};

namespace {

std::vector<double> parseNumbers(const QString& text, const QString& what) {
  std::vector<double> out;
  for (const QString& part : text.split(',', Qt::SkipEmptyParts)) {
    bool ok = false;
    const double v = part.trimmed().toDouble(&ok);
    if (!ok) throwBadInput(what.toStdString(), "\"" + part.trimmed().toStdString() + "\" is not a number");
    out.push_back(v);
  }
  return out;
}

PlanRequest requestOf(const PlannerInputs& in) {
  PlanRequest r;
  r.samples = in.samples;
  r.worldSize = in.worldSize;
  r.batchSize = in.batchSize;
  r.seed = static_cast<std::uint64_t>(in.seed);
  r.epoch = in.epoch;
  r.shuffle = in.shuffle;
  r.dropLast = in.dropLast;
  if (in.policy == "weighted") r.weights = parseNumbers(in.weights, "weights");
  if (in.policy == "el_che") r.stepMs = parseNumbers(in.stepMs, "step times");
  return r;
}

PlanGrid gridOf(const ShardPlan& plan, const QString& caption) {
  PlanGrid g;
  g.caption = caption;
  std::size_t cells = 0;
  for (const auto& rank : plan.ranks) cells += std::max<std::size_t>(1, rank.stepSizes.size());
  // The cells' first sample indices for the tooltips, while that stays small (a few MB).
  const bool keepIndices = cells * PlanGrid::kIndicesPerCell <= 2'000'000;
  for (const auto& rank : plan.ranks) {
    QVector<qint64> row;
    for (auto s : rank.stepSizes) row.push_back(s);
    if (row.isEmpty() && !rank.indices.empty()) row.push_back(static_cast<qint64>(rank.indices.size()));
    g.stepSizes.push_back(row);
    QVector<qint64> first;
    if (keepIndices) {
      std::size_t at = 0;
      for (qint64 size : row) {
        for (int k = 0; k < PlanGrid::kIndicesPerCell; ++k)
          first.push_back(k < size && at + static_cast<std::size_t>(k) < rank.indices.size()
                              ? static_cast<qint64>(rank.indices[at + static_cast<std::size_t>(k)])
                              : -1);
        at += static_cast<std::size_t>(size);
      }
    }
    g.firstIndices.push_back(first);
    // Padding sits at the end of a rank's list: find the step it starts in.
    int from = -1;
    if (rank.padding > 0) {
      qint64 real = static_cast<qint64>(rank.indices.size()) - rank.padding, at = 0;
      for (int s = 0; s < row.size(); ++s) {
        at += row[s];
        if (at > real) {
          from = s;
          break;
        }
      }
    }
    g.paddingFrom.push_back(from);
  }
  return g;
}

// What a plan holds: every sample's index twice (the epoch's order, then the ranks'), a step size a
// rank a step, and as much again for the resume preview.
double planBytes(const PlannerInputs& in) {
  const double samples = static_cast<double>(std::max<qint64>(in.samples, 0));
  const double steps = samples / static_cast<double>(std::max<qint64>(in.batchSize, 1));
  return (samples * 16 + steps * 8) * (in.resumeFrom > 0 ? 2 : 1);
}

// A quarter of the memory this process may use (the machine's, or its cgroup's limit: a container,
// a Slurm job), at most 16 GiB: a plan of 2e9 samples (32 GB) was drawn until the system killed the
// workbench, and a plan under way cannot be stopped.
double planMemoryLimit() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  double memory = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : double(16LL << 30);
  QFile cgroup("/sys/fs/cgroup/memory.max");  // cgroup v2; "max" when unlimited
  if (cgroup.open(QIODevice::ReadOnly)) {
    bool number = false;
    const double max = cgroup.readAll().trimmed().toDouble(&number);
    if (number && max > 0) memory = std::min(memory, max);
  }
  return std::min(memory / 4, double(16LL << 30));
}

PlannerResult computePlan(PlannerInputs in) {
  PlannerResult out;
  if (const double bytes = planBytes(in), limit = planMemoryLimit(); bytes > limit) {
    out.error = QObject::tr("A plan of %L1 samples holds every sample's index: about %2 here, more than the Planner "
                            "takes (%3: a quarter of the memory it may use, at most 16 GiB). Plan fewer samples: "
                            "padding and dropped samples depend on the remainder of the samples divided by ranks x "
                            "batch size.")
                    .arg(in.samples)
                    .arg(QString::fromStdString(humanBytes(static_cast<std::uint64_t>(bytes))))
                    .arg(QString::fromStdString(humanBytes(static_cast<std::uint64_t>(limit))));
    return out;
  }
  try {
    const auto start = std::chrono::steady_clock::now();
    PlanRequest r = requestOf(in);
    const ShardPlan plan = makeShardPlan(r);
    std::optional<ShardPlan> resumed;
    if (in.resumeFrom > 0) {
      r.resumeFrom = in.resumeFrom;
      r.worldSize = in.resumeWorldSize;
      if (in.policy == "weighted") r.weights.assign(static_cast<std::size_t>(in.resumeWorldSize), 1.0);
      if (in.policy == "el_che") r.stepMs.assign(static_cast<std::size_t>(in.resumeWorldSize), 1.0);
      resumed = makeShardPlan(r);
    }
    out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    out.policy = QString::fromStdString(plan.policy);
    if (in.policy == "weighted") out.weights = parseNumbers(in.weights, "weights");
    out.samples = plan.samples, out.steps = plan.steps, out.padding = plan.padding, out.dropped = plan.dropped;
    for (const auto& rank : plan.ranks)
      out.rows.push_back({static_cast<qint64>(rank.indices.size()), rank.padding, static_cast<qint64>(rank.stepSizes.size())});
    out.grid = gridOf(plan, QObject::tr("ranks × steps (shade: samples in the step; hatched: padding; dashed: resume point)"));
    if (in.resumeFrom > 0) {  // the first step not wholly inside the resumed prefix
      qint64 done = 0;
      for (qint64 step = 0; step < plan.steps && out.grid.markStep < 0; ++step) {
        for (const auto& rank : plan.ranks)
          if (step < static_cast<qint64>(rank.stepSizes.size())) done += rank.stepSizes[static_cast<std::size_t>(step)];
        if (done > in.resumeFrom) out.grid.markStep = static_cast<int>(step);
      }
    }
    if (resumed) {
      out.hasResume = true;
      out.resumeGrid = gridOf(*resumed, QObject::tr("resumed after %1 samples on %2 ranks: %3 remain, padding %4, dropped %5")
                                            .arg(resumed->resumeFrom)
                                            .arg(resumed->ranks.size())
                                            .arg(resumed->remaining)
                                            .arg(resumed->padding)
                                            .arg(resumed->dropped));
    }
  } catch (const std::exception& e) {
    out.error = QString::fromUtf8(e.what());
  }
  return out;
}

// How the ranks' shares compare with what was asked. Equal GPUs: any difference is padding or
// a short last step, so it is an imbalance. Weighted: the shares follow the weights, so the
// header says "2 : 1 : 1 as asked" and how closely, never "imbalance 99 %" for an intended 1 : 2.
// El Che: the shares follow the step times by design.
QString splitVerdict(const PlannerResult& r) {
  qint64 most = 0, least = -1, total = 0;
  for (const auto& row : r.rows) {
    most = std::max(most, row.samples);
    least = least < 0 ? row.samples : std::min(least, row.samples);
    total += row.samples;
  }
  if (r.policy == "weighted" && r.weights.size() == static_cast<std::size_t>(r.rows.size()) && total > 0) {
    double sum = 0, worst = 0;
    for (double w : r.weights) sum += w;
    QStringList asked;
    for (std::size_t k = 0; k < r.weights.size(); ++k) {
      asked << QString::number(r.weights[k], 'g', 4);
      const double share = static_cast<double>(r.rows[static_cast<int>(k)].samples) / static_cast<double>(total);
      worst = std::max(worst, std::abs(share - r.weights[k] / sum));
    }
    if (asked.size() > 8) asked = asked.mid(0, 8) << QStringLiteral("…");
    return QObject::tr("split %1 as asked (each share within %2 % of it)").arg(asked.join(" : ")).arg(100 * worst, 0, 'f', 2);
  }
  if (r.policy == "el_che") return QObject::tr("shares follow the step times (El Che), as asked");
  const double imbalance = least > 0 ? 100.0 * (static_cast<double>(most) / static_cast<double>(least) - 1) : 0;
  return QObject::tr("imbalance %1 % (largest / smallest share − 1)").arg(imbalance, 0, 'f', 1);
}

QSpinBox* spin(int lo, int hi, int value, QWidget* parent) {
  auto* s = new QSpinBox(parent);
  s->setRange(lo, hi);
  s->setValue(value);
  s->setGroupSeparatorShown(true);
  return s;
}

}  // namespace

PlannerWorkspace::PlannerWorkspace(QWidget* parent) : QWidget(parent) {
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* form = new QFormLayout();
  auto* settings = new QGroupBox(tr("Plan"), this);
  settings->setLayout(form);
  settings->setMaximumWidth(330);
  const PlannerInputs defaults;
  samples_ = spin(1, 2000000000, static_cast<int>(defaults.samples), settings);
  samples_->setToolTip(tr("Samples in the dataset (len(dataset))."));
  world_ = spin(1, 65536, defaults.worldSize, settings);
  world_->setToolTip(tr("Ranks: DistributedSampler(num_replicas=...)."));
  batch_ = spin(1, 1 << 24, static_cast<int>(defaults.batchSize), settings);
  batch_->setToolTip(tr("Samples per rank per step (DataLoader batch_size)."));
  seed_ = spin(0, 2147483647, 0, settings);
  seed_->setToolTip(tr("DistributedSampler(seed=...); the order is drawn with seed + epoch."));
  epoch_ = spin(0, 1000000, 0, settings);
  epoch_->setToolTip(tr("sampler.set_epoch(...)."));
  shuffle_ = new QCheckBox(tr("shuffle"), settings);
  shuffle_->setChecked(true);
  dropLast_ = new QCheckBox(tr("drop last (instead of padding)"), settings);
  dropLast_->setToolTip(tr("DistributedSampler(drop_last=True): cut the tail so ranks stay equal, instead of repeating samples."));
  policy_ = new QComboBox(settings);
  policy_->addItem(tr("equal GPUs (torch)"), "torch");
  policy_->addItem(tr("weights (unequal GPUs)"), "weighted");
  policy_->addItem(tr("El Che (step times)"), "el_che");
  weights_ = new QLineEdit("2,1,1,1", settings);
  weights_->setToolTip(tr("One weight per rank: each step's batch x world samples are split by largest remainder."));
  throughput_ = new QLineEdit(settings);
  throughput_->setPlaceholderText(tr("measured samples/s per rank"));
  auto* fromThroughput = new QPushButton(tr("Use as weights"), settings);
  stepMs_ = new QLineEdit("10,10,20,40", settings);
  stepMs_->setToolTip(tr("Milliseconds per batch on each rank: the slowest runs 4 batches per round, faster ones more."));
  resumeFrom_ = spin(0, 2000000000, static_cast<int>(defaults.resumeFrom), settings);
  resumeFrom_->setToolTip(tr("Samples of the epoch's order already done (0: no resume preview)."));
  resumeWorld_ = spin(1, 65536, defaults.resumeWorldSize, settings);
  resumeWorld_->setToolTip(tr("World size the interrupted epoch continues on."));
  form->addRow(tr("Samples"), samples_);
  form->addRow(tr("World size"), world_);
  form->addRow(tr("Batch size"), batch_);
  form->addRow(tr("Seed"), seed_);
  form->addRow(tr("Epoch"), epoch_);
  form->addRow(shuffle_);
  form->addRow(dropLast_);
  form->addRow(tr("Split"), policy_);
  form->addRow(tr("Weights"), weights_);
  auto* tp = new QHBoxLayout();
  tp->addWidget(throughput_);
  tp->addWidget(fromThroughput);
  form->addRow(tr("Throughput"), tp);
  form->addRow(tr("Step ms"), stepMs_);
  form->addRow(tr("Resume after"), resumeFrom_);
  form->addRow(tr("… on world size"), resumeWorld_);
  error_ = new QLabel(settings);
  error_->setWordWrap(true);
  error_->setStyleSheet("color: #c62828;");
  form->addRow(error_);
  layout->addWidget(settings);

  auto* results = new QSplitter(Qt::Vertical, this);
  auto* top = new QWidget(results);
  auto* topLayout = new QVBoxLayout(top);
  topLayout->setContentsMargins(0, 0, 0, 0);
  summary_ = new QLabel(top);
  summary_->setWordWrap(true);
  topLayout->addWidget(summary_);
  grid_ = new PlanGridView(top);
  grid_->setObjectName("planGrid");
  topLayout->addWidget(grid_, 1);
  rows_ = new PlanRowsModel(this);
  table_ = new QTableView(results);
  table_->setModel(rows_);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  table_->verticalHeader()->hide();
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  resumeGrid_ = new PlanGridView(results);
  resumeGrid_->setObjectName("resumeGrid");
  results->addWidget(top);
  results->addWidget(table_);
  results->addWidget(resumeGrid_);
  results->setSizes({300, 180, 160});
  layout->addWidget(results, 1);

  debounce_ = new QTimer(this);
  debounce_->setSingleShot(true);
  debounce_->setInterval(150);  // typing a number re-plans once, not per digit
  connect(debounce_, &QTimer::timeout, this, &PlannerWorkspace::replan);
  watcher_ = new QFutureWatcher<PlannerResult>(this);
  connect(watcher_, &QFutureWatcher<PlannerResult>::finished, this, [this] {
    const PlannerResult r = watcher_->result();
    if (pending_) {  // inputs changed while planning: the result is stale
      pending_ = false;
      replan();
      return;
    }
    if (r.error.isEmpty()) showResult(r);
    else showError(r.error);
  });
  auto changed = [this] {
    if (!loading_) debounce_->start();
  };
  for (auto* s : {samples_, world_, batch_, seed_, epoch_, resumeFrom_, resumeWorld_})
    connect(s, qOverload<int>(&QSpinBox::valueChanged), this, changed);
  for (auto* c : {shuffle_, dropLast_}) connect(c, &QCheckBox::toggled, this, changed);
  for (auto* e : {weights_, stepMs_}) connect(e, &QLineEdit::textChanged, this, changed);
  connect(policy_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this, changed] {
    weights_->setEnabled(policy_->currentData().toString() == "weighted");
    stepMs_->setEnabled(policy_->currentData().toString() == "el_che");
    changed();
  });
  connect(fromThroughput, &QPushButton::clicked, this, [this] { setWeightsFromThroughput(throughput_->text()); });
  weights_->setEnabled(false);
  stepMs_->setEnabled(false);
  // The first plan is small and computed here, so a screenshot shows it.
  const PlannerResult first = computePlan(inputs());
  if (first.error.isEmpty()) showResult(first);
  else showError(first.error);
}

PlannerWorkspace::~PlannerWorkspace() { watcher_->waitForFinished(); }

PlannerInputs PlannerWorkspace::inputs() const {
  PlannerInputs in;
  in.samples = samples_->value();
  in.worldSize = world_->value();
  in.batchSize = batch_->value();
  in.seed = seed_->value();
  in.epoch = epoch_->value();
  in.shuffle = shuffle_->isChecked();
  in.dropLast = dropLast_->isChecked();
  in.policy = policy_->currentData().toString();
  in.weights = weights_->text();
  in.stepMs = stepMs_->text();
  in.resumeFrom = resumeFrom_->value();
  in.resumeWorldSize = resumeWorld_->value();
  return in;
}

void PlannerWorkspace::setInputs(const PlannerInputs& in) {
  loading_ = true;
  samples_->setValue(static_cast<int>(in.samples));
  world_->setValue(in.worldSize);
  batch_->setValue(static_cast<int>(in.batchSize));
  seed_->setValue(static_cast<int>(in.seed));
  epoch_->setValue(static_cast<int>(in.epoch));
  shuffle_->setChecked(in.shuffle);
  dropLast_->setChecked(in.dropLast);
  policy_->setCurrentIndex(std::max(0, policy_->findData(in.policy)));
  weights_->setText(in.weights);
  stepMs_->setText(in.stepMs);
  resumeFrom_->setValue(static_cast<int>(in.resumeFrom));
  resumeWorld_->setValue(in.resumeWorldSize);
  loading_ = false;
  debounce_->stop();
  replan();
}

bool PlannerWorkspace::busy() const { return watcher_->isRunning() || debounce_->isActive(); }
QString PlannerWorkspace::errorText() const { return error_->text(); }

bool PlannerWorkspace::setWeightsFromThroughput(const QString& text) {
  // A bad throughput entry changes no plan input: the plan stays live, only the message shows.
  std::vector<double> rates;
  try {
    rates = parseNumbers(text, "throughput");
  } catch (const std::exception& e) {
    error_->setText(QString::fromUtf8(e.what()));
    Q_EMIT planFailed(error_->text());
    return false;
  }
  if (rates.empty() || std::any_of(rates.begin(), rates.end(), [](double v) { return !(v > 0) || std::isinf(v); })) {
    error_->setText(tr("throughput: give one positive samples/s per rank"));
    Q_EMIT planFailed(error_->text());
    return false;
  }
  const double slowest = *std::min_element(rates.begin(), rates.end());
  QStringList weights;
  for (double v : rates) weights << QString::number(v / slowest, 'g', 3);
  loading_ = true;
  world_->setValue(static_cast<int>(rates.size()));
  policy_->setCurrentIndex(policy_->findData("weighted"));
  weights_->setText(weights.join(','));
  loading_ = false;
  replan();
  return true;
}

void PlannerWorkspace::replan() {
  if (watcher_->isRunning()) {
    pending_ = true;
    return;
  }
  watcher_->setFuture(QtConcurrent::run(computePlan, inputs()));
}

// The plan on screen no longer matches the form: grey it and say so in its header, so the
// weights or the sample count never seem to do nothing.
void PlannerWorkspace::showError(const QString& message) {
  error_->setText(message);
  stale_ = true;
  for (QWidget* view : {static_cast<QWidget*>(grid_), static_cast<QWidget*>(table_), static_cast<QWidget*>(resumeGrid_)})
    view->setEnabled(false);
  summary_->setText(lastSummary_.isEmpty()
                        ? tr("<b>Not planned:</b> %1").arg(message.toHtmlEscaped())
                        : tr("<b>Not re-planned:</b> %1<br><span style='color: gray'>Greyed below: the plan of the "
                             "last valid settings (%2).</span>")
                              .arg(message.toHtmlEscaped(), lastSummary_.toHtmlEscaped()));
  Q_EMIT planFailed(message);
}

QString PlannerWorkspace::summaryText() const { return summary_->text(); }

void PlannerWorkspace::showResult(const PlannerResult& r) {
  error_->clear();
  stale_ = false;
  for (QWidget* view : {static_cast<QWidget*>(grid_), static_cast<QWidget*>(table_), static_cast<QWidget*>(resumeGrid_)})
    view->setEnabled(true);
  lastSummary_ = tr("%1 plan: %L2 samples on %L3 ranks, %L4 steps; padding %L5, dropped %L6")
                     .arg(r.policy)
                     .arg(r.samples)
                     .arg(r.rows.size())
                     .arg(r.steps)
                     .arg(r.padding)
                     .arg(r.dropped);
  summary_->setText(lastSummary_ + "; " + splitVerdict(r) + tr("; planned in %L1 ms").arg(r.ms, 0, 'f', 1));
  grid_->setGrid(r.grid);
  rows_->setRows(r.rows, r.samples);
  PlanGrid noResume;
  noResume.caption = tr("set “Resume after” to preview an interrupted epoch on another world size");
  resumeGrid_->setGrid(r.hasResume ? r.resumeGrid : noResume);
  Q_EMIT planReady();
}

}  // namespace stoker
