// loader_workspace_export: the Loader workspace's ways out -- LoaderOptions as JSON (import,
// export) and the same loader as code: a PyTorch script that runs as pasted, the stoker.Loader
// call, the C++ builder; shown in a dialog, copied or saved with the weights they load.
#include "loader_workspace.h"

#include <QApplication>
#include <QClipboard>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QVBoxLayout>

#include "loader_options_form.h"
#include "data/pytorch_script.h"
#include "util/error.h"

namespace stoker {

bool LoaderWorkspace::importOptions(const QString& path) {
  try {
    form_->setOptions(loadLoaderOptions(path.toStdString()));
    setStatus(tr("Imported %1.").arg(path));
    return true;
  } catch (const Error& e) {
    setStatus(tr("Cannot import: %1").arg(QString::fromStdString(e.what())));
    return false;
  }
}

bool LoaderWorkspace::exportOptions(const QString& path) {
  try {
    saveLoaderOptions(path.toStdString(), form_->options());
    setStatus(tr("Exported to %1.").arg(path));
    return true;
  } catch (const Error& e) {
    setStatus(tr("Cannot export: %1").arg(QString::fromStdString(e.what())));
    return false;
  }
}

QString LoaderWorkspace::pytorchSnippet() const {
  try {
    // A script that runs as pasted: the dataset defined, nothing pinned on cpu.
    return QString::fromStdString(exportPyTorchScript(form_->options(), dataset().toStdString(),
                                                      snippetDevice().toStdString()));
  } catch (const Error& e) {
    return QString("# the options are invalid: %1").arg(QString::fromStdString(e.what()));
  }
}

QString LoaderWorkspace::stokerSnippet() const {
  try {
    return QString::fromStdString(
        exportStokerSnippet(form_->options(), dataset().toStdString(), snippetDevice().toStdString()));
  } catch (const Error& e) {
    return QString("# the options are invalid: %1").arg(QString::fromStdString(e.what()));
  }
}

QString LoaderWorkspace::snippetDevice() const {
  const QString device = devices_->text().section(',', 0, 0).trimmed();
  return device.isEmpty() || device == "all" ? QStringLiteral("cuda:0") : device;
}

QString LoaderWorkspace::cppSnippet() const {
  try {
    return QString::fromStdString(exportCppSnippet(form_->options()));
  } catch (const Error& e) {
    return QString("// the options are invalid: %1").arg(QString::fromStdString(e.what()));
  }
}

QString LoaderWorkspace::weightsPathFor(const QString& snippetPath) const {
  const QFileInfo info(snippetPath);
  return info.dir().filePath(info.completeBaseName() + ".weights.json");
}

bool LoaderWorkspace::saveSnippet(const QString& path, Snippet kind) {
  try {
    const LoaderOptions o = form_->options();
    const std::string weights = weightsPathFor(path).toStdString();
    const std::string device = snippetDevice().toStdString();
    const std::string text = kind == Snippet::PyTorch  ? exportPyTorchScript(o, dataset().toStdString(), device, weights)
                             : kind == Snippet::Stoker ? exportStokerSnippet(o, dataset().toStdString(), device, weights)
                                                       : exportCppSnippet(o, device, weights);
    if (o.sampler_type == SamplerType::Weighted) saveWeightsFile(weights, o.weights);
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate) || file.write(QByteArray::fromStdString(text)) < 0 ||
        !file.flush())
      throw Error(ErrorKind::Io, path.toStdString(), file.errorString().toStdString());
    setStatus(o.sampler_type == SamplerType::Weighted
                         ? tr("Saved %1 and the weights it loads, %2.").arg(path, QString::fromStdString(weights))
                         : tr("Saved %1.").arg(path));
    return true;
  } catch (const Error& e) {
    setStatus(tr("Cannot save the snippet: %1").arg(QString::fromStdString(e.what())));
    return false;
  }
}

void LoaderWorkspace::showSnippet(const QString& title, const QString& text, Snippet kind) {
  const bool python = kind != Snippet::Cpp;
  QDialog dialog(this);
  dialog.setWindowTitle(title);
  auto* layout = new QVBoxLayout(&dialog);
  auto* view = new QPlainTextEdit(text, &dialog);
  view->setReadOnly(true);
  view->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  layout->addWidget(view);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, &dialog);
  auto* copy = buttons->addButton(tr("Copy"), QDialogButtonBox::ActionRole);
  connect(copy, &QPushButton::clicked, &dialog, [text] { QApplication::clipboard()->setText(text); });
  auto* save = buttons->addButton(tr("Save…"), QDialogButtonBox::ActionRole);
  save->setToolTip(tr("Write the snippet to a file (a weighted sampler's weights go beside it)"));
  connect(save, &QPushButton::clicked, &dialog, [this, &dialog, kind, python] {
    const QString f = QFileDialog::getSaveFileName(&dialog, tr("Save snippet"), python ? "loader.py" : "loader.cpp",
                                                   python ? tr("Python (*.py)") : tr("C++ (*.cpp)"));
    if (f.isEmpty()) return;
    if (saveSnippet(f, kind)) dialog.accept();
    else QMessageBox::warning(&dialog, tr("Save snippet"), statusText());  // the status line is behind this dialog
  });
  connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
  layout->addWidget(buttons);
  dialog.resize(640, 420);
  dialog.exec();
}

}  // namespace stoker
