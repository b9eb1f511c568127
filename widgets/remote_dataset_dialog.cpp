#include "remote_dataset_dialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPushButton>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "data/dataset.h"
#include "data/datasets/image_folder_dataset.h"
#include "data/datasets/token_datasets.h"
#include "data/datasets/web_dataset.h"
#include "util/byte_size.h"
#include "util/open_progress.h"

#include <mutex>

namespace stoker {
namespace {

struct KindRow {
  const char* label;
  const char* prefix;
  const char* placeholder;
};

const KindRow kKinds[] = {
    {"WebDataset shards", "wds:", "s3://bucket/train/shard-{000000..000099}.tar  or  https://host/data/shard-{0000..0099}.tar"},
    {"Image folder (S3 prefix)", "imagefolder:", "s3://bucket/imagenet/train/"},
    {"Token file (nanoGPT)", "tokens:", "s3://bucket/owt/train.bin,dtype=u16,ctx=1024"},
    {"Megatron dataset", "megatron:", "s3://bucket/corpus/text_document  (PREFIX of .idx + .bin)"},
    {"Tensor file (.safetensors, .npy)", "", "https://host/data/train.safetensors"},
};

}  // namespace

// Written by the check's thread (through its ProgressSink), read by the dialog's timer.
struct RemoteDatasetDialog::CheckState : ProgressSink {
  CancelToken cancel;
  void progress(const ProgressUpdate& u) override {
    std::lock_guard<std::mutex> lock(mutex);
    last = u;
  }
  // How far the check is, in words ("" before the first update).
  QString text() {
    std::lock_guard<std::mutex> lock(mutex);
    return QString::fromStdString(describeOpenProgress(last));
  }
  std::mutex mutex;
  ProgressUpdate last;
};

RemoteDatasetDialog::RemoteDatasetDialog(QWidget* parent) : QDialog(parent), poll_(new QTimer(this)) {
  setWindowTitle(tr("Remote dataset"));
  auto* layout = new QVBoxLayout(this);
  auto* form = new QFormLayout;
  kind_ = new QComboBox(this);
  kind_->setObjectName("remoteKind");
  for (const KindRow& k : kKinds) kind_->addItem(tr(k.label));
  url_ = new QLineEdit(this);
  url_->setObjectName("remoteUrl");
  url_->setMinimumWidth(420);
  url_->setPlaceholderText(kKinds[0].placeholder);
  connect(kind_, qOverload<int>(&QComboBox::currentIndexChanged), this,
          [this](int i) { url_->setPlaceholderText(kKinds[i].placeholder); });
  form->addRow(tr("Kind"), kind_);
  form->addRow(tr("URL"), url_);
  layout->addLayout(form);
  auto* help = new QLabel(tr("Credentials and endpoint come from the environment (AWS_ACCESS_KEY_ID, "
                             "AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION) or AWS_PROFILE's "
                             "~/.aws files; none means unsigned requests (public buckets)."),
                          this);
  help->setWordWrap(true);
  layout->addWidget(help);
  checkButton_ = new QPushButton(tr("Check access"), this);
  checkButton_->setObjectName("checkAccess");
  layout->addWidget(checkButton_, 0, Qt::AlignLeft);
  result_ = new QLabel(this);
  result_->setObjectName("checkResult");
  result_->setWordWrap(true);
  result_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(result_);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  layout->addWidget(buttons);
  connect(checkButton_, &QPushButton::clicked, this, &RemoteDatasetDialog::check);
  poll_->setInterval(250);
  connect(poll_, &QTimer::timeout, this, [this] {
    const QString far = state_ ? state_->text() : QString();
    if (!far.isEmpty()) result_->setText(tr("Checking %1 … %2").arg(checked_, far));
  });
  connect(&watcher_, &QFutureWatcher<Outcome>::finished, this, [this] {
    poll_->stop();
    checkButton_->setEnabled(true);
    const Outcome o = watcher_.result();
    result_->setText(o.text);
    result_->setStyleSheet(o.ok ? QString() : QString("color: #b00020"));
    checking_ = false;
    adjustSize();  // room for the answer's lines: the help text above must not lose its last one
  });
}

RemoteDatasetDialog::~RemoteDatasetDialog() {
  if (state_) state_->cancel.cancel();  // the check's thread keeps its state; it stops at its next shard
}

void RemoteDatasetDialog::done(int result) {
  if (state_) state_->cancel.cancel();
  QDialog::done(result);
}

QString RemoteDatasetDialog::spec() const {
  return QString::fromUtf8(kKinds[kind_->currentIndex()].prefix) + url_->text().trimmed();
}

QString RemoteDatasetDialog::resultText() const { return result_->text(); }

void RemoteDatasetDialog::check() {
  if (checking_) return;
  checking_ = true;
  checkButton_->setEnabled(false);
  result_->setStyleSheet({});
  checked_ = spec();
  result_->setText(tr("Checking %1 …").arg(checked_));
  const QString s = checked_;
  state_ = std::make_shared<CheckState>();
  poll_->start();
  // The error is caught on the worker: QtConcurrent would hand over only QException's kind.
  watcher_.setFuture(QtConcurrent::run([s, state = state_] {
    try {
      OpenProgressScope scope({state.get(), &state->cancel});
      return Outcome{true, describe(s)};
    } catch (const std::exception& e) {
      return Outcome{false, QString::fromStdString(e.what())};
    }
  }));
}

QString RemoteDatasetDialog::describe(const QString& spec) {
  // Listing needs no transforms: image datasets open to list their samples and labels.
  const auto dataset = openDatasetToList(spec.toStdString());
  QString out = tr("%1 samples").arg(QLocale().toString(static_cast<qlonglong>(dataset->size())));
  if (const auto* w = dynamic_cast<const WebDataset*>(dataset.get()))
    out += tr(" in %1 shards (%2)").arg(w->shards().size()).arg(QString::fromStdString(humanBytes(w->shardBytes())));
  if (const auto* f = dynamic_cast<const ImageFolderDataset*>(dataset.get())) out += tr(", %1 classes").arg(f->classes().size());
  if (const auto* t = dynamic_cast<const TokenWindowDataset*>(dataset.get()))
    out += tr(", %1 tokens").arg(QLocale().toString(static_cast<qlonglong>(t->tokens())));
  // Opened to list, an image dataset's description ends in ", no transforms": not news here.
  QString description = QString::fromStdString(dataset->description());
  if (description.endsWith(", no transforms")) description.chop(15);
  return out + "\n" + description;
}

}  // namespace stoker
