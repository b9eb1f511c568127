#include "dataset_picker.h"

#include <QCompleter>
#include <QDir>
#include <QKeyEvent>
#include <QWheelEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QStandardItemModel>

#include "background_settings.h"
#include "net/remote_url.h"
#include "remote_dataset_dialog.h"

namespace stoker {
namespace {

constexpr int kMaxRecent = 8;
constexpr int kBrowseRole = Qt::UserRole + 1;  // set on the entries that open a dialog
const char* kRecentKey = "loader/recentDatasets";
const QStringList kBuiltIn = {"fashion-mnist", "synthetic:50000,3x32x32,f32", "synthetic:20000,3x64x64,u8,20"};
const DatasetPicker::Browse kBrowseOrder[] = {DatasetPicker::Browse::ImageFolder, DatasetPicker::Browse::WebDataset,
                                              DatasetPicker::Browse::Tokens, DatasetPicker::Browse::Megatron,
                                              DatasetPicker::Browse::Tensors, DatasetPicker::Browse::Remote};

// A section title in the list: shown, never chosen.
void addHeading(QComboBox* combo, const QString& text) {
  combo->addItem(text);
  auto* model = qobject_cast<QStandardItemModel*>(combo->model());
  if (auto* item = model ? model->item(combo->count() - 1) : nullptr) {
    item->setFlags(item->flags() & ~(Qt::ItemIsSelectable | Qt::ItemIsEnabled));
    QFont f = item->font();
    f.setBold(true);
    item->setFont(f);
  }
}

}  // namespace

DatasetPicker::DatasetPicker(QWidget* parent) : QComboBox(parent) {
  setEditable(true);
  setInsertPolicy(QComboBox::NoInsert);  // typing a spec does not grow the list; running it does (remember)
  // A long path must not widen the form: the field takes the width the form gives it.
  setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  setMinimumContentsLength(16);
  chooser_ = [this](Browse kind) { return defaultChooser(kind); };
  rebuild("fashion-mnist");
  connect(this, qOverload<int>(&QComboBox::activated), this, &DatasetPicker::onActivated);
  connect(this, &QComboBox::currentTextChanged, this, [this](const QString& text) {
    for (Browse kind : kBrowseOrder)
      if (text == browseLabel(kind)) return;
    if (!rebuilding_) lastSpec_ = text;
  });
}

QString DatasetPicker::browseLabel(Browse kind) {
  switch (kind) {
    case Browse::ImageFolder: return tr("Image folder…");
    case Browse::WebDataset: return tr("WebDataset shards…");
    case Browse::Tokens: return tr("Token file…");
    case Browse::Megatron: return tr("Megatron dataset…");
    case Browse::Tensors: return tr("Tensor file…");
    case Browse::Remote: return tr("Remote (s3://, https://)…");
  }
  return {};
}

QString DatasetPicker::specFor(Browse kind, const QString& path) {
  switch (kind) {
    case Browse::ImageFolder: return "imagefolder:" + path;
    case Browse::WebDataset:  // a folder of shards, or one shard
      return QFileInfo(path).isDir() ? "wds:" + QDir(path).filePath("*.tar") : "wds:" + path;
    case Browse::Tokens: return "tokens:" + path;
    case Browse::Megatron:  // the spec names the prefix of PREFIX.bin + PREFIX.idx
      return "megatron:" + (path.endsWith(".idx") || path.endsWith(".bin") ? path.chopped(4) : path);
    case Browse::Tensors: return path;
    case Browse::Remote: return path;  // the dialog wrote the whole spec
  }
  return path;
}

QStringList DatasetPicker::recent() const { return background_settings::value(kRecentKey).toStringList(); }

void DatasetPicker::remember(const QString& spec) {
  // A URL with a password or a presigned signature is not kept: no secret in the settings.
  if (spec.trimmed().isEmpty() || holdsSecret(spec.toStdString())) return;
  QStringList list = recent();
  list.removeAll(spec.trimmed());
  list.prepend(spec.trimmed());
  while (list.size() > kMaxRecent) list.removeLast();
  background_settings::set({{kRecentKey, list}});  // remembered as a run starts: not synced on the GUI thread
  rebuild(currentText());
}

void DatasetPicker::setSpec(const QString& spec) { setCurrentText(spec); }

void DatasetPicker::rebuild(const QString& keepText) {
  rebuilding_ = true;
  clear();
  const QStringList recents = recent();
  if (!recents.isEmpty()) {
    addHeading(this, tr("Recent"));
    addItems(recents);
  }
  addHeading(this, tr("Built in"));
  for (const QString& b : kBuiltIn)
    if (!recents.contains(b)) addItem(b);
  addHeading(this, tr("Your data"));
  for (Browse kind : kBrowseOrder) {
    addItem(browseLabel(kind));
    setItemData(count() - 1, static_cast<int>(kind), kBrowseRole);
  }
  // Typing completes real specs only, never a heading or a browse entry.
  QStringList specs = recents;
  for (const QString& b : kBuiltIn)
    if (!specs.contains(b)) specs << b;
  if (QCompleter* old = completer()) old->deleteLater();
  auto* completer = new QCompleter(specs, this);
  completer->setCaseSensitivity(Qt::CaseSensitive);
  setCompleter(completer);
  rebuilding_ = false;
  setCurrentText(keepText);
}

void DatasetPicker::onActivated(int index) {
  const QVariant browse = itemData(index, kBrowseRole);
  if (!browse.isValid() || rebuilding_) return;
  // The browse entry's label must not stay in the field: put back what was there unless a
  // path is chosen.
  const QString before = lastSpec_;
  const auto kind = static_cast<Browse>(browse.toInt());
  const QString path = chooser_(kind);
  if (path.isEmpty()) {
    setCurrentText(before);
    return;
  }
  const QString spec = specFor(kind, path);
  setCurrentText(spec);
  Q_EMIT browsed(spec, kind == Browse::ImageFolder || kind == Browse::WebDataset ||
                          (kind == Browse::Remote && (spec.startsWith("imagefolder:") || spec.startsWith("wds:"))));
}

void DatasetPicker::wheelEvent(QWheelEvent* event) { event->ignore(); }  // the form scrolls on

void DatasetPicker::keyPressEvent(QKeyEvent* event) {
  switch (event->key()) {
    case Qt::Key_Up:
    case Qt::Key_Down:
    case Qt::Key_PageUp:
    case Qt::Key_PageDown:
      showPopup();
      return;
    default:
      QComboBox::keyPressEvent(event);
  }
}

QString DatasetPicker::defaultChooser(Browse kind) {
  switch (kind) {
    case Browse::ImageFolder:
      return QFileDialog::getExistingDirectory(this, tr("Image folder (one sub-folder per class, torchvision's ImageFolder)"));
    case Browse::WebDataset:
      return QFileDialog::getExistingDirectory(this, tr("Folder of WebDataset .tar shards"));
    case Browse::Tokens:
      return QFileDialog::getOpenFileName(this, tr("Token file (nanoGPT)"), {}, tr("Token files (*.bin)"));
    case Browse::Megatron:
      return QFileDialog::getOpenFileName(this, tr("Megatron dataset"), {}, tr("Megatron index (*.idx)"));
    case Browse::Tensors:
      return QFileDialog::getOpenFileName(this, tr("Tensor file"), {}, tr("Tensors (*.safetensors *.npy)"));
    case Browse::Remote: {
      RemoteDatasetDialog dialog(this);
      return dialog.exec() == QDialog::Accepted ? dialog.spec() : QString();
    }
  }
  return {};
}

}  // namespace stoker
