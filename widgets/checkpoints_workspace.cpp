#include "checkpoints_workspace.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTreeWidget>
#include <QUrl>
#include <QVBoxLayout>

#include "background_settings.h"
#include "checkpoint_jobs.h"
#include "ckpt/inspect.h"
#include "ckpt/reshard_plan.h"
#include "net/remote_url.h"
#include "shard_layout_view.h"
#include "eta_text.h"
#include "util/byte_size.h"

namespace stoker {
namespace {

constexpr int kMaxRecent = 8;
constexpr int kNameRole = Qt::UserRole + 1;  // full tensor name on leaf items

const char* kVerdictIdle = "QLabel { padding: 6px; }";

// `text` with a URL's password or presigned signature hidden (util/redacted_url).
QString withoutSecrets(const QString& text) { return QString::fromStdString(redactedUrl(text.toStdString())); }

// The core's errors name the CLI's flags; here the same choices are a check box and a button.
QString inWorkbenchWords(QString message) {
  const QString replace = QObject::tr("tick “Replace existing files”");
  message.replace("pass --resume to finish it or --force to start over", QObject::tr("press Resume to finish it, or %1 to start over").arg(replace));
  message.replace("or pass --force to start over", QObject::tr("or %1 to start over").arg(replace));
  message.replace("pass --force to replace", replace + QObject::tr(" to replace"));
  message.replace("--force", QObject::tr("“Replace existing files”"));
  message.replace("--resume", QObject::tr("Resume"));
  return message;
}

}  // namespace

CheckpointsWorkspace::CheckpointsWorkspace(QWidget* parent) : QWidget(parent), jobs_(new CheckpointJobs(this)) {
  setAcceptDrops(true);
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);

