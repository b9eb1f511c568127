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

#include "background_job.h"
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

// The check runs on a thread of its own, joined when the dialog goes, rather than on Qt's global
// pool: a pool thread is detached and still running its thread-exit destructors after
// QThreadPool says it is done, so a check's HTTP left libcurl's TLS library (OpenSSL) a
// per-thread state that its exit-time cleanup could outrun -- a leak the sanitizer build caught.
class RemoteDatasetDialog::CheckJob : public BackgroundJob {
 public:
  using BackgroundJob::BackgroundJob;
  ~CheckJob() override { stopAndWait(); }
  // Runs `check` with this job's cancel token; `done(ok, text)` runs on `receiver`'s thread,
  // dropped if the receiver has gone.
  void start(std::function<QString(const CancelToken*)> check, QObject* receiver, std::function<void(bool, QString)> done) {
    launch([this, check = std::move(check), receiver, done = std::move(done)] {
      bool ok = false;
      QString text;
      try {
        text = check(cancelToken());
        ok = true;
      } catch (const std::exception& e) {
        text = QString::fromStdString(e.what());
      }
      markIdle();
      QMetaObject::invokeMethod(receiver, [done, ok, text] { done(ok, text); }, Qt::QueuedConnection);
    });
  }
};

// Written by the check's thread (through its ProgressSink), read by the dialog's timer.
struct RemoteDatasetDialog::CheckState : ProgressSink {
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

RemoteDatasetDialog::RemoteDatasetDialog(QWidget* parent)
    : QDialog(parent), job_(std::make_unique<CheckJob>()), poll_(new QTimer(this)) {
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
}

// Cancels a check still running (HTTP transfers stop at once, a scan at its next shard) and
// waits for its thread.
RemoteDatasetDialog::~RemoteDatasetDialog() { job_->stopAndWait(); }

void RemoteDatasetDialog::done(int result) {
  job_->stop();
  QDialog::done(result);
}

void RemoteDatasetDialog::showOutcome(bool ok, const QString& text) {
  poll_->stop();
  checkButton_->setEnabled(true);
  result_->setText(text);
  result_->setStyleSheet(ok ? QString() : QString("color: #b00020"));
  checking_ = false;
  adjustSize();  // room for the answer's lines: the help text above must not lose its last one
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
  job_->start(
      [s, state = state_](const CancelToken* cancel) {
        OpenProgressScope scope({state.get(), cancel});
        return describe(s);
      },
      this, [this](bool ok, const QString& text) { showOutcome(ok, text); });
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
