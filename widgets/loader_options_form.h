// loader_options_form: every LoaderOptions knob as an editor, grouped as the
// core's knob table says, each with a tooltip giving what it does and its
// PyTorch equivalent. Validates on every edit with the core's own rules: the
// offending field is outlined and the message shown under the form.
#pragma once

#include <QHash>
#include <QString>
#include <QWidget>

#include "data/loader_options.h"

class QLabel;

namespace stoker {

class LoaderOptionsForm : public QWidget {
  Q_OBJECT
 public:
  explicit LoaderOptionsForm(QWidget* parent = nullptr);

  void setOptions(const LoaderOptions& options);
  // The form's values as the core reads them; throws Error(BadInput) naming
  // the knob when they are invalid.
  LoaderOptions options() const;
  bool isValid() const { return message_.isEmpty(); }
  QString validationMessage() const { return message_; }
  QString invalidKnob() const { return invalidKnob_; }
  // The editor of `knob` (tests drive the form through these).
  QWidget* editor(const QString& knob) const { return editors_.value(knob); }
  // Whether the devices run are all host devices (cpu): copy knobs then do nothing.
  void setHostDevice(bool host);
  // An s3:// or http(s):// dataset: part_size and max_inflight_parts size its range requests.
  void setRemoteDataset(bool remote);
  // Why `knob` is greyed out (no effect with the other settings), or empty.
  QString inactiveReason(const QString& knob) const { return inactive_.value(knob); }

 Q_SIGNALS:
  void changed();
  void validityChanged(bool valid, const QString& message);

 protected:
  // A wheel over a combo box or spin box without focus scrolls the form, not the value.
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  QString formJson() const;
  void revalidate();

  void updateInactive(const LoaderOptions& o);

  QHash<QString, QWidget*> editors_;
  QHash<QString, QLabel*> labels_;
  QHash<QString, QString> tips_;
  QHash<QString, QString> inactive_;
  bool hostDevice_ = true;
  bool remoteDataset_ = false;
  QStringList order_;
  QLabel* messageLabel_;
  QString message_;
  QString invalidKnob_;
  bool loading_ = false;
};

}  // namespace stoker