  auto* openRow = new QHBoxLayout;
  path_ = new QLineEdit(this);
  path_->setObjectName("path");
  path_->setPlaceholderText(tr("A .safetensors or .pt file, a DCP, ranks or HF sharded folder, or an s3:// or https:// "
                               "URL of one — or drop one here"));
  auto* openFile = new QPushButton(tr("Open file…"), this);
  openFile->setToolTip(tr("Open a checkpoint file (Ctrl+O)"));
  auto* openDir = new QPushButton(tr("Open folder…"), this);
  recentButton_ = new QPushButton(tr("Recent"), this);
  recentButton_->setMenu(new QMenu(recentButton_));
  openRow->addWidget(path_, 1);
  openRow->addWidget(openFile);
  openRow->addWidget(openDir);
  openRow->addWidget(recentButton_);
  outer->addLayout(openRow);
  connect(path_, &QLineEdit::returnPressed, this, [this] { openPath(path_->text().trimmed()); });
  connect(openFile, &QPushButton::clicked, this, &CheckpointsWorkspace::openDialog);
  connect(openDir, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, tr("Open checkpoint folder"));
    if (!d.isEmpty()) openPath(d);
  });

  auto* split = new QSplitter(this);
  tree_ = new QTreeWidget(split);
  tree_->setObjectName("tensorTree");
  tree_->setHeaderLabels({tr("Name"), tr("dtype"), tr("Shape"), tr("Size"), tr("Problems")});
  tree_->header()->setStretchLastSection(false);
  tree_->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
  tree_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
  tree_->setMinimumWidth(380);
  tree_->setUniformRowHeights(true);
  connect(tree_, &QTreeWidget::currentItemChanged, this, [this] { showLayout(); });

  auto* right = new QWidget(split);
  auto* rightLayout = new QVBoxLayout(right);
  layoutView_ = new ShardLayoutView(right);
  rightLayout->addWidget(layoutView_);

  auto* target = new QGroupBox(tr("Target"), right);
  auto* form = new QFormLayout(target);
  targetKind_ = new QComboBox(target);
  targetKind_->addItem(tr("ranks (metadata.json + rank_<r>.safetensors)"), "ranks");
  targetKind_->addItem(tr("HF shards (model-0000i-of-0000n + index)"), "hf");
  targetKind_->addItem(tr("one .safetensors file"), "single");
  targetKind_->addItem(tr("PyTorch .pt state dict"), "pt");
  targetKind_->addItem(tr("PyTorch DCP (.metadata + __<r>_0.distcp)"), "dcp");
  form->addRow(tr("Layout"), targetKind_);
  ranks_ = new QSpinBox(target);
  ranks_->setRange(1, 4096);
  ranks_->setValue(2);
  ranks_->setToolTip(tr("M in ranks:M or dcp:M: the number of rank files to split every tensor across"));
  form->addRow(tr("Ranks"), ranks_);
  hfMax_ = new QLineEdit("5GB", target);
  hfMax_->setToolTip(tr("Largest HF shard file (transformers' max_shard_size), e.g. 5GB, 500MiB"));
  form->addRow(tr("HF max shard"), hfMax_);
  dtype_ = new QComboBox(target);
  dtype_->addItems({"keep", "f32", "f16", "bf16"});
  dtype_->setToolTip(tr("Floating-point tensors are converted to this dtype; integers stay as they are"));
  form->addRow(tr("dtype"), dtype_);
  budget_ = new QLineEdit("256MiB", target);
  budget_->setToolTip(tr("Memory the conversion may use for buffers, shared by its jobs"));
  form->addRow(tr("Memory budget"), budget_);
  jobsSpin_ = new QSpinBox(target);
  jobsSpin_->setRange(1, 64);
  jobsSpin_->setValue(2);
  form->addRow(tr("Jobs"), jobsSpin_);
  auto* dstRow = new QHBoxLayout;
  destination_ = new QLineEdit(target);
  destination_->setObjectName("destination");
  destination_->setPlaceholderText(tr("output folder (a file for single/pt)"));
  auto* browseDst = new QPushButton(tr("…"), target);
  connect(browseDst, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getSaveFileName(this, tr("Destination"), destination_->text(), {}, nullptr,
                                                   QFileDialog::DontConfirmOverwrite);
    if (!d.isEmpty()) destination_->setText(d);
  });
  dstRow->addWidget(destination_, 1);
  dstRow->addWidget(browseDst);
  form->addRow(tr("Destination"), dstRow);
  // A check box, not a toggle button: it is a setting of the next conversion, not an action.
  force_ = new QCheckBox(tr("Replace existing files"), target);
  force_->setObjectName("force");
  force_->setToolTip(tr("Allow writing into a destination that already holds checkpoint files (--force)"));
  form->addRow(QString(), force_);
  rightLayout->addWidget(target);
  connect(targetKind_, &QComboBox::currentIndexChanged, this, [this] { updateTargetWidgets(); });

  auto* buttons = new QHBoxLayout;
  dryRunButton_ = new QPushButton(tr("Dry run"), right);
  dryRunButton_->setToolTip(tr("Plan the conversion and check memory and options without writing (Ctrl+D)"));
  dryRunButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_D));
  convertButton_ = new QPushButton(tr("Convert"), right);
  convertButton_->setObjectName("convert");
  convertButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  convertButton_->setToolTip(tr("Convert (Ctrl+R)"));
  resumeButton_ = new QPushButton(tr("Resume"), right);
  resumeButton_->setToolTip(tr("Finish a stopped conversion: files its journal lists as done are kept"));
  cancelButton_ = new QPushButton(tr("Cancel"), right);
  cancelButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Period));
  cancelButton_->setToolTip(tr("Stop at a safe point: finished files stay, the partial one goes (Ctrl+.)"));
  cancelButton_->setEnabled(false);
  verifyButton_ = new QPushButton(tr("Verify"), right);
  verifyButton_->setToolTip(tr("Compare the destination with the source tensor by tensor (names, dtypes, shapes, "
                               "XXH3 of the bytes)"));
  for (auto* b : {dryRunButton_, convertButton_, resumeButton_, cancelButton_, verifyButton_}) buttons->addWidget(b);
  rightLayout->addLayout(buttons);
  connect(dryRunButton_, &QPushButton::clicked, this, &CheckpointsWorkspace::dryRun);
  connect(convertButton_, &QPushButton::clicked, this, &CheckpointsWorkspace::convert);
  connect(resumeButton_, &QPushButton::clicked, this, &CheckpointsWorkspace::resume);
  connect(cancelButton_, &QPushButton::clicked, this, &CheckpointsWorkspace::cancel);
  connect(verifyButton_, &QPushButton::clicked, this, &CheckpointsWorkspace::verify);

  auto* progressRow = new QHBoxLayout;
  progress_ = new QProgressBar(right);
  progress_->setRange(0, 1000);
  progress_->setValue(0);
  rate_ = new QLabel(right);
  rate_->setObjectName("rate");
  progressRow->addWidget(progress_, 1);
  progressRow->addWidget(rate_);
  rightLayout->addLayout(progressRow);
  status_ = new QLabel(tr("Open a checkpoint to begin."), right);
  status_->setWordWrap(true);
  rightLayout->addWidget(status_);
  verdict_ = new QLabel(right);
  verdict_->setObjectName("verdict");
  verdict_->setWordWrap(true);
  // The verdict's room is kept from the start (same padding, one line), so the window does not
  // grow by the banner's padding when a verify ends.
  verdict_->setStyleSheet(kVerdictIdle);
  verdict_->setMinimumHeight(verdict_->fontMetrics().height() + 14);
  rightLayout->addWidget(verdict_);
  log_ = new QPlainTextEdit(right);
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(5000);
  log_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  rightLayout->addWidget(log_, 1);
  split->addWidget(tree_);
  split->addWidget(right);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  outer->addWidget(split, 1);

  connect(jobs_, &CheckpointJobs::opened, this, [this](const QString& summary) {
    setBusy(false);
    fillTree();
    status_->setText(withoutSecrets(summary));
    log(summary);
    auto src = jobs_->source();
    for (const auto& p : src->problems) log("problem: " + QString::fromStdString(p));
    rememberRecent(openedPath_);
    if (destination_->text().isEmpty() || destination_->text() == defaultedDestination_) {
      defaultedDestination_ = defaultDestination(openedPath_);
      destination_->setText(defaultedDestination_);
    }
    Q_EMIT checkpointOpened(summary);
  });
  connect(jobs_, &CheckpointJobs::planned, this, [this](const QString& text) {
    setBusy(false);
    log(text);
    status_->setText(withoutSecrets(text.section('\n', 0, 0)));
    showLayout();
    Q_EMIT planReady();
  });
  connect(jobs_, &CheckpointJobs::progress, this,
          [this](qint64 done, qint64 total, double rate, double eta, const QString& item) {
            progress_->setValue(total > 0 ? static_cast<int>(1000.0 * static_cast<double>(done) / static_cast<double>(total)) : 0);
            rate_->setText(QString("%1/s, ETA %2").arg(QString::fromStdString(humanBytes(static_cast<std::uint64_t>(rate))),
                                                       etaText(eta)));
            if (!item.isEmpty()) status_->setText(item);
          });
  connect(jobs_, &CheckpointJobs::note, this, [this](const QString& text) { log(text); });
  connect(jobs_, &CheckpointJobs::converted, this, [this](const QString& summary, bool complete) {
    setBusy(false);
    progress_->setValue(1000);
    log(summary);
    status_->setText(complete ? tr("Conversion complete. Verify compares it with the source.")
                              : tr("This process's share is written; other ranks' files are still missing."));
    showLayout();
    Q_EMIT conversionFinished(complete);
  });
  connect(jobs_, &CheckpointJobs::verified, this, [this](bool equal, const QString& verdict) {
    setBusy(false);
    progress_->setValue(1000);
    verdict_->setText(verdict);
    status_->setText(tr("Verified."));
    verdict_->setStyleSheet(equal ? "QLabel { color: white; background: #2e7d32; padding: 6px; font-weight: bold; }"
                                  : "QLabel { color: white; background: #c62828; padding: 6px; font-weight: bold; }");
    log("verify: " + verdict);
    Q_EMIT verifyFinished(equal);
  });
  connect(jobs_, &BackgroundJob::failed, this, [this](const QString& cliMessage) {
    const QString message = inWorkbenchWords(cliMessage);
    setBusy(false);
    status_->setText(tr("Error: %1").arg(message));
    log("error: " + message);
    Q_EMIT jobFailed(message);
  });
  connect(jobs_, &BackgroundJob::stopped, this, [this] {
    setBusy(false);
    switch (lastJob_) {
      case JobKind::Open: status_->setText(tr("Cancelled: no checkpoint is open.")); break;
      case JobKind::Plan: status_->setText(tr("Dry run cancelled.")); break;
      case JobKind::Convert: status_->setText(tr("Cancelled. Finished files stay; Resume completes the conversion.")); break;
      case JobKind::Verify: status_->setText(tr("Verify cancelled.")); break;
    }
    log("cancelled");
    Q_EMIT jobStopped();
  });

  const auto setting = [](const char* key, const QVariant& fallback) {
    return background_settings::value(QStringLiteral("checkpoints/") + key, fallback);
  };
  const int kind = targetKind_->findData(setting("targetKind", "ranks"));
  targetKind_->setCurrentIndex(kind < 0 ? 0 : kind);
  ranks_->setValue(setting("ranks", 2).toInt());
  hfMax_->setText(setting("hfMax", "5GB").toString());
  dtype_->setCurrentText(setting("dtype", "keep").toString());
  budget_->setText(setting("budget", "256MiB").toString());
  jobsSpin_->setValue(setting("jobs", 2).toInt());
  updateTargetWidgets();
  rememberRecent({});  // fills the menu
  setBusy(false);      // nothing open yet: nothing to convert or verify
}

