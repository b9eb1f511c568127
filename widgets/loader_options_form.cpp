#include "loader_options_form.h"

#include <QAbstractSpinBox>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QEvent>
#include <QFormLayout>
#include <QGroupBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMap>
#include <QSpinBox>
#include <QVBoxLayout>
#include <limits>

#include "util/error.h"

namespace stoker {
namespace {

// Knobs whose values do not fit an int spin box, or are free text.
bool isTextKnob(const QString& k) {
  return k == "seed" || k == "generator_seed" || k == "weights" || k == "num_samples" || k == "part_size" || k == "cache_dir" ||
         k == "cache_limit";
}

QString jsonScalarText(const QJsonValue& v) {
  if (v.isArray()) {
    QStringList parts;
    for (const auto& x : v.toArray()) parts << QString::number(x.toDouble(), 'g', 10);
    return parts.join(',');
  }
  if (v.isDouble()) return QString::number(v.toInteger());  // exact: through a double, a seed lost its low digits
  return v.toString();
}

}  // namespace

LoaderOptionsForm::LoaderOptionsForm(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  const QJsonObject defaults =
      QJsonDocument::fromJson(QByteArray::fromStdString(loaderOptionsToJson(LoaderOptions{}))).object();
  QHash<QString, QFormLayout*> groups;
  for (const KnobInfo& knob : knobTable()) {
    const QString name = QString::fromStdString(knob.name);
    const QString group = QString::fromStdString(knob.group);
    if (!groups.contains(group)) {
      auto* box = new QGroupBox(tr(qPrintable(group)), this);
      auto* form = new QFormLayout(box);
      form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
      outer->addWidget(box);
      groups.insert(group, form);
    }
    const QJsonValue v = defaults.value(name);
    const auto choices = knobChoices(knob.name);
    QWidget* editor = nullptr;
    if (!choices.empty()) {
      auto* combo = new QComboBox(this);
      for (const auto& c : choices) combo->addItem(QString::fromStdString(c));
      connect(combo, &QComboBox::currentTextChanged, this, &LoaderOptionsForm::revalidate);
      editor = combo;
    } else if (name == "multiprocessing_context") {
      auto* combo = new QComboBox(this);
      combo->setEditable(true);
      combo->addItems({"", "spawn", "fork", "forkserver"});
      connect(combo, &QComboBox::currentTextChanged, this, &LoaderOptionsForm::revalidate);
      editor = combo;
    } else if (name == "transforms") {
      // torchvision's two ImageNet pipelines as presets; any other text is parsed by the core.
      auto* combo = new QComboBox(this);
      combo->setEditable(true);
      combo->addItems({"", "RandomResizedCrop(224),RandomHorizontalFlip(0.5),Normalize(imagenet)",
                       "Resize(256),CenterCrop(224),Normalize(imagenet)", "RandomResizedCrop(224),RandomHorizontalFlip(0.5),ToDtype(u8)"});
      combo->setMinimumContentsLength(24);
      combo->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
      connect(combo, &QComboBox::currentTextChanged, this, &LoaderOptionsForm::revalidate);
      editor = combo;
    } else if (v.isBool()) {
      auto* check = new QCheckBox(this);
      connect(check, &QCheckBox::toggled, this, &LoaderOptionsForm::revalidate);
      editor = check;
    } else if (isTextKnob(name)) {
      auto* line = new QLineEdit(this);
      if (name == "weights") line->setPlaceholderText(tr("w0,w1,... one per sample"));
      if (name == "cache_dir") line->setPlaceholderText(tr("a local folder (none: every read goes to the network)"));
      connect(line, &QLineEdit::textChanged, this, &LoaderOptionsForm::revalidate);
      editor = line;
    } else if (name == "vram_max_usage" || name == "timeout") {
      auto* spin = new QDoubleSpinBox(this);
      spin->setRange(0, name == "timeout" ? 86400 : 1);
      spin->setDecimals(name == "timeout" ? 1 : 2);
      spin->setSingleStep(name == "timeout" ? 1 : 0.01);
      connect(spin, &QDoubleSpinBox::valueChanged, this, &LoaderOptionsForm::revalidate);
      editor = spin;
    } else {
      // Wider than the core allows on purpose: out-of-range values reach
      // the core's validation and get its message, not a silent clamp.
      auto* spin = new QSpinBox(this);
      spin->setRange(-1, std::numeric_limits<int>::max());
      connect(spin, &QSpinBox::valueChanged, this, &LoaderOptionsForm::revalidate);
      editor = spin;
    }
    editor->setObjectName(name);
    if (qobject_cast<QComboBox*>(editor) || qobject_cast<QAbstractSpinBox*>(editor)) {
      // Scrolling the form used to turn every combo box and spin box that passed under the mouse.
      editor->setFocusPolicy(Qt::StrongFocus);
      editor->installEventFilter(this);
    }
    const QString tip = QString("<b>%1</b><br>%2<br><i>PyTorch:</i> %3%4")
                            .arg(name, QString::fromStdString(knob.effect).toHtmlEscaped(),
                                 QString::fromStdString(knob.pytorch).toHtmlEscaped(),
                                 knob.exportOnly ? tr("<br>(only used in the exported PyTorch snippet)") : QString());
    editor->setToolTip(tip);
    // The knob's JSON name, and for enable_transforms what it does (its name says nothing of a flip).
    auto* label = new QLabel(name == "enable_transforms" ? tr("flip (enable_transforms)") : name, this);
    label->setToolTip(tip);
    groups[group]->addRow(label, editor);
    editors_.insert(name, editor);
    labels_.insert(name, label);
    tips_.insert(name, tip);
    order_ << name;
  }
  messageLabel_ = new QLabel(this);
  messageLabel_->setObjectName("validationMessage");
  messageLabel_->setWordWrap(true);
  messageLabel_->setStyleSheet("color: #d03030; font-weight: bold;");
  outer->addWidget(messageLabel_);
  outer->addStretch(1);
  setOptions(LoaderOptions{});
}

bool LoaderOptionsForm::eventFilter(QObject* watched, QEvent* event) {
  auto* widget = qobject_cast<QWidget*>(watched);
  if (event->type() == QEvent::Wheel && widget && !widget->hasFocus()) {
    event->ignore();  // not handled here: QApplication hands it on to the parents (the scroll area)
    return true;
  }
  return QWidget::eventFilter(watched, event);
}

void LoaderOptionsForm::setOptions(const LoaderOptions& options) {
  const QJsonObject values = QJsonDocument::fromJson(QByteArray::fromStdString(loaderOptionsToJson(options))).object();
  loading_ = true;
  for (const QString& name : order_) {
    QWidget* e = editors_.value(name);
    const QJsonValue v = values.value(name);
    if (auto* c = qobject_cast<QComboBox*>(e)) c->setCurrentText(v.toString());
    else if (auto* b = qobject_cast<QCheckBox*>(e)) b->setChecked(v.toBool());
    else if (auto* l = qobject_cast<QLineEdit*>(e)) l->setText(jsonScalarText(v));
    else if (auto* d = qobject_cast<QDoubleSpinBox*>(e)) d->setValue(v.toDouble());
    else if (auto* s = qobject_cast<QSpinBox*>(e)) s->setValue(v.toInt());
  }
  // Seeds are uint64 (torch.initial_seed() is at or above 2^63 half the time): QJsonValue holds
  // only int64 exactly, so they are taken from the options themselves.
  for (const auto& [name, value] : {std::pair<QString, std::uint64_t>{"seed", options.seed}, {"generator_seed", options.generator_seed}})
    if (auto* l = qobject_cast<QLineEdit*>(editors_.value(name))) l->setText(QString::number(value));
  loading_ = false;
  revalidate();
}

QString LoaderOptionsForm::formJson() const {
  QJsonObject o;
  QMap<QString, QString> beyondInt64;  // knob -> digits above int64's range (QJsonValue has no uint64)
  for (const QString& name : order_) {
    QWidget* e = editors_.value(name);
    if (auto* c = qobject_cast<QComboBox*>(e)) {
      o.insert(name, c->currentText());
    } else if (auto* b = qobject_cast<QCheckBox*>(e)) {
      o.insert(name, b->isChecked());
    } else if (auto* l = qobject_cast<QLineEdit*>(e)) {
      const QString text = l->text().trimmed();
      if (name == "weights") {
        QJsonArray a;
        for (const QString& part : text.split(',', Qt::SkipEmptyParts)) {
          bool ok = false;
          const double w = part.trimmed().toDouble(&ok);
          // Non-numbers go through as strings so the core names the knob.
          a.append(ok ? QJsonValue(w) : QJsonValue(part.trimmed()));
        }
        o.insert(name, a);
      } else if (name == "cache_dir") {
        o.insert(name, text);  // a folder, even one named by digits
      } else {
        bool ok = false;
        const qlonglong n = text.toLongLong(&ok);
        o.insert(name, ok ? QJsonValue(n) : QJsonValue(text));
        if (!ok) {
          text.toULongLong(&ok);
          if (ok) beyondInt64.insert(name, text);  // a uint64 seed: written as a bare number below
        }
      }
    } else if (auto* d = qobject_cast<QDoubleSpinBox*>(e)) {
      o.insert(name, d->value());
    } else if (auto* s = qobject_cast<QSpinBox*>(e)) {
      o.insert(name, s->value());
    }
  }
  QString json = QString::fromUtf8(QJsonDocument(o).toJson(QJsonDocument::Compact));
  for (auto it = beyondInt64.cbegin(); it != beyondInt64.cend(); ++it)
    json.replace("\"" + it.key() + "\":\"" + it.value() + "\"", "\"" + it.key() + "\":" + it.value());
  return json;
}

LoaderOptions LoaderOptionsForm::options() const {
  return loaderOptionsFromJson(formJson().toStdString(), "form");
}

void LoaderOptionsForm::revalidate() {
  if (loading_) return;
  QString message, knob;
  try {
    updateInactive(options());
  } catch (const Error& e) {
    message = QString::fromStdString(e.what());
    knob = QString::fromStdString(e.subject());
  }
  if (QWidget* old = editors_.value(invalidKnob_)) old->setStyleSheet(QString());
  if (QWidget* bad = editors_.value(knob)) bad->setStyleSheet("border: 2px solid #d03030;");
  const bool changedValidity = message != message_;
  message_ = message;
  invalidKnob_ = knob;
  messageLabel_->setText(message);
  messageLabel_->setVisible(!message.isEmpty());
  if (changedValidity) Q_EMIT validityChanged(message.isEmpty(), message);
  Q_EMIT changed();
}

void LoaderOptionsForm::setHostDevice(bool host) {
  if (host == hostDevice_) return;
  hostDevice_ = host;
  revalidate();
}

void LoaderOptionsForm::setRemoteDataset(bool remote) {
  if (remote == remoteDataset_) return;
  remoteDataset_ = remote;
  revalidate();
}

// Greys out the knobs that do nothing with the other settings, and says why in
// the tooltip (the value is kept: it matters again when the setting changes).
void LoaderOptionsForm::updateInactive(const LoaderOptions& o) {
  inactive_.clear();
  for (const auto& k : inactiveKnobs(o, hostDevice_, remoteDataset_))
    inactive_.insert(QString::fromStdString(k.knob), QString::fromStdString(k.reason));
  for (const QString& name : order_) {
    const QString reason = inactive_.value(name);
    const QString tip = reason.isEmpty() ? tips_.value(name)
                                         : tips_.value(name) + tr("<br><b>Greyed out:</b> %1").arg(reason.toHtmlEscaped());
    for (QWidget* w : {editors_.value(name), static_cast<QWidget*>(labels_.value(name))}) {
      w->setEnabled(reason.isEmpty());
      w->setToolTip(tip);
    }
  }
}

}  // namespace stoker
