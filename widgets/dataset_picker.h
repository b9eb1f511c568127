// dataset_picker: the Loader's "what to load" field -- an editable combo of dataset specs that
// also offers the ways to find one: "Image folder…", "WebDataset shards…", "Token file…",
// "Megatron dataset…", "Tensor file…", "Remote (s3://, https://)…" (each opens the matching dialog and writes the spec), the
// datasets used recently (kept in QSettings), and the built-in ones. A newcomer never has to
// know the spec syntax to point the loader at their data.
#pragma once

#include <QComboBox>
#include <functional>

namespace stoker {

class DatasetPicker : public QComboBox {
  Q_OBJECT
 public:
  // The entries that open a dialog, in menu order.
  enum class Browse { ImageFolder, WebDataset, Tokens, Megatron, Tensors, Remote };
  // Asks the user for a path for `kind` (a file or a folder; for Remote, the whole spec from
  // RemoteDatasetDialog); empty when cancelled.
  using Chooser = std::function<QString(Browse kind)>;

  explicit DatasetPicker(QWidget* parent = nullptr);

  QString spec() const { return currentText().trimmed(); }
  void setSpec(const QString& spec);
  // Puts `spec` first among the recent datasets (at most 8, saved in QSettings).
  void remember(const QString& spec);
  QStringList recent() const;
  // Replaces the file dialogs (tests).
  void setChooser(Chooser chooser) { chooser_ = std::move(chooser); }
  // The spec a browse entry gives for a chosen path: imagefolder:DIR, wds:DIR/*.tar, tokens:FILE, ...
  static QString specFor(Browse kind, const QString& path);
  // The label of each browse entry as the list shows it.
  static QString browseLabel(Browse kind);

 Q_SIGNALS:
  // A dataset came from a browse entry; `images` when it is an image dataset (the workspace then
  // offers image transforms).
  void browsed(const QString& spec, bool images);

 private:
  void rebuild(const QString& keepText);
  void onActivated(int index);
  QString defaultChooser(Browse kind);
  // The wheel and the arrow keys never step onto an entry (a browse entry would open its dialog
  // while the user scrolls the form): the list opens instead.
  void wheelEvent(QWheelEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;

  Chooser chooser_;
  QString lastSpec_;  // the field's text before a browse entry was picked, put back on cancel
  bool rebuilding_ = false;
};

}  // namespace stoker