CheckpointsWorkspace::~CheckpointsWorkspace() {
  // Join the job's thread before the children go, so nothing reports into a half-destroyed
  // workspace (and no emission is still running while its connections are dropped).
  jobs_->stopAndWait();
  jobs_->disconnect(this);
  saveSettings();
  background_settings::flush();  // in the file before the application ends
}

// Written off the GUI thread (background_settings): a conversion's start saves them, and Qt's
// sync of the settings file fdatasyncs it, which a disk busy with the conversion makes slow.
void CheckpointsWorkspace::saveSettings() const {
  background_settings::set({{"checkpoints/targetKind", targetKind_->currentData()},
                            {"checkpoints/ranks", ranks_->value()},
                            {"checkpoints/hfMax", hfMax_->text()},
                            {"checkpoints/dtype", dtype_->currentText()},
                            {"checkpoints/budget", budget_->text()},
                            {"checkpoints/jobs", jobsSpin_->value()}});
}

QString CheckpointsWorkspace::verdictText() const { return verdict_->text(); }
QString CheckpointsWorkspace::statusText() const { return status_->text(); }
QString CheckpointsWorkspace::logText() const { return log_->toPlainText(); }
QStringList CheckpointsWorkspace::recentFiles() const {
  return background_settings::value("checkpoints/recent").toStringList();
}

