// remote_dataset_dialog: the dataset picker's "Remote (s3://, https://)…" entry -- a kind, a URL,
// and "Check access", which opens the dataset off the GUI thread (as `stoker dataset info`
// does; how much of the shards it has scanned while it runs, stopped when the dialog closes) and
// says what it found: samples, shards and their bytes, classes, tokens -- or the
// error, in the words the core gives (403 with the key id, 404, TLS, the retry budget).
#pragma once

#include <QDialog>

#include <memory>

class QComboBox;
class QTimer;
class QLabel;
class QLineEdit;
class QPushButton;

namespace stoker {

class RemoteDatasetDialog : public QDialog {
  Q_OBJECT
 public:
  explicit RemoteDatasetDialog(QWidget* parent = nullptr);
  ~RemoteDatasetDialog() override;
  // Closing stops a check still running (a WebDataset's scan downloads its shards).
  void done(int result) override;
  // The spec the fields make: wds:URL, imagefolder:URL, tokens:URL, megatron:URL, or the URL.
  QString spec() const;
  // Runs the check now (what the button does); the result lands in resultText() when done.
  void check();
  // Until the result is shown: the check's thread ends before its result reaches this one.
  bool checking() const { return checking_; }
  QString resultText() const;

  // What a check finds for `spec`, in words ("20 samples in 4 shards (1.2 MiB)"); throws the
  // core's error. Runs on any thread.
  static QString describe(const QString& spec);

 private:
  QComboBox* kind_;
  QLineEdit* url_;
  QPushButton* checkButton_;
  QLabel* result_;
  void showOutcome(bool ok, const QString& text);  // text: what was found, or the error
  class CheckJob;  // the check's thread (joined when the dialog goes)
  std::unique_ptr<CheckJob> job_;
  bool checking_ = false;
  QString checked_;  // the spec being checked: the fields may be edited meanwhile
  struct CheckState;  // the running check's cancel token and progress, shared with its thread
  std::shared_ptr<CheckState> state_;
  QTimer* poll_;  // shows the check's progress while it runs
};

}  // namespace stoker