void CheckpointsWorkspace::setTarget(const QString& target, const QString& dtype) {
  const QString kind = target.section(':', 0, 0);
  targetKind_->setCurrentIndex(std::max(0, targetKind_->findData(kind)));
  if ((kind == "ranks" || kind == "dcp") && target.contains(':')) ranks_->setValue(target.section(':', 1).toInt());
  if (kind == "hf" && target.contains(':')) hfMax_->setText(target.section(':', 1));
  dtype_->setCurrentText(dtype);
}
void CheckpointsWorkspace::setDestination(const QString& dir) { destination_->setText(dir); }
void CheckpointsWorkspace::setMemoryBudget(const QString& size) { budget_->setText(size); }
void CheckpointsWorkspace::setJobs(int jobs) { jobsSpin_->setValue(jobs); }
void CheckpointsWorkspace::setForce(bool force) { force_->setChecked(force); }

void CheckpointsWorkspace::updateTargetWidgets() {
  const QString kind = targetKind_->currentData().toString();
  ranks_->setEnabled(kind == "ranks" || kind == "dcp");
  hfMax_->setEnabled(kind == "hf");
}

ConvertSettings CheckpointsWorkspace::settings() const {
  ConvertSettings s;
  const QString kind = targetKind_->currentData().toString();
  s.target = kind == "ranks" || kind == "dcp" ? QString("%1:%2").arg(kind).arg(ranks_->value())
             : kind == "hf"  ? "hf:" + hfMax_->text().trimmed()
                             : kind;
  s.dtype = dtype_->currentText();
  s.memoryBudget = budget_->text().trimmed();
  s.jobs = jobsSpin_->value();
  s.destination = destination_->text().trimmed();
  s.force = force_->isChecked();
  return s;
}

void CheckpointsWorkspace::openDialog() {
  const QString f = QFileDialog::getOpenFileName(this, tr("Open checkpoint"), {},
                                                 tr("Checkpoints (*.safetensors *.pt *.bin *.json);;All files (*)"));
  if (f.isEmpty()) return;
  // An index or metadata file stands for its directory.
  const QString name = QFileInfo(f).fileName();
  openPath(name == "metadata.json" || name.endsWith(".index.json") ? QFileInfo(f).absolutePath() : f);
}

void CheckpointsWorkspace::openPath(const QString& path) {
  if (path.isEmpty()) return;
  if (jobs_->busy()) {
    // The running job (a conversion of the open checkpoint, an inspect) goes on: clearing the
    // tree and naming another path here made the log and the next Convert speak of a checkpoint
    // that was never opened.
    status_->setText(tr("A job is running: cancel it (or wait for it) before opening %1").arg(withoutSecrets(path)));
    return;
  }
  path_->setText(path);
  openedPath_ = path;
  tree_->clear();
  layoutView_->setLayout({});
  verdict_->clear();
  verdict_->setStyleSheet(kVerdictIdle);
  lastJob_ = JobKind::Open;
  if (jobs_->open(path)) setBusy(true, tr("Inspecting %1…").arg(withoutSecrets(path)));
}

void CheckpointsWorkspace::dryRun() {
  lastJob_ = JobKind::Plan;
  if (jobs_->plan(settings())) setBusy(true, tr("Planning…"));
}
void CheckpointsWorkspace::convert() { startConvert(false); }
void CheckpointsWorkspace::resume() { startConvert(true); }
void CheckpointsWorkspace::cancel() { jobs_->stop(); }
bool CheckpointsWorkspace::converting() const { return jobs_->busy() && lastJob_ == JobKind::Convert; }

void CheckpointsWorkspace::startConvert(bool resume) {
  const ConvertSettings s = settings();
  saveSettings();
  verdict_->clear();
  verdict_->setStyleSheet(kVerdictIdle);
  lastJob_ = JobKind::Convert;
  if (jobs_->convert(s, resume)) {
    log(QString("%1 %2 -> %3 (%4, dtype %5)").arg(resume ? "resume" : "convert", openedPath_, s.destination, s.target, s.dtype));
    setBusy(true, resume ? tr("Resuming…") : tr("Converting…"));
  }
}

void CheckpointsWorkspace::verify() {
  lastJob_ = JobKind::Verify;
  if (jobs_->verify(destination_->text().trimmed())) setBusy(true, tr("Verifying…"));
}

void CheckpointsWorkspace::setBusy(bool busy, const QString& what) {
  // Each acts on the open checkpoint: none while a failed or cancelled open left none (Convert
  // wrote the checkpoint opened before, under the new one's name in the log).
  const bool opened = jobs_->source() != nullptr;
  for (auto* b : {dryRunButton_, convertButton_, resumeButton_, verifyButton_}) b->setEnabled(!busy && opened);
  cancelButton_->setEnabled(busy);
  if (busy) {
    progress_->setValue(0);
    rate_->clear();
    status_->setText(what);
  }
}

// The log shows the path as opened: a URL's password or presigned signature is hidden there.
void CheckpointsWorkspace::log(const QString& text) { log_->appendPlainText(withoutSecrets(text)); }

void CheckpointsWorkspace::rememberRecent(const QString& path) {
  QStringList recent = recentFiles();
  // A URL with a password or a presigned signature in it is not kept: no secret in the settings.
  const bool secret = holdsSecret(path.toStdString());
  if (!path.isEmpty() && !secret) {
    recent.removeAll(path);
    recent.prepend(path);
    while (recent.size() > kMaxRecent) recent.removeLast();
    background_settings::set({{"checkpoints/recent", recent}});
  }
  QMenu* menu = recentButton_->menu();
  menu->clear();
  for (const QString& r : recent) menu->addAction(r, this, [this, r] { openPath(r); });
  recentButton_->setEnabled(!recent.isEmpty());
}

void CheckpointsWorkspace::fillTree() {
  tree_->clear();
  auto src = jobs_->source();
  if (!src) return;
  // Dotted names become a tree: model.layers.0.weight under model > layers > 0.
  QHash<QString, QTreeWidgetItem*> groups;
  auto groupFor = [&](const QString& prefix, auto&& self) -> QTreeWidgetItem* {
    if (prefix.isEmpty()) return nullptr;
    if (auto* g = groups.value(prefix)) return g;
    const int dot = prefix.lastIndexOf('.');
    QTreeWidgetItem* parent = self(dot < 0 ? QString() : prefix.left(dot), self);
    auto* item = parent ? new QTreeWidgetItem(parent) : new QTreeWidgetItem(tree_);
    item->setText(0, dot < 0 ? prefix : prefix.mid(dot + 1));
    groups.insert(prefix, item);
    return item;
  };
  for (const auto& t : src->tensors) {
    const QString name = QString::fromStdString(t.name);
    const int dot = name.lastIndexOf('.');
    QTreeWidgetItem* parent = groupFor(dot < 0 ? QString() : name.left(dot), groupFor);
    auto* item = parent ? new QTreeWidgetItem(parent) : new QTreeWidgetItem(tree_);
    item->setText(0, dot < 0 ? name : name.mid(dot + 1));
    item->setData(0, kNameRole, name);
    const std::string_view dtype = dtypeName(t.dtype);
    item->setText(1, QString::fromUtf8(dtype.data(), static_cast<qsizetype>(dtype.size())));
    item->setText(2, QString::fromStdString(shapeText(t.shape)));
    item->setText(3, QString::fromStdString(humanBytes(t.nbytes)));
    item->setToolTip(0, name);
    QStringList problems;
    for (const auto& p : src->problems)
      if (QString::fromStdString(p).contains(name)) problems << QString::fromStdString(p);
    if (t.pieces.empty() && problems.isEmpty()) problems << tr("its stored pieces do not tile it");
    if (!problems.isEmpty()) {
      item->setText(4, problems.join("; "));
      item->setForeground(4, QColor(0xd0, 0x30, 0x30));
      for (auto* p = item->parent(); p; p = p->parent()) p->setText(4, tr("problems inside"));
    }
  }
  tree_->expandToDepth(1);
}

void CheckpointsWorkspace::selectTensor(const QString& name) {
  for (QTreeWidgetItemIterator it(tree_); *it; ++it)
    if ((*it)->data(0, kNameRole).toString() == name) {
      tree_->setCurrentItem(*it);
      return;
    }
}

void CheckpointsWorkspace::showLayout() {
  auto src = jobs_->source();
  QTreeWidgetItem* item = tree_->currentItem();
  const QString name = item ? item->data(0, kNameRole).toString() : QString();
  const LogicalTensor* t = src && !name.isEmpty() ? src->find(name.toStdString()) : nullptr;
  if (!t) {
    layoutView_->setLayout({});
    return;
  }
  auto plan = jobs_->lastPlan();
  std::vector<const PlannedTensor*> outputs;
  std::vector<QString> outputFiles;
  if (plan)
    for (const auto& f : plan->files)
      for (const auto& pt : f.tensors)
        if (pt.source == t) outputs.push_back(&pt), outputFiles.push_back(QString::fromStdString(f.name));
  // The dimension to draw: the source's split dimension, else the first one
  // along which the source pieces or the outputs differ, else 0.
  int dim = t->shardDim.value_or(-1);
  for (std::size_t d = 0; dim < 0 && d < t->shape.size(); ++d) {
    for (const auto& p : t->pieces)
      if (p.start[d] != 0) dim = static_cast<int>(d);
    for (const auto* o : outputs)
      if (o->box.start[d] != 0) dim = static_cast<int>(d);
  }
  if (dim < 0) dim = 0;
  // A second split dimension (DCP boxes of FSDP + tensor parallel): drawn as a grid.
  int dim2 = -1;
  for (std::size_t d = static_cast<std::size_t>(dim) + 1; dim2 < 0 && d < t->shape.size(); ++d) {
    for (const auto& p : t->pieces)
      if (p.start[d] != 0) dim2 = static_cast<int>(d);
    for (const auto* o : outputs)
      if (o->box.start[d] != 0) dim2 = static_cast<int>(d);
  }
  ShardLayout layout;
  layout.tensor = name;
  const bool scalar = t->shape.empty();
  layout.extent = scalar ? 1 : t->shape[static_cast<std::size_t>(dim)];
  layout.dimLabel = scalar ? tr("a scalar") : tr("split along dim %1 (%2 of %3)").arg(dim).arg(layout.extent).arg(QString::fromStdString(shapeText(t->shape)));
  if (dim2 >= 0) {
    layout.extent2 = t->shape[static_cast<std::size_t>(dim2)];
    layout.dimLabel = tr("split along dims %1 (down) and %2 (across) of %3")
                          .arg(dim).arg(dim2).arg(QString::fromStdString(shapeText(t->shape)));
  }
  auto segment = [&](const std::vector<std::int64_t>& start, const std::vector<std::int64_t>& shape) {
    LayoutSegment s;
    s.start = scalar ? 0 : start[static_cast<std::size_t>(dim)];
    s.length = scalar ? 1 : shape[static_cast<std::size_t>(dim)];
    if (dim2 >= 0) {
      s.start2 = start[static_cast<std::size_t>(dim2)];
      s.length2 = shape[static_cast<std::size_t>(dim2)];
    }
    return s;
  };
  for (const auto& p : t->pieces) {
    LayoutSegment s = segment(p.start, p.shape);
    s.label = QFileInfo(QString::fromStdString(src->files[static_cast<std::size_t>(p.file)])).fileName();
    s.colour = p.file;
    layout.source << s;
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    LayoutSegment s = segment(outputs[i]->box.start, outputs[i]->box.shape);
    s.label = outputFiles[i];
    s.colour = static_cast<int>(i) + 3;  // distinct from the source's colours
    layout.target << s;
  }
  if (plan) layout.targetTitle = QString::fromStdString(targetName(plan->target));
  layoutView_->setLayout(layout);
}

// Beside a local source; for a URL, a folder named after its last part in the working directory
// (a conversion writes locally).
QString CheckpointsWorkspace::defaultDestination(const QString& source) {
  if (!isRemotePath(source.toStdString())) return source + "-converted";
  QString name = QUrl(source).path().section('/', -1, -1, QString::SectionSkipEmpty);
  if (name.isEmpty()) name = "checkpoint";
  return QDir::current().filePath(name + "-converted");
}

// A local file or folder, or a link dragged from a browser or a bucket's console (http(s), s3).
static bool droppable(const QUrl& url) {
  return url.isLocalFile() || url.scheme() == "http" || url.scheme() == "https" || url.scheme() == "s3";
}

void CheckpointsWorkspace::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls() && droppable(event->mimeData()->urls().value(0))) event->acceptProposedAction();
}

void CheckpointsWorkspace::dropEvent(QDropEvent* event) {
  const QUrl url = event->mimeData()->urls().value(0);
  if (!droppable(url)) return;
  event->acceptProposedAction();
  openPath(url.isLocalFile() ? url.toLocalFile()
                             : url.toString(url.scheme() == "s3" ? QUrl::FullyDecoded : QUrl::FullyEncoded));
}

}  // namespace stoker
