// tst_remote: datasets and checkpoints read from real servers on loopback -- nginx over HTTP(S)
// and s3rver (S3's API) -- through a fault proxy that adds 503/429, dropped and stalled bodies,
// ignored ranges and a killed connection. Remote reads must give the bytes and batches the same
// files give locally, and every bad reply must be retried or named, never read as data.
#include <QDeadlineTimer>
#include <QDir>
#include <QDirIterator>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QSet>
#include <QSysInfo>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include <ATen/ATen.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/xattr.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <cstdlib>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include "ckpt/convert.h"
#include "ckpt/inspect.h"
#include "ckpt/reshard_plan.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/loader_sweep.h"
#include "data/loader_tune.h"
#include "data/datasets/image_folder_dataset.h"
#include "data/datasets/wds_kept_scans.h"
#include "util/file_lock.h"
#include "data/datasets/web_dataset.h"
#include "expect_error.h"
#include "net/multipart_ranges.h"
#include "net/part_cache.h"
#include "net/remote_object.h"
#include "net/remote_readahead.h"
#include "util/user_cache_dir.h"
#include "net/remote_url.h"
#include "net/s3_config.h"
#include "remote_servers.h"
#include "test_support.h"
#include "util/open_progress.h"
#include "util/run_jobs.h"

using namespace stoker;
using namespace stoker::test;

namespace {

const QString kScripts = QStringLiteral(STOKER_SOURCE_DIR "/tests/datasets/");
const char* kSecret = "S3RVER";  // s3rver's own key pair is S3RVER / S3RVER

// Every sample of `ds` read as one batch, field by field.
std::vector<at::Tensor> readAll(const Dataset& ds, const std::vector<std::int64_t>& idx) {
  std::vector<at::Tensor> out;
  std::vector<std::uint8_t*> dst;
  for (const auto& f : ds.fields()) {
    std::vector<std::int64_t> shape{static_cast<std::int64_t>(idx.size())};
    shape.insert(shape.end(), f.sampleShape.begin(), f.sampleShape.end());
    out.push_back(at::empty(shape, at::TensorOptions().dtype(f.dtype)));
    dst.push_back(static_cast<std::uint8_t*>(out.back().data_ptr()));
  }
  ds.readSamples(idx.data(), static_cast<std::int64_t>(idx.size()), dst.data(), ReadContext{7, 0, nullptr});
  return out;
}

std::vector<std::int64_t> allIndices(const Dataset& ds) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(ds.size()));
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int64_t>(i);
  return idx;
}

bool sameTensors(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t f = 0; f < a.size(); ++f)
    if (!at::equal(a[f], b[f])) return false;
  return true;
}

// `count` indices spread over [0, size) in a scrambled order.
std::vector<std::int64_t> spreadIndices(std::int64_t size, std::int64_t count) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(std::min(size, count)));
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = (static_cast<std::int64_t>(i) * 7919) % size;
  return idx;
}

// The files in `dir`: {parts, temporary files, bytes of parts}.
// An image dataset's epoch through a CPU loader: its images and labels, each batch after the last.
std::vector<at::Tensor> imageBatches(const std::shared_ptr<Dataset>& ds, const LoaderOptions& options, std::int64_t e) {
  Loader loader(ds, options, DeviceSpec::parse("cpu"));
  auto epoch = loader.epoch(e);
  std::vector<at::Tensor> images, labels;
  while (auto batch = epoch.next()) {
    images.push_back(batch->tensors[0].clone());
    labels.push_back(batch->tensors[1].clone());
  }
  return {at::cat(images), at::cat(labels)};
}

// Ranks as threads of one process sharing WebDataset scans: the all-gather hands every rank all
// the scans once `world` ranks have handed theirs in.
struct ThreadAllGather {
  explicit ThreadAllGather(int ranks) : world(ranks) {}
  ScanExchange exchange() {
    return [this](const std::vector<ScannedShard>& mine) {
      std::unique_lock<std::mutex> lock(m);
      all.insert(all.end(), mine.begin(), mine.end());
      ++in;
      cv.notify_all();
      cv.wait_for(lock, std::chrono::seconds(60), [&] { return in == world; });
      return all;
    };
  }
  const int world;
  std::mutex m;
  std::condition_variable cv;
  std::vector<ScannedShard> all;
  int in = 0;
};

// The scans among what an exchange carried (not the ranks' shard lists, sent as shard -1).
std::vector<ScannedShard> scansIn(const std::vector<ScannedShard>& all) {
  std::vector<ScannedShard> scans;
  std::copy_if(all.begin(), all.end(), std::back_inserter(scans), [](const ScannedShard& x) { return x.shard >= 0; });
  return scans;
}

// Opens urlFor(r) as rank r of `world` ranks on threads of this process, with optionsFor(r),
// sharing scans through `exchange`: the datasets, and in `failures` each rank's error ("" when it
// opened).
std::vector<std::shared_ptr<Dataset>> openRanksOnThreads(const std::function<std::string(int)>& urlFor, int world,
                                                         const std::function<LoaderOptions(int)>& optionsFor,
                                                         const ScanExchange& exchange, std::vector<std::string>& failures) {
  std::vector<std::shared_ptr<Dataset>> ranks(static_cast<std::size_t>(world));
  failures.assign(static_cast<std::size_t>(world), {});
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        ranks[static_cast<std::size_t>(r)] = openWebDataset(urlFor(r), optionsFor(r), exchange);
      } catch (const std::exception& e) {
        failures[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return ranks;
}
// The same ranks all opening `url`.
std::vector<std::shared_ptr<Dataset>> openRanksOnThreads(const std::string& url, int world,
                                                         const std::function<LoaderOptions(int)>& optionsFor,
                                                         const ScanExchange& exchange, std::vector<std::string>& failures) {
  return openRanksOnThreads([&url](int) { return url; }, world, optionsFor, exchange, failures);
}

// Every update an open's progress sent.
struct ProgressRecorder : ProgressSink {
  std::mutex mutex;
  std::vector<ProgressUpdate> updates;
  void progress(const ProgressUpdate& u) override {
    std::lock_guard<std::mutex> lock(mutex);
    updates.push_back(u);
  }
};

// Small decoded batches of the test shards, read `workers` at a time.
LoaderOptions onePartShardOptions(int workers) {
  LoaderOptions o;
  o.transforms = "Resize(40),CenterCrop(32),ToDtype(u8)";
  o.max_inflight_parts = 2;  // part_size stays 8 MiB: each shard is one part
  o.batch_size = 4;
  o.num_workers = workers;
  return o;
}

// The kept-scan tests' options: the test shards' small batches, every sample read.
LoaderOptions keptScanOptions() {
  LoaderOptions o = onePartShardOptions(2);
  o.max_inflight_parts = 3;
  o.drop_last = false;
  return o;
}

// The options of the scan-sharing tests' three ranks (shard_rank left to each).
LoaderOptions sharingRankOptions() {
  LoaderOptions o = onePartShardOptions(1);
  o.seed = 3;
  o.drop_last = false;  // a rank's shards may hold 3 samples: padded to the others' count
  o.sampler_type = SamplerType::Distributed;
  o.shard_world_size = 3;
  return o;
}

// How many blocks of `block` bytes shards train-000000.tar.. of `dir` make.
int blocksOfShards(const QString& dir, int shards, qint64 block) {
  int n = 0;
  for (int s = 0; s < shards; ++s) n += static_cast<int>((QFileInfo(dir + QString("/train-%1.tar").arg(s, 6, 10, QChar('0'))).size() + block - 1) / block);
  return n;
}

// The requests (path and range) the proxy logged more than once across `logs`.
QStringList askedTwice(const std::vector<QJsonArray>& logs) {
  QSet<QString> seen;
  QStringList twice;
  for (const QJsonArray& log : logs)
    for (const auto& e : log) {
      const QString request = e.toArray()[1].toString() + " " + e.toArray()[2].toString();
      if (seen.contains(request)) twice << request;
      seen.insert(request);
    }
  return twice;
}

struct CacheFolder {
  int parts = 0, temps = 0;
  qint64 bytes = 0;
};
CacheFolder cacheFolder(const QString& dir) {
  CacheFolder c;
  for (const QFileInfo& f : QDir(dir).entryInfoList(QDir::Files | QDir::Hidden)) {
    if (f.fileName().contains(".stoker-tmp-")) ++c.temps;
    else if (f.fileName().endsWith(".part")) ++c.parts, c.bytes += f.size();
  }
  return c;
}

QByteArray randomBytes(int n, unsigned seed) {
  std::mt19937 rng(seed);
  QByteArray out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

// Sets an environment variable for one scope.
// Whether process `pid` catches SIGINT yet (/proc/PID/status: SigCgt, a hex mask, bit SIGINT - 1),
// waiting up to `timeoutMs`.
bool waitForSigintHandler(qint64 pid, int timeoutMs) {
  QElapsedTimer waited;
  waited.start();
  do {
    QFile status(QString("/proc/%1/status").arg(pid));
    if (status.open(QIODevice::ReadOnly))
      for (const QByteArray& line : status.readAll().split('\n'))
        if (line.startsWith("SigCgt:") && (line.mid(7).trimmed().toULongLong(nullptr, 16) >> (SIGINT - 1)) & 1) return true;
    QThread::msleep(20);
  } while (waited.elapsed() < timeoutMs);
  return false;
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const QByteArray& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    qputenv(name, value);
  }
  ~ScopedEnv() {
    if (had_) qputenv(name_, old_);
    else qunsetenv(name_);
  }

 private:
  const char* name_;
  QByteArray old_;
  bool had_ = false;
};

}  // namespace

class TestRemote : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  std::unique_ptr<QTemporaryDir> userCache_;  // STOKER_CACHE_DIR of the test running (init)
  RemoteServers servers_;
  QByteArray blob_;  // 1 MiB of random bytes: www/blob.bin and s3://stoker-test/blob.bin
  QString shards_;   // local WebDataset shards (www/shards and s3://stoker-test/shards)

  QString s3(const QString& key) const { return "s3://" + RemoteServers::bucket() + "/" + key; }
  // Each remote source converts to the single file the local conversion `expected` holds, and
  // verifies against the local checkpoint `local`.
  void convertsAsTheLocalFile(const QStringList& sources, const QString& local, const QString& expected, const QString& tag) {
    for (int i = 0; i < sources.size(); ++i) {
      const QString out = tmp_.filePath(QString("%1-remote-%2").arg(tag).arg(i));
      QDir(out).removeRecursively();
      const auto convert = runStoker({"ckpt", "convert", sources[i], out, "--to", "single"});
      QVERIFY2(convert.exitCode == 0, qPrintable(sources[i] + ": " + convert.err));
      QVERIFY2(readFile(out + "/model.safetensors") == readFile(expected + "/model.safetensors"), qPrintable(sources[i]));
      const auto verify = runStoker({"ckpt", "verify", sources[i], local});
      QVERIFY2(verify.exitCode == 0, qPrintable(sources[i] + ": " + verify.out + verify.err));
    }
  }

  // www/NAME: a .safetensors of `tensors` F32 tensors layer.I.weight of `bytesEach` random bytes.
  void writeModel(const QString& name, int tensors, int bytesEach) {
    QByteArray header = "{";
    for (int i = 0; i < tensors; ++i) {
      if (i) header += ",";
      header += QString("\"layer.%1.weight\":{\"dtype\":\"F32\",\"shape\":[%2],\"data_offsets\":[%3,%4]}")
                    .arg(i).arg(bytesEach / 4).arg(qint64(i) * bytesEach).arg(qint64(i + 1) * bytesEach).toUtf8();
    }
    header += "}";
    QVERIFY(writeFile(servers_.www() + "/" + name, safetensorsBytes(header, randomBytes(tensors * bytesEach, 2))));
  }

  // Runs `script` as `world` ranks of a torch.distributed job (torchrun's variables, the build's
  // Python package), each with `args`; false, with each failing rank's stderr, unless all exit 0.
  // SPARE_PORTS: two more free ports, for a script that makes its process group again.
  bool runPythonRanks(int world, const char* script, const QStringList& args) {
    const int port = freePort();
    const QString spare = QString("%1,%2").arg(freePort()).arg(freePort());
    std::vector<std::unique_ptr<QProcess>> ranks;
    for (int r = 0; r < world; ++r) {
      auto p = std::make_unique<QProcess>();
      QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
      env.insert("PYTHONPATH", QStringLiteral(STOKER_BUILD_PYTHON));
      env.insert("RANK", QString::number(r));
      env.insert("WORLD_SIZE", QString::number(world));
      env.insert("MASTER_ADDR", "127.0.0.1");
      env.insert("MASTER_PORT", QString::number(port));
      env.insert("SPARE_PORTS", spare);
      p->setProcessEnvironment(env);
      p->start(QStringLiteral(STOKER_PYTHON), QStringList{"-c", script} + args);
      ranks.push_back(std::move(p));
    }
    bool ok = true;
    const QDeadlineTimer deadline(180000);  // for all ranks together
    for (auto& p : ranks) {
      const bool finished = p->waitForFinished(static_cast<int>(std::max<qint64>(1, deadline.remainingTime())));
      if (!finished) {
        p->kill();
        p->waitForFinished(5000);
      }
      if (!finished || p->exitStatus() != QProcess::NormalExit || p->exitCode() != 0) {
        qWarning("%s%s", finished ? "" : "timed out: ", p->readAllStandardError().constData());
        ok = false;
      }
    }
    return ok;
  }

  void upload(const QString& file, const QString& key) {
    QString error;
    QVERIFY2(servers_.upload(file, key, &error), qPrintable(error));
  }

 private Q_SLOTS:
  // Each test keeps its scans of remote shards in a folder of its own (the user's cache by
  // default, data/datasets/wds_kept_scans): a test opening shards another has scanned would not
  // scan them.
  void init() {
    userCache_ = std::make_unique<QTemporaryDir>(tmp_.filePath("user-cache-XXXXXX"));
    QVERIFY(userCache_->isValid());
    qputenv("STOKER_CACHE_DIR", userCache_->path().toUtf8());
  }

  void initTestCase() {
    QVERIFY(tmp_.isValid());
    QString error;
    QVERIFY2(servers_.start(tmp_.filePath("servers"), &error), qPrintable(error));
    // Through the S3 proxy, signed with s3rver's keys; no profile files of the user's.
    qputenv("AWS_ENDPOINT_URL", QByteArray("http://127.0.0.1:") + QByteArray::number(servers_.s3ProxyPort()));
    qputenv("AWS_ACCESS_KEY_ID", "S3RVER");
    qputenv("AWS_SECRET_ACCESS_KEY", kSecret);
    qputenv("AWS_SHARED_CREDENTIALS_FILE", tmp_.filePath("no-credentials").toUtf8());
    qputenv("AWS_CONFIG_FILE", tmp_.filePath("no-config").toUtf8());
    qputenv("STOKER_HTTP_BACKOFF_MS", "20");
    qputenv("STOKER_HTTP_ATTEMPTS", "4");
    blob_ = randomBytes(1 << 20, 1);
    QVERIFY(writeFile(servers_.www() + "/blob.bin", blob_));
    upload(servers_.www() + "/blob.bin", "blob.bin");
    // Token files and WebDataset shards cut from real text and photos (the suites' own scripts).
    auto r = runPythonArgs({kScripts + "make_token_files.py", servers_.www() + "/tokens", "--tokens-bytes", "256KiB", "--max-docs", "30"});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    for (const char* f : {"tokens.bin", "corpus.idx", "corpus.bin"}) upload(servers_.www() + "/tokens/" + f, QString("tokens/") + f);
    r = runPythonArgs({kScripts + "make_photo_folder.py", tmp_.filePath("photos"), "--classes", "3", "--per-class", "6", "--png", "0.2", "--seed", "5"});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const QString photos = tmp_.filePath("photos");
    QDirIterator it(photos, QDir::Files, QDirIterator::Subdirectories);
    while (it.hasNext()) {
      const QString file = it.next();
      upload(file, "photos" + file.mid(photos.size()));
    }
    QVERIFY(writeFile(tmp_.filePath("notes.txt"), "no image"));
    upload(tmp_.filePath("notes.txt"), "textonly/a/notes.txt");
    shards_ = servers_.www() + "/shards";
    r = runPythonArgs({kScripts + "make_wds_shards.py", tmp_.filePath("photos"), shards_, "--per-shard", "5"});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    for (int s = 0; s < 4; ++s) {
      const QString name = QString("train-%1.tar").arg(s, 6, 10, QChar('0'));
      upload(shards_ + "/" + name, "shards/" + name);
    }
  }

  // Ranges read in parallel parts come back byte for byte, over HTTP and S3, each part one GET.
  void rangeReadsGiveTheFileBytes() {
    for (const QString& url : {servers_.httpUrl("blob.bin"), s3("blob.bin")}) {
      const bool http = url.startsWith("http");
      servers_.takeLog(http);
      auto o = RemoteObject::open(url.toStdString());
      QCOMPARE(o->size(), std::uint64_t(blob_.size()));
      QVERIFY(!o->etag().empty());
      QByteArray got(300000, '\0');
      o->read(12345, got.data(), static_cast<std::size_t>(got.size()), PartOptions{65536, 3});
      QVERIFY(got == blob_.mid(12345, 300000));
      const QJsonArray log = servers_.takeLog(http);
      QCOMPARE(log.size(), 1 + 5);  // open, then ceil(300000 / 65536) parts
      for (const auto& e : log) QCOMPARE(e.toArray()[3].toInt() / 100, 2);
      // The last bytes, and a read past the end refused before any request.
      QByteArray tail(100, '\0');
      o->read(o->size() - 100, tail.data(), 100);
      QVERIFY(tail == blob_.right(100));
      NAMED(expectBadInput([&] { o->read(o->size() - 10, tail.data(), 100); }, {"past its end"}));
    }
  }

  // ListObjectsV2 page after page (continuation tokens), and by folder (common prefixes).
  void listingsFollowEveryPage() {
    {
      ScopedEnv pages("STOKER_S3_LIST_MAX_KEYS", "2");
      servers_.takeLog(false);
      const auto shards = listS3(s3("shards/").toStdString(), false);
      QCOMPARE(shards.size(), std::size_t(4));
      QCOMPARE(QString::fromStdString(shards[3].url), s3("shards/train-000003.tar"));
      QCOMPARE(servers_.takeLog(false).size(), 2);
    }
    // By folder, in one page: s3rver 3.7 drops common prefixes when max-keys cuts a delimited
    // listing, and gives none for keys nested two folders deep (photos/<class>/<file>), which S3
    // does; the folders of files one level down are what it lists right.
    std::vector<std::string> folders;
    const auto top = listS3(s3("").toStdString(), true, &folders);
    QCOMPARE(QString::fromStdString(top.at(0).url), s3("blob.bin"));
    for (const char* f : {"shards/", "tokens/"})
      QVERIFY2(std::count(folders.begin(), folders.end(), s3(f).toStdString()) == 1, f);
    // A glob over S3 matches the listing.
    QCOMPARE(expandShardPattern(s3("shards/train-*.tar").toStdString()).size(), std::size_t(4));
  }

  // Listing a bucket for an s3:// glob (a thousand pages for a million shards) says how many
  // objects it has listed, with no total (it is known only at the last page); so do the CLI's
  // "open" lines.
  void s3GlobListingSaysHowFar() {
    ScopedEnv pages("STOKER_S3_LIST_MAX_KEYS", "1");  // a page per shard: 4 pages
    QVERIFY(servers_.fault(false, "", 0, 250));       // 250 ms a page: an update each
    ProgressRecorder recorder;
    {
      OpenProgressScope scope({&recorder, nullptr});
      QCOMPARE(expandShardPattern(s3("shards/train-*.tar").toStdString()).size(), std::size_t(4));
    }
    QVERIFY(servers_.fault(false, "", 0));
    QVERIFY(recorder.updates.size() >= 3);
    std::uint64_t previous = 0;
    for (const ProgressUpdate& u : recorder.updates) {
      QVERIFY2(u.unit == "objects listed" && u.total == 0 && !u.finished && u.done > previous && u.done <= 4 &&
                   u.item == s3("shards/train-").toStdString(),
               qPrintable(QString("%1 / %2 %3 (%4)").arg(u.done).arg(u.total).arg(QString::fromStdString(u.unit), QString::fromStdString(u.item))));
      previous = u.done;
    }
    QCOMPARE(recorder.updates.back().done, std::uint64_t(4));
    // The CLI, an open over a second (each request 0.6 s): the listing's lines count, without a percentage.
    QVERIFY(servers_.fault(false, "", 0, 600));
    const auto cli = runStoker({"dataset", "info", "wds:" + s3("shards/train-*.tar")});
    QVERIFY(servers_.fault(false, "", 0));
    QVERIFY2(cli.exitCode == 0 && QString::fromUtf8(cli.err).contains(QRegularExpression("\\bopen  [1-4] objects listed  [0-9.]+/s  ")), cli.err.constData());
  }

  // tokens: and megatron: over HTTP and S3 give the windows the local files give.
  void tokenDatasetsReadTheSameWindows() {
    const std::string local = (servers_.www() + "/tokens/").toStdString();
    LoaderOptions o;
    o.max_inflight_parts = 3;
    for (const QString& base : {servers_.httpUrl("tokens/"), s3("tokens/")}) {
      auto a = openDataset("tokens:" + local + "tokens.bin,ctx=64", o);
      auto b = openDataset("tokens:" + base.toStdString() + "tokens.bin,ctx=64", o);
      QCOMPARE(b->size(), a->size());
      std::vector<std::int64_t> idx{0, 5, a->size() - 1, 17, 2, 1000, 33};
      QVERIFY(sameTensors(readAll(*a, idx), readAll(*b, idx)));
      auto ma = openDataset("megatron:" + local + "corpus,ctx=32", o);
      auto mb = openDataset("megatron:" + base.toStdString() + "corpus,ctx=32", o);
      QCOMPARE(mb->size(), ma->size());
      std::vector<std::int64_t> every;  // windows crossing documents included
      for (std::int64_t i = 0; i < ma->size(); i += std::max<std::int64_t>(1, ma->size() / 50)) every.push_back(i);
      QVERIFY(sameTensors(readAll(*ma, every), readAll(*mb, every)));
    }
  }

  // `import stoker`: a training script's Loader takes the URL too, and serves the local batches.
  // From Python a long open (a remote WebDataset's scan) says how far it is on stderr, and Ctrl-C
  // stops it with KeyboardInterrupt: the script's thread waits in the C call, where Python alone
  // would see the signal only once the whole scan is done. Every request here takes 800 ms.
  void pythonOpenSaysHowFarAndStopsOnCtrlC() {
#ifndef STOKER_HAVE_PYTHON_PACKAGE
    QSKIP("this build has no Python package (stoker_c)");
#endif
    // Both runs scan (the second would open the scans the first kept, all at once).
    QString spec = "wds:" + servers_.httpUrl("shards/train-{000000..000003}.tar,scan_cache=off");
    auto start = [&](QProcess& p) {
      QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
      e.insert("PYTHONPATH", QStringLiteral(STOKER_BUILD_PYTHON));
      p.setProcessEnvironment(e);
      p.start(QStringLiteral(STOKER_PYTHON), {"-c", R"(
import signal, sys, time, stoker
signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the test's parent ignored
print('opening', flush=True)
try:
    with stoker.Loader(sys.argv[1], batch_size=4, num_workers=1, max_inflight_parts=1, transforms='Resize(40),CenterCrop(32)') as loader:
        print('opened', len(loader), flush=True)
except KeyboardInterrupt:
    print('KeyboardInterrupt', flush=True)
)", spec});
      // Under PYTHONUNBUFFERED (CI sets it) print() writes the text and its newline apart, so the
      // first read may hold "opening" alone and the newline start what follows.
      return p.waitForReadyRead(60000) && p.readLine().trimmed() == "opening";
    };
    QVERIFY(servers_.fault(true, "", 0, 800));
    QProcess whole;
    QVERIFY(start(whole));
    QVERIFY(whole.waitForFinished(60000));
    const QString err = QString::fromUtf8(whole.readAllStandardError());
    const QByteArray wholeOut = whole.readAllStandardOutput().trimmed();
    QVERIFY2(whole.exitStatus() == QProcess::NormalExit && whole.exitCode() == 0 && wholeOut.startsWith("opened"),
             qPrintable(QString("exit %1 (%2), stdout [%3], stderr [%4]")
                            .arg(whole.exitCode())
                            .arg(whole.exitStatus() == QProcess::NormalExit ? "normal" : "crashed", QString::fromUtf8(wholeOut), err)));
    QVERIFY2(err.contains(QRegularExpression("stoker: opening wds:http://\\S+: [0-9.]+ [KM]iB of about [0-9.]+ [KM]iB downloaded")) &&
                 err.contains("train-{000000..000003}.tar,scan_cache=off: done"),
             qPrintable(err));
    servers_.takeLog(true);
    QProcess interrupted;
    QVERIFY(start(interrupted));
    QThread::msleep(1000);  // the second shard's request is under way
    ::kill(static_cast<pid_t>(interrupted.processId()), SIGINT);
    QVERIFY(interrupted.waitForFinished(60000));
    QVERIFY(servers_.fault(true, "", 0));
    const QByteArray out = interrupted.readAllStandardOutput();
    QVERIFY2(out.trimmed() == "KeyboardInterrupt",
             qPrintable(QString("exit %1, stdout [%2], stderr [%3]")
                            .arg(interrupted.exitCode())
                            .arg(QString::fromUtf8(out), QString::fromUtf8(interrupted.readAllStandardError()))));
    const int requests = servers_.takeLog(true).size();
    QVERIFY2(requests < 4, qPrintable(QString::number(requests)));  // the scan stopped before the last shard
    // An s3:// glob's listing is counted, its total not known (a page a shard, 0.8 s each: the
    // third page is listed past the 2 s the first line waits).
    ScopedEnv pages("STOKER_S3_LIST_MAX_KEYS", "1");
    spec = "wds:" + s3("shards/train-*.tar,scan_cache=off");
    QVERIFY(servers_.fault(false, "", 0, 800));
    QProcess listed;
    QVERIFY(start(listed));
    QVERIFY(listed.waitForFinished(60000));
    QVERIFY(servers_.fault(false, "", 0));
    const QString listedErr = QString::fromUtf8(listed.readAllStandardError());
    QVERIFY2(listed.exitCode() == 0 && listedErr.contains(QRegularExpression("stoker: opening wds:s3://\\S+: [34] objects listed\n")),
             qPrintable(listedErr));
  }

  void pythonLoaderTakesAUrl() {
#ifndef STOKER_HAVE_PYTHON_PACKAGE
    QSKIP("this build has no Python package (stoker_c)");
#endif
    QProcess p;
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    e.insert("PYTHONPATH", QStringLiteral(STOKER_BUILD_PYTHON));
    p.setProcessEnvironment(e);
    p.start(QStringLiteral(STOKER_PYTHON), {"-c", R"(
import sys, torch, stoker
def batches(spec):
    loader = stoker.Loader(spec, batch_size=16, shuffle=True, seed=3, num_workers=2, max_inflight_parts=4)
    return [b for b in loader], loader.describe()
(local, described), (remote, remote_described) = batches('tokens:' + sys.argv[1] + ',ctx=64'), batches('tokens:' + sys.argv[2] + ',ctx=64')
assert 'network' not in described, described  # nothing asked of the network yet
net = remote_described['network']
assert net['requests'] >= len(remote) and net['bytes'] >= 130 * sum(b[0].shape[0] for b in remote) and net['retries'] == 0, net
assert len(local) == len(remote) > 10, (len(local), len(remote))
for a, b in zip(local, remote):
    assert all(torch.equal(x, y) for x, y in zip(a, b))
print(len(remote), 'batches alike')
# Workers nobody chose: the remote windows get 16 (each batch waits a round trip), the local file
# and chosen workers (the keyword, a dict or a preset naming them) keep theirs.
def workers(spec, **kw):
    with stoker.Loader('tokens:' + spec + ',ctx=64', batch_size=16, **kw) as loader:
        described = loader.describe()
        assert loader.options['num_workers'] == described['options']['num_workers'], (loader.options, described)
        return loader.options['num_workers'], ' '.join(described['notes'])
count, notes = workers(sys.argv[2])
assert count == 16 and 'num_workers 16 (not given)' in notes, (count, notes)
print('workers nobody chose, remote:', count)
count, notes = workers(sys.argv[1])
assert count == 2 and 'not given' not in notes, (count, notes)
assert workers(sys.argv[2], num_workers=3)[0] == 3
assert workers(sys.argv[2], options={'num_workers': 3})[0] == 3
assert workers(sys.argv[2], options='debug_mode')[0] == 0
# Few workers chosen for them: the advice is a StokerWarning where the script made the loader.
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    few = stoker.Loader('tokens:' + sys.argv[2] + ',ctx=64', batch_size=16, num_workers=3)
    many = stoker.Loader('tokens:' + sys.argv[2] + ',ctx=64', batch_size=16)
    import json, tempfile
    with tempfile.NamedTemporaryFile('w', suffix='.json') as saved:
        json.dump({'num_workers': 3}, saved)
        saved.flush()
        stoker.Loader.from_options(saved.name, 'tokens:' + sys.argv[2] + ',ctx=64', batch_size=16).close()
advice = [w for w in caught if issubclass(w.category, stoker.StokerWarning)]
assert len(advice) == 2 and all('one a worker (num_workers 3)' in str(w.message) for w in advice), [str(w.message) for w in caught]
assert all(w.filename == '<string>' for w in advice), [w.filename for w in advice]  # the script's lines, not the package's
assert few.describe()['advice'] == [str(advice[0].message)] and many.describe()['advice'] == []
# The ring follows the raised workers as it would have: two batches each, DataLoader's
# prefetch_factor each, or the depth the script chose.
def ring(**kw):
    with stoker.Loader('tokens:' + sys.argv[2] + ',ctx=64', batch_size=16, **kw) as loader:
        return loader.options['num_workers'], loader.options['prefetch']
assert ring() == (16, 32) and ring(prefetch_factor=4) == (16, 64) and ring(prefetch=4) == (16, 4), (ring(), ring(prefetch=4))
assert ring(options={'prefetch': 5}) == (16, 5), ring(options={'prefetch': 5})
)", servers_.www() + "/tokens/tokens.bin", s3("tokens/tokens.bin")});
    QVERIFY(p.waitForFinished(120000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().right(3000).constData());  // the traceback, past the warnings
    qInfo("%s", p.readAllStandardOutput().trimmed().constData());
  }

  // Tensor files (.safetensors, .npy) over HTTP and S3: fetched whole, the same samples; with
  // cache_dir, a later open (a new process, another rank of the node) asks only for the open.
  void tensorFilesReadAlike() {
    const QByteArray header = R"({"x":{"dtype":"F32","shape":[10,3],"data_offsets":[0,120]},"y":{"dtype":"I64","shape":[10],"data_offsets":[120,200]}})";
    QVERIFY(writeFile(servers_.www() + "/fields.safetensors", safetensorsBytes(header, randomBytes(200, 9))));
    const auto r = runPythonArgs({"-c", "import numpy, sys; numpy.save(sys.argv[1], numpy.arange(60, dtype=numpy.int32).reshape(12, 5))",
                                  servers_.www() + "/data.npy"});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    upload(servers_.www() + "/fields.safetensors", "tensors/fields.safetensors");
    upload(servers_.www() + "/data.npy", "tensors/data.npy");
    for (const QString& name : {"fields.safetensors", "data.npy"}) {
      auto local = openDataset((servers_.www() + "/" + name).toStdString());
      for (const QString& url : {servers_.httpUrl(name), s3("tensors/" + name)}) {
        auto remote = openDataset(url.toStdString());
        QCOMPARE(remote->size(), local->size());
        QVERIFY2(sameTensors(readAll(*remote, allIndices(*remote)), readAll(*local, allIndices(*local))), qPrintable(url));
        LoaderOptions cached;
        cached.cache_dir = tmp_.filePath("tensor-cache").toStdString();
        const bool http = url.startsWith("http");
        for (int open = 0; open < 2; ++open) {
          servers_.takeLog(http);
          auto again = openDataset(url.toStdString(), cached);
          QVERIFY2(sameTensors(readAll(*again, allIndices(*again)), readAll(*local, allIndices(*local))), qPrintable(url));
          const int requests = static_cast<int>(servers_.takeLog(http).size());
          QCOMPARE(requests, open == 0 ? 2 : 1);  // the open and the file's one part, then the open alone
        }
      }
      // The PyTorch export of a remote file stops and says so (np.load and load_file take local
      // paths: the script "as pasted" failed on the URL), pointing at the stoker export.
      const auto exported = runStoker({"bench", "--dataset", servers_.httpUrl(name), "--export-pytorch"});
      QVERIFY2(exported.exitCode == 0, exported.err.constData());
      QVERIFY2(exported.out.contains("raise NotImplementedError(") && exported.out.contains("take local paths") &&
                   !exported.out.contains("np.load(\"http"),
               exported.out.constData());
    }
  }

  // A tensor file is fetched whole at open (minutes for one of GBs): the opener's OpenProgressScope
  // hears its bytes, and a cancelled token stops the fetch between parts -- from `stoker dataset
  // info` too.
  void tensorFileFetchSaysHowFarAndStops() {
    const QString name = "big.npy";
    const auto r = runPythonArgs({"-c", "import numpy, sys; numpy.save(sys.argv[1], numpy.arange(1 << 19, dtype=numpy.int32).reshape(-1, 64))",
                                  servers_.www() + "/" + name});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const auto fileBytes = static_cast<std::uint64_t>(QFileInfo(servers_.www() + "/" + name).size());
    const std::string url = servers_.httpUrl(name).toStdString();
    LoaderOptions o;
    o.part_size = 65536;  // 33 parts
    o.max_inflight_parts = 1;
    ProgressRecorder recorder;
    {
      OpenProgressScope scope({&recorder, nullptr});
      QCOMPARE(openDataset(url, o)->size(), std::int64_t(1) << 13);
    }
    QVERIFY(!recorder.updates.empty());
    for (const ProgressUpdate& u : recorder.updates)
      QVERIFY2(u.unit.empty() && u.done > 0 && u.done <= fileBytes && u.total == fileBytes && (u.item == url || u.finished),
               qPrintable(QString("%1 of %2 (%3)").arg(u.done).arg(u.total).arg(QString::fromStdString(u.unit))));
    QVERIFY(recorder.updates.back().finished && recorder.updates.back().done == fileBytes);
    // At 100 ms a request the 33 parts take 3.3 s; cancelled 0.5 s in, the fetch stops at its next part.
    QVERIFY(servers_.fault(true, "", 0, 100));
    servers_.takeLog(true);
    CancelToken cancel;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      cancel.cancel();
    });
    {
      OpenProgressScope scope({nullptr, &cancel});
      NAMED(expectError([&] { openDataset(url, o); }, ErrorKind::Cancelled, {name, "cancelled"}));
    }
    canceller.join();
    const int requests = servers_.takeLog(true).size();
    QVERIFY(servers_.fault(true, "", 0));
    QVERIFY2(requests >= 2 && requests <= 12, qPrintable(QString("%1 requests of 34").arg(requests)));
    // The CLI's open line (an open over a second: each request 0.6 s) counts the file's bytes.
    QVERIFY(servers_.fault(true, "", 0, 600));
    const auto cli = runStoker({"dataset", "info", servers_.httpUrl(name)});
    QVERIFY(servers_.fault(true, "", 0));
    QVERIFY2(cli.exitCode == 0 && cli.err.contains("open 100.0%  2.0 MiB / 2.0 MiB"), cli.err.constData());
  }

  // Opening scans a remote WebDataset's shards (it downloads them): the opener's OpenProgressScope
  // hears how far it is, in the shards' bytes, and a cancelled token stops it between shards --
  // from `stoker dataset info` too, as "open" lines on stderr.
  void openingSaysHowFarAndStops() {
    using Recorder = ProgressRecorder;
    LoaderOptions o;
    o.transforms = "Resize(40),CenterCrop(32)";
    o.max_inflight_parts = 1;  // one shard at a time: an update per shard but the throttled ones
    // Every open here scans (none reads the scans an earlier one kept).
    const std::string spec = "wds:" + servers_.httpUrl("shards/train-{000000..000003}.tar,scan_cache=off").toStdString();
    Recorder recorder;
    CancelToken cancel;
    std::shared_ptr<Dataset> opened;
    {
      OpenProgressScope scope({&recorder, &cancel});
      opened = openDataset(spec, o);
    }
    const auto* shards = dynamic_cast<const WebDataset*>(opened.get());
    QVERIFY(shards && !recorder.updates.empty());
    const ProgressUpdate& first = recorder.updates.front();
    const ProgressUpdate& last = recorder.updates.back();
    QVERIFY2(!first.finished && first.done > 0 && first.total >= first.done && first.item.find("train-00000") != std::string::npos,
             first.item.c_str());
    QVERIFY(last.finished);
    QCOMPARE(last.done, shards->shardBytes());
    QCOMPARE(last.total, last.done);
    // Nothing heard outside a scope.
    const std::size_t heard = recorder.updates.size();
    openDataset(spec, o);
    QCOMPARE(recorder.updates.size(), heard);
    // Cancelled: the open stops with the named error, and fetched no shard.
    cancel.cancel();
    servers_.takeLog(true);
    {
      OpenProgressScope scope({nullptr, &cancel});
      NAMED(expectError([&] { openDataset(spec, o); }, ErrorKind::Cancelled, {"train-00000", "cancelled"}));
    }
    QCOMPARE(servers_.takeLog(true).size(), 0);
    // Within a shard too: in blocks of 16 KiB, one at a time, each request 200 ms, the first shard
    // takes dozens of requests; cancelled 1.3 s in, the scan stops at its next block. Until then the
    // progress moved within that shard, against the total its size gives (4 shards of about it).
    LoaderOptions blocks = o;
    blocks.part_size = 16384;
    blocks.num_workers = 1;
    CancelToken soon;
    Recorder within;
    QVERIFY(servers_.fault(true, "", 0, 200));
    servers_.takeLog(true);
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1300));
      soon.cancel();
    });
    {
      OpenProgressScope scope({&within, &soon});
      NAMED(expectError([&] { openDataset(spec, blocks); }, ErrorKind::Cancelled, {"train-00000", "cancelled"}));
    }
    canceller.join();
    QVERIFY(servers_.fault(true, "", 0));
    // (The first shard scanned is the first of this rank's first deal, not always train-000000.)
    QVERIFY(!within.updates.empty());
    const std::string scannedFirst = within.updates.front().item;
    const auto scannedBytes = static_cast<std::uint64_t>(QFileInfo(shards_ + "/" + QString::fromStdString(scannedFirst).section('/', -1)).size());
    const auto firstShardBlocks = static_cast<int>((scannedBytes + 16383) / 16384);
    const int requests = servers_.takeLog(true).size();
    QVERIFY2(firstShardBlocks >= 8 && requests + 3 <= firstShardBlocks,  // whole: every block of it
             qPrintable(QString("%1 requests, %2 blocks in the first shard").arg(requests).arg(firstShardBlocks)));
    for (const ProgressUpdate& u : within.updates)
      QVERIFY2(u.done > 0 && u.done < scannedBytes && u.total == 4 * scannedBytes && !u.finished && u.item == scannedFirst,
               qPrintable(QString("%1 of %2 (%3)").arg(u.done).arg(u.total).arg(QString::fromStdString(u.item))));
    // The CLI says it once an open has taken a second (a line every few seconds off a terminal, and
    // the last; nothing with --json); a quicker open says nothing. Each request 1.2 s here.
    QVERIFY(servers_.fault(true, "", 0, 1200));
    const auto slow = runStoker({"dataset", "info", QString::fromStdString(spec)});
    const auto slowJson = runStoker({"dataset", "info", QString::fromStdString(spec), "--json"});
    QVERIFY(servers_.fault(true, "", 0));
    QVERIFY2(slow.exitCode == 0 && slow.err.contains("open 100.0%"), slow.err.constData());
    QVERIFY2(slowJson.exitCode == 0 && !slowJson.err.contains("open "), slowJson.err.constData());
    const auto quick = runStoker({"dataset", "info", QString::fromStdString(spec)});
    QVERIFY2(quick.exitCode == 0 && !quick.err.contains("open "), quick.err.constData());
    // Ctrl-C stops the CLI's open (the shards' requests take 3 s each; it comes 1.5 s in): the
    // shell's 130, and the shard it stopped in, said once.
    QVERIFY(servers_.fault(true, "", 0, 3000));
    QProcess info;
    info.start(STOKER_CLI_PATH, {"dataset", "info", QString::fromStdString(spec)});
    QVERIFY(info.waitForStarted(10000));
    // Signalled before its handler is in place (a sanitizer build starts slowly), it would just die.
    QVERIFY(waitForSigintHandler(info.processId(), 60000));
    QThread::msleep(500);  // into the shards' first requests
    ::kill(static_cast<pid_t>(info.processId()), SIGINT);
    QVERIFY(info.waitForFinished(30000));
    QVERIFY(servers_.fault(true, "", 0));
    // The open stopped its requests in flight: the server still answers them 3 s late, and the
    // next test counts what is in flight at once.
    QThread::msleep(3200);
    const QString stopped = QString::fromUtf8(info.readAllStandardError());
    QVERIFY2(info.exitCode() == 130 && stopped.contains(QRegularExpression("^cancelled: \\S+train-00000\\d\\.tar$", QRegularExpression::MultilineOption)),
             qPrintable(stopped));
  }

  // wds: shards over HTTP and S3 (a brace range, and an S3 glob) decode to the local batches.
  void webDatasetShardsDecodeAlike() {
    LoaderOptions o;
    o.transforms = "Resize(40),CenterCrop(32),ToDtype(u8)";
    o.part_size = 16384;  // small parts: the scan's windows and the samples span several
    o.max_inflight_parts = 3;
    auto local = openDataset("wds:" + shards_.toStdString() + "/train-{000000..000003}.tar", o);
    const auto want = readAll(*local, allIndices(*local));
    for (const QString& spec : {"wds:" + servers_.httpUrl("shards/train-{000000..000003}.tar"),
                                "wds:" + s3("shards/train-{000000..000003}.tar"), "wds:" + s3("shards/train-*.tar")}) {
      auto remote = openDataset(spec.toStdString(), o);
      QCOMPARE(remote->size(), local->size());
      QVERIFY2(sameTensors(readAll(*remote, allIndices(*remote)), want), qPrintable(spec));
    }
    // The open's request brings a shard's first part: with parts larger than the shards, the scan
    // asks once per shard (the open and the first window were two requests). (scan_cache=off: the
    // opens above kept their scans, which a later open reads instead of scanning.)
    LoaderOptions whole = o;
    whole.part_size = 8 << 20;
    servers_.takeLog(true);
    auto scanned = openDataset("wds:" + servers_.httpUrl("shards/train-{000000..000003}.tar,scan_cache=off").toStdString(), whole);
    const QJsonArray requests = servers_.takeLog(true);
    QCOMPARE(requests.size(), 4);
    for (const auto& e : requests) QCOMPARE(e.toArray()[2].toString(), QString("bytes=0-8388607"));
    QVERIFY(sameTensors(readAll(*scanned, allIndices(*scanned)), want));
    // The open scans max_inflight_parts x workers shards at once (each holds a part): 1 x 1 keeps
    // one request in flight, 2 x 2 overlaps them (counted at the proxy, every request 30 ms). Kept
    // scans are opened more at once (webDatasetScansAreKeptWithoutACache): none is kept here.
    auto mostInFlight = [&](int inflight, int workers) -> int {
      LoaderOptions bounded = whole;
      bounded.max_inflight_parts = inflight;
      bounded.num_workers = workers;
      if (!servers_.fault(true, "", 0, 30)) return -1;
      servers_.takeLog(true);
      openDataset("wds:" + servers_.httpUrl("shards/train-{000000..000003}.tar,scan_cache=off").toStdString(), bounded);
      if (!servers_.fault(true, "", 0)) return -1;
      int most = 0;
      for (const auto& e : servers_.takeLog(true)) most = std::max(most, e.toArray()[5].toInt());
      return most;
    };
    QCOMPARE(mostInFlight(1, 1), 1);
    QVERIFY(mostInFlight(2, 2) >= 2);
  }

  // A loader reading remote shards in the dataset's own order, without a cache, fetches whole
  // blocks of part_size ahead of its reads -- each block once, not one request per image -- and
  // gives the local loader's batches; a rank of two asks only for its own shards' blocks; and the
  // blocks of a dataset the shuffle window spans whole serve the next epoch from memory.
  void webDatasetLoadersReadBlocksAhead() {
    LoaderOptions o;
    o.transforms = "Resize(40),CenterCrop(32),ToDtype(u8)";
    o.part_size = 256 << 10;  // two or three blocks a shard, several images a block
    o.max_inflight_parts = 3;
    o.batch_size = 4;
    o.num_workers = 2;
    o.seed = 3;
    o.drop_last = false;
    auto epochs = [](const std::shared_ptr<Dataset>& ds, const LoaderOptions& options, int count) {
      std::vector<std::vector<at::Tensor>> out;
      Loader loader(ds, options, DeviceSpec::parse("cpu"));
      for (int e = 0; e < count; ++e) {
        auto epoch = loader.epoch(e);
        std::vector<at::Tensor> images, labels;
        while (auto batch = epoch.next()) {
          images.push_back(batch->tensors[0].clone());
          labels.push_back(batch->tensors[1].clone());
        }
        out.push_back({at::cat(images), at::cat(labels)});
      }
      return out;
    };
    const QString pattern = "shards/train-{000000..000003}.tar";
    auto local = openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), o);
    const auto want = epochs(local, o, 2);
    std::int64_t blocks = 0;
    for (int s = 0; s < 4; ++s)
      blocks += (QFileInfo(shards_ + QString("/train-%1.tar").arg(s, 6, 10, QChar('0'))).size() + o.part_size - 1) / o.part_size;
    auto remote = openDataset("wds:" + servers_.httpUrl(pattern).toStdString(), o);
    servers_.takeLog(true);  // the scan's
    const auto got = epochs(remote, o, 2);
    for (int e = 0; e < 2; ++e) {
      QVERIFY(at::equal(got[static_cast<std::size_t>(e)][0], want[static_cast<std::size_t>(e)][0]));
      QVERIFY(at::equal(got[static_cast<std::size_t>(e)][1], want[static_cast<std::size_t>(e)][1]));
    }
    const QJsonArray log = servers_.takeLog(true);
    QSet<QString> asked;
    for (const auto& e : log) {
      const QString request = e.toArray()[1].toString() + " " + e.toArray()[2].toString();
      QVERIFY2(!asked.contains(request), qPrintable(request + " asked twice"));
      asked.insert(request);
    }
    QVERIFY2(log.size() <= blocks && log.size() < remote->size(), qPrintable(QString("%1 requests, %2 blocks").arg(log.size()).arg(blocks)));

    // Fewer blocks held than the shuffle buffer spans (readahead_mb=1: 5 blocks of 256 KiB, the
    // least the readahead holds, max_inflight_parts + 2): the
    // samples still to come are kept from each block dropped, so three epochs give the local
    // batches (bytes served from the kept samples are checked by that) and ask for fewer blocks than
    // the epochs have images (26-38 of 54 in runs here).
    const QString small = pattern + ",shuffle=6,readahead_mb=1";
    auto localSmall = openDataset("wds:" + (servers_.www() + "/" + small).toStdString(), o);
    const auto wantSmall = epochs(localSmall, o, 3);
    auto remoteSmall = openDataset("wds:" + servers_.httpUrl(small).toStdString(), o);
    servers_.takeLog(true);
    const auto gotSmall = epochs(remoteSmall, o, 3);
    for (int e = 0; e < 3; ++e) {
      QVERIFY(at::equal(gotSmall[static_cast<std::size_t>(e)][0], wantSmall[static_cast<std::size_t>(e)][0]));
      QVERIFY(at::equal(gotSmall[static_cast<std::size_t>(e)][1], wantSmall[static_cast<std::size_t>(e)][1]));
    }
    const int smallRequests = static_cast<int>(servers_.takeLog(true).size());
    QVERIFY2(smallRequests < 3 * remoteSmall->size(),
             qPrintable(QString("%1 block requests in 3 epochs of %2 samples").arg(smallRequests).arg(remoteSmall->size())));

    // Rank 1 of 2: its epoch asks only for the shards dealt to it (shards 1 and 3 without shuffle,
    // so the next epoch's, drawn ahead, are the same), and not for the blocks its scan brought
    // (1.25 MB of them: readahead_mb=1 cannot keep them all).
    LoaderOptions rank1Of2 = o;
    rank1Of2.shuffle = false;
    rank1Of2.sampler_type = SamplerType::Distributed;
    rank1Of2.shard_rank = 1;
    rank1Of2.shard_world_size = 2;
    auto ranked = openDataset("wds:" + servers_.httpUrl(pattern + ",readahead_mb=1").toStdString(), rank1Of2);
    const auto* wds = dynamic_cast<const WebDataset*>(ranked.get());
    QSet<QString> dealt;
    const auto order = ranked->ownEpochOrder(rank1Of2, 0);
    for (std::int64_t i : *order)
      dealt.insert(QString::fromStdString(wds->shards()[static_cast<std::size_t>(wds->shardOf(i))]).section('/', -1));
    QCOMPARE(dealt.size(), 2);
    servers_.takeLog(true);
    epochs(ranked, rank1Of2, 1);
    QSet<QString> read;
    for (const auto& e : servers_.takeLog(true)) read.insert(e.toArray()[1].toString().section('/', -1));
    QVERIFY(!read.isEmpty());  // what 1 MiB could not keep
    QVERIFY2(dealt.contains(read), qPrintable(QStringList(read.values()).join(", ")));
  }

  // Without a cache, a shard's scan brings its blocks (a shard that fits in one part, with the
  // scan's first request): the first epoch reads those bytes (the readahead adopts them) instead of
  // asking for the shard again, and gives the local batches. Before, each epoch's first read of a
  // shard was one more request, and a shard of several parts was fetched again but for its first.
  void webDatasetScansFeedTheFirstEpoch_data() {
    QTest::addColumn<qint64>("partSize");
    QTest::newRow("one part a shard") << qint64(8 << 20);
    QTest::newRow("4 or 5 parts a shard") << qint64(256 << 10);
  }
  void webDatasetScansFeedTheFirstEpoch() {
    QFETCH(qint64, partSize);
    const bool onePart = partSize == (8 << 20);
    LoaderOptions o = onePartShardOptions(2);
    o.part_size = partSize;
    o.seed = 3;
    o.drop_last = false;
    const QString pattern = "shards/train-{000000..000003}.tar";
    auto epochOf = [](const std::shared_ptr<Dataset>& ds, const LoaderOptions& options) {
      Loader loader(ds, options, DeviceSpec::parse("cpu"));
      auto epoch = loader.epoch(0);
      std::vector<at::Tensor> images, labels;
      while (auto batch = epoch.next()) {
        images.push_back(batch->tensors[0].clone());
        labels.push_back(batch->tensors[1].clone());
      }
      return std::pair{at::cat(images), at::cat(labels)};
    };
    const auto want = epochOf(openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), o), o);
    servers_.takeLog(true);
    auto remote = openDataset("wds:" + servers_.httpUrl(pattern).toStdString(), o);
    const QJsonArray scan = servers_.takeLog(true);
    // The scan: one request a shard, or one a block but for a block a member's skipped data
    // covers whole (shard 1's third: its photos are 140 KB to 300 KB).
    const int blocks = blocksOfShards(shards_, 4, partSize);
    if (onePart) QCOMPARE(scan.size(), 4);
    else QVERIFY2(scan.size() > 4 && scan.size() <= blocks, qPrintable(QString("%1 requests in the scan, %2 blocks").arg(scan.size()).arg(blocks)));
    const auto got = epochOf(remote, o);
    QVERIFY(at::equal(got.first, want.first));
    QVERIFY(at::equal(got.second, want.second));
    // The epoch asks only for the blocks the scan did not bring: each block once.
    const QJsonArray epochRequests = servers_.takeLog(true);
    QCOMPARE(scan.size() + epochRequests.size(), blocks);
    QVERIFY2(askedTwice({scan, epochRequests}).isEmpty(), qPrintable(askedTwice({scan, epochRequests}).join(", ")));

    // What is kept stays within readahead_mb: shard 1 (1.1 MB) never fits in 1 MiB, so the epoch
    // asks for it; the others may have been kept, depending on which scans finished first (of
    // 256 KiB blocks, some of shard 1's too).
    auto bounded = openDataset("wds:" + servers_.httpUrl(pattern + ",readahead_mb=1,scan_cache=off").toStdString(), o);
    const auto* boundedWds = dynamic_cast<const WebDataset*>(bounded.get());
    QVERIFY(boundedWds);
    QVERIFY(boundedWds->scannedBlockBytes() > 0 && boundedWds->scannedBlockBytes() <= (1 << 20));
    // With room for all, the note says they are held (and nothing of fetching again).
    const std::vector<std::string> roomy = Loader(remote, o, DeviceSpec::parse("cpu")).notes();
    QVERIFY(!roomy.empty());
    QVERIFY2(QString::fromStdString(roomy[0]).contains("are held for its first epoch (readahead_mb=1024). The scans are kept in"), roomy[0].c_str());
    // The loader says what the open downloaded and what the first epoch fetches again.
    const Loader boundedLoader(bounded, o, DeviceSpec::parse("cpu"));
    const std::vector<std::string> notes = boundedLoader.notes();
    QVERIFY(!notes.empty());
    // It is advice too (Python warns with it): indexes or a cache spare the download.
    QVERIFY(boundedLoader.advice() == std::vector<std::string>{notes[0]});
    const QString note = QString::fromStdString(notes[0]);
    QVERIFY2(note.startsWith("wds: the open downloaded ") && note.contains("readahead_mb=1), the rest is fetched again") &&
                 note.contains("index=dali"),
             qPrintable(note));
    servers_.takeLog(true);
    const auto again = epochOf(bounded, o);
    QVERIFY(at::equal(again.first, want.first));
    QSet<QString> asked;
    for (const auto& e : servers_.takeLog(true)) asked.insert(e.toArray()[1].toString().section('/', -1));
    QVERIFY2(onePart ? asked.contains("train-000001.tar") : !asked.isEmpty(), qPrintable(QStringList(asked.values()).join(", ")));
    if (onePart) {
      // Scanned one at a time (1 in flight, 1 worker), the shards are scanned in the order epoch 0
      // reads them, so the room goes to the first that fit: the epoch starts from memory and
      // fetches only later shards. 400 KiB of room (readahead_mb counts whole MiB, which hold
      // every shard here but shard 1 in any order) keeps other shards in the shards' own order.
      LoaderOptions one = o;
      one.max_inflight_parts = 1;
      one.num_workers = 1;
      const auto localOne = openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), one);
      const auto* localOneWds = dynamic_cast<const WebDataset*>(localOne.get());
      QVERIFY(localOneWds);
      const auto oneOrder = localOneWds->ownEpochOrder(one, 0);
      QVERIFY(oneOrder);
      QList<std::int64_t> dealOrder;
      for (std::int64_t i : *oneOrder)
        if (!dealOrder.contains(localOneWds->shardOf(i))) dealOrder.push_back(localOneWds->shardOf(i));
      QCOMPARE(dealOrder.size(), 4);
      const qint64 room = 400 << 10;
      auto nameOf = [](std::int64_t s) { return QString("train-%1.tar").arg(s, 6, 10, QChar('0')); };
      auto firstFit = [&](const QList<std::int64_t>& order) {
        QSet<QString> kept;
        qint64 left = room;
        for (std::int64_t s : order)
          if (const qint64 size = QFileInfo(shards_ + "/" + nameOf(s)).size(); size <= left) kept.insert(nameOf(s)), left -= size;
        return kept;
      };
      const QSet<QString> keptByDeal = firstFit(dealOrder);
      QVERIFY2(!keptByDeal.isEmpty() && keptByDeal != firstFit({0, 1, 2, 3}), "the fixture's deal must keep other shards than the shards' order");
      WebDatasetOptions w;
      w.readaheadBytes = room;
      w.deal = ShardDeal::of(one);
      w.parts.maxInflight = 1;
      std::vector<std::string> shardUrls;
      for (int s = 0; s < 4; ++s) shardUrls.push_back(servers_.httpUrl("shards/" + nameOf(s)).toStdString());
      auto inOrder = std::make_shared<WebDataset>(pattern.toStdString(), shardUrls, one.transforms, w);
      servers_.takeLog(true);
      QVERIFY(at::equal(epochOf(inOrder, one).first, want.first));
      QSet<QString> fetched, all;
      for (const auto& e : servers_.takeLog(true)) fetched.insert(e.toArray()[1].toString().section('/', -1));
      for (std::int64_t s : dealOrder) all.insert(nameOf(s));
      QCOMPARE(fetched, all - keptByDeal);
    }

    // Rank 1 of 2 holds only the shards it reads in epoch 0 (every rank scans every shard, and
    // each used to hold them all until its first deal), and its epoch asks for nothing its scan
    // brought.
    LoaderOptions ranked = o;
    ranked.sampler_type = SamplerType::Distributed;
    ranked.shard_rank = 1;
    ranked.shard_world_size = 2;
    const auto local = openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), ranked);
    const auto* localWds = dynamic_cast<const WebDataset*>(local.get());
    QVERIFY(localWds);
    QSet<std::int64_t> mine;  // its shards in epoch 0, from the same shards read locally
    const auto localOrder = localWds->ownEpochOrder(ranked, 0);
    QVERIFY(localOrder);
    for (std::int64_t i : *localOrder) mine.insert(localWds->shardOf(i));
    servers_.takeLog(true);
    auto rank1 = openDataset("wds:" + servers_.httpUrl(pattern + ",scan_cache=off").toStdString(), ranked);  // scanned again
    const QJsonArray rankScan = servers_.takeLog(true);
    const auto* wds = dynamic_cast<const WebDataset*>(rank1.get());
    QVERIFY(wds);
    QCOMPARE(mine.size(), 2);
    std::uint64_t mineBytes = 0;
    for (std::int64_t s : mine) mineBytes += QFileInfo(shards_ + QString("/train-%1.tar").arg(s, 6, 10, QChar('0'))).size();
    // Of several parts, a block the scan skipped is not held, nor one that holds only the tar's end.
    if (onePart) QCOMPARE(wds->scannedBlockBytes(), mineBytes);
    else QVERIFY(wds->scannedBlockBytes() > mineBytes / 2 && wds->scannedBlockBytes() <= mineBytes);
    epochOf(rank1, ranked);
    const QJsonArray rankRequests = servers_.takeLog(true);
    if (onePart) QVERIFY2(rankRequests.isEmpty(), qPrintable(QString("%1 requests in rank 1's epoch").arg(rankRequests.size())));
    QVERIFY2(askedTwice({rankScan, rankRequests}).isEmpty(), qPrintable(askedTwice({rankScan, rankRequests}).join(", ")));
  }

  // Fed single samples (stoker feed's planner deals them), a loader reads no order of the
  // dataset's own, so each image is its own request -- but its first epoch takes each image from
  // the blocks its scan brought (across two blocks too), asking the server for nothing, and lets
  // a block go once its samples are read. The next epoch fetches each image.
  void fedEpochsReadTheScannedShards_data() { webDatasetScansFeedTheFirstEpoch_data(); }
  void fedEpochsReadTheScannedShards() {
    QFETCH(qint64, partSize);
    LoaderOptions o = onePartShardOptions(2);
    o.part_size = partSize;
    const QString pattern = "shards/train-{000000..000003}.tar";
    auto fedEpoch = [](const std::shared_ptr<Dataset>& ds, const LoaderOptions& options, std::int64_t e,
                       const std::vector<std::int64_t>& order) {
      Loader loader(ds, options, DeviceSpec::parse("cpu"));
      // Asked as the Python binding's len() asks: a length must not turn the fed epoch into one
      // read in the dataset's own order (drawing that order planned a readahead for it).
      if (loader.batchesPerEpoch() < 1) throw std::runtime_error("no batches");
      auto epoch = loader.openEpoch(e, static_cast<std::int64_t>(order.size()));
      epoch.feed(order.data(), static_cast<std::int64_t>(order.size()), options.batch_size);
      epoch.closeFeed();
      std::vector<at::Tensor> images;
      while (auto batch = epoch.next()) images.push_back(batch->tensors[0].clone());
      return at::cat(images);
    };
    const auto local = openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), o);
    std::vector<std::int64_t> order(static_cast<std::size_t>(local->size()));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(7));
    QCOMPARE(order.size(), std::size_t{18});
    servers_.takeLog(true);
    auto remote = openDataset("wds:" + servers_.httpUrl(pattern).toStdString(), o);
    const auto* wds = dynamic_cast<const WebDataset*>(remote.get());
    QVERIFY(wds);
    const QJsonArray scan = servers_.takeLog(true);
    QVERIFY2(partSize == (8 << 20) ? scan.size() == 4 : scan.size() > 4, qPrintable(QString("%1 requests in the scan").arg(scan.size())));  // one a shard, or a block
    QVERIFY(wds->scannedBlockBytes() > 0);
    QVERIFY(at::equal(fedEpoch(remote, o, 0, order), fedEpoch(local, o, 0, order)));
    // The first epoch asks only for an image that lies in a block the scan skipped (covered whole
    // by a member's data; never with one part a shard).
    const QJsonArray first = servers_.takeLog(true);
    QSet<QString> scanned;  // "path block"
    for (const auto& e : scan)
      scanned.insert(e.toArray()[1].toString() + " " + QString::number(e.toArray()[2].toString().section('=', 1).section('-', 0, 0).toLongLong() / partSize));
    for (const auto& e : first) {
      const QString range = e.toArray()[2].toString().section('=', 1);
      bool skipped = false;
      for (qint64 b = range.section('-', 0, 0).toLongLong() / partSize; b <= range.section('-', 1).toLongLong() / partSize; ++b)
        skipped = skipped || !scanned.contains(e.toArray()[1].toString() + " " + QString::number(b));
      QVERIFY2(skipped, qPrintable(e.toArray()[1].toString() + " " + range + " was in the blocks the scan brought"));
    }
    QVERIFY2(first.size() <= (partSize == (8 << 20) ? 0 : 2), qPrintable(QString("%1 requests in the first epoch").arg(first.size())));
    QCOMPARE(wds->scannedBlockBytes(), std::uint64_t{0});  // every block's samples read: none held
    QVERIFY(at::equal(fedEpoch(remote, o, 1, order), fedEpoch(local, o, 1, order)));
    const int images = static_cast<int>(servers_.takeLog(true).size());  // a range read an image (a part of one, of 256 KiB)
    QVERIFY2(partSize == (8 << 20) ? images == 18 : images >= 18, qPrintable(QString("%1 requests in the second epoch").arg(images)));
  }

  // Three ranks opening the same remote shards without indexes share their scans (the all-gather
  // here is a barrier between threads; in Python, torch.distributed's): each scans only the shards
  // of its own first deal, so together they fetch each shard once (12 shard fetches without it),
  // and every rank still serves the local batches -- its first epoch from the bytes its scan
  // brought, its second from shards it knows by another rank's scan.
  void ranksShareTheirScans() {
    const LoaderOptions o = sharingRankOptions();
    const QString pattern = "shards/train-{000000..000003}.tar";
    const std::string url = "wds:" + servers_.httpUrl(pattern).toStdString();
    // Enough epochs for this rank to read a shard another rank scanned: up to the first epoch
    // whose deal gives it a shard outside its first deal.
    auto epochsToAForeignShard = [](const std::shared_ptr<Dataset>& ds, const LoaderOptions& options) {
      const auto* wds = dynamic_cast<const WebDataset*>(ds.get());
      auto shardsOf = [&](std::int64_t e) {
        std::set<std::int64_t> out;
        const auto order = wds->ownEpochOrder(options, e);  // kept: a loop over *temporary would dangle
        for (std::int64_t i : *order) out.insert(wds->shardOf(i));
        return out;
      };
      const auto first = shardsOf(0);
      for (int e = 1; e < 50; ++e)
        for (std::int64_t shard : shardsOf(e))
          if (!first.count(shard)) return e + 1;
      return 0;
    };
    auto epochs = [&](const std::shared_ptr<Dataset>& ds, const LoaderOptions& options) {
      std::vector<at::Tensor> out;
      Loader loader(ds, options, DeviceSpec::parse("cpu"));
      const int count = epochsToAForeignShard(ds, options);
      if (count == 0) throw std::runtime_error("no epoch deals this rank a shard it did not scan");
      for (int e = 0; e < count; ++e) {
        auto epoch = loader.epoch(e);
        std::vector<at::Tensor> labels;
        while (auto batch = epoch.next()) {
          out.push_back(batch->tensors[0].clone());
          labels.push_back(batch->tensors[1].clone());
        }
        out.push_back(at::cat(labels));
      }
      return out;
    };
    auto sameBatches = [](const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
      if (a.size() != b.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i)
        if (!at::equal(a[i], b[i])) return false;
      return true;
    };
    ThreadAllGather gather(3);
    const ScanExchange exchange = gather.exchange();
    servers_.takeLog(true);
    std::vector<std::string> failures;
    const auto ranks = openRanksOnThreads(url, 3, [&](int r) {
      LoaderOptions mine = o;
      mine.shard_rank = r;
      return mine;
    }, exchange, failures);
    for (const auto& f : failures) QVERIFY2(f.empty(), f.c_str());
    QMap<QString, int> fetched;
    for (const auto& e : servers_.takeLog(true)) fetched[e.toArray()[1].toString().section('/', -1)]++;
    QCOMPARE(fetched.size(), 4);
    for (auto it = fetched.begin(); it != fetched.end(); ++it) QVERIFY2(it.value() == 1, qPrintable(it.key()));
    QCOMPARE(scansIn(gather.all).size(), std::size_t(4));  // one scan a shard, each with its index
    for (const ScannedShard& x : scansIn(gather.all)) QVERIFY(!x.index.empty() && !x.etag.empty());
    QCOMPARE(gather.all.size(), std::size_t(4 + 3));  // and each rank's shard list (shard -1)
    for (int r = 0; r < 3; ++r) {
      LoaderOptions mine = o;
      mine.shard_rank = r;
      const auto local = openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), mine);
      QCOMPARE(ranks[static_cast<std::size_t>(r)]->size(), local->size());
      const auto want = epochs(local, mine);
      QVERIFY2(sameBatches(epochs(ranks[static_cast<std::size_t>(r)], mine), want), qPrintable(QString("rank %1").arg(r)));
    }

    // Bad scans from the others: one whose index does not parse is scanned here instead; one made
    // of another version of the shard (its ETag) is refused when an epoch first reads that shard.
    LoaderOptions rank0 = o;
    rank0.shard_rank = 0;
    const auto want0 = epochs(openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), rank0), rank0);
    const std::vector<ScannedShard> real = gather.all;
    auto theirs = [&](const std::function<void(ScannedShard&)>& spoil) {
      return ScanExchange([real, spoil](const std::vector<ScannedShard>& mine) {
        std::vector<ScannedShard> all = mine;
        for (ScannedShard x : real)
          if (std::none_of(mine.begin(), mine.end(), [&](const ScannedShard& m) { return m.shard == x.shard; })) {
            spoil(x);
            all.push_back(x);
          }
        return all;
      });
    };
    std::set<QString> ownShards;  // rank 0's first deal: what it scans anyway
    {
      const auto local = openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), rank0);
      const auto* wds = dynamic_cast<const WebDataset*>(local.get());
      const auto order = wds->ownEpochOrder(rank0, 0);
      for (std::int64_t i : *order)
        ownShards.insert(QString::fromStdString(wds->shards()[static_cast<std::size_t>(wds->shardOf(i))]).section('/', -1));
    }
    servers_.takeLog(true);
    auto rescanned = openWebDataset(url, rank0, theirs([](ScannedShard& x) { x.index = "v1.2 3\nnot an index"; }));
    int othersScanned = 0;
    for (const auto& e : servers_.takeLog(true)) othersScanned += ownShards.count(e.toArray()[1].toString().section('/', -1)) ? 0 : 1;
    QCOMPARE(othersScanned, 4 - static_cast<int>(ownShards.size()));
    QVERIFY(sameBatches(epochs(rescanned, rank0), want0));
    auto changed = openWebDataset(url, rank0, theirs([](ScannedShard& x) { x.etag = "\"an-older-version\""; }));
    NAMED(expectBadInput([&] { epochs(changed, rank0); }, {"changed on the server since another rank scanned it", "an-older-version"}));
    NAMED(expectError([&] { openWebDataset(url, rank0, [](const std::vector<ScannedShard>&) -> std::vector<ScannedShard> {
                        throw Error(ErrorKind::Network, "all_gather", "rank 2 is gone");
                      }); },
                      ErrorKind::Network, {"rank 2 is gone"}));
    // This rank's own scans failed (no such shards) and then the exchange did: both are told, its
    // own error first.
    const std::string missing = "wds:" + servers_.httpUrl("shards/missing-{000000..000003}.tar").toStdString();
    NAMED(expectError([&] { openWebDataset(missing, rank0, [](const std::vector<ScannedShard>&) -> std::vector<ScannedShard> {
                        throw Error(ErrorKind::Network, "all_gather", "rank 2 is gone");
                      }); },
                      ErrorKind::BadInput, {"missing-00000", "404", "then sharing the scans failed too", "rank 2 is gone"}));
  }

  // Ranks on three nodes, each with its own cache_dir: besides its own scans, each node keeps the
  // scans it took from the others, so its next open asks only for each shard's size and ETag.
  void sharedScansAreKeptInEachCache() {
    const LoaderOptions o = sharingRankOptions();
    const QString pattern = "shards/train-{000000..000003}.tar";
    for (const QString& base : {servers_.httpUrl(pattern), s3(pattern)}) {
      const bool http = base.startsWith("http");
      const std::string url = "wds:" + base.toStdString();
      ThreadAllGather gather(3);
      const ScanExchange exchange = gather.exchange();
      auto rankOptions = [&](int r) {
        LoaderOptions mine = o;
        mine.shard_rank = r;
        mine.cache_dir = tmp_.filePath(QString("node-cache-%1-%2").arg(http ? "http" : "s3").arg(r)).toStdString();
        return mine;
      };
      std::vector<std::string> failures;
      openRanksOnThreads(url, 3, rankOptions, exchange, failures);
      for (const auto& f : failures) QVERIFY2(f.empty(), f.c_str());
      QCOMPARE(scansIn(gather.all).size(), std::size_t(4));  // each shard scanned by one rank
      QStringList scans;
      for (const ScannedShard& x : scansIn(gather.all)) scans << QString::fromStdString(x.index);
      scans.sort();
      for (int r = 0; r < 3; ++r) {
        const LoaderOptions mine = rankOptions(r);
        const QString dir = QString::fromStdString(mine.cache_dir);
        QStringList kept;
        for (const QFileInfo& f : QDir(dir).entryInfoList({"*.wds.idx"}, QDir::Files)) kept << QString::fromUtf8(readFile(f.filePath()));
        kept.sort();
        QCOMPARE(kept, scans);  // its own and the others'
        servers_.takeLog(http);
        const auto again = openDataset(url, mine);  // the next job on this node, sharing or not
        const QJsonArray opens = servers_.takeLog(http);
        QCOMPARE(opens.size(), 4);  // one open per shard, no scan
        for (const auto& e : opens) QCOMPARE(e.toArray()[2].toString(), QString("bytes=0-0"));
        const auto local = openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), mine);
        QVERIFY2(sameTensors(imageBatches(again, mine, 1), imageBatches(local, mine, 1)), qPrintable(QString("rank %1").arg(r)));
      }
    }
  }

  // The same from Python: three ranks of a Gloo job (torchrun's variables) open stoker.Loader on
  // the remote shards; they swap their scans through torch.distributed, so each shard is fetched
  // once between them, and each rank's first epoch equals the same rank reading the local shards.
  // share_scans=True without a process group is refused, saying why.
  void pythonRanksShareTheirScans() {
#ifndef STOKER_HAVE_PYTHON_PACKAGE
    QSKIP("this build has no Python package (stoker_c)");
#endif
    const QString pattern = "shards/train-{000000..000003}.tar";
    const char* script = R"PY(
import sys, torch, torch.distributed as dist, stoker
dist.init_process_group("gloo")
def epoch(spec):
    loader = stoker.Loader(spec, batch_size=4, seed=3, num_workers=1, drop_last=False, max_inflight_parts=2,
                           transforms="Resize(40),CenterCrop(32),ToDtype(u8)")
    return [b for b in loader]
remote = epoch("wds:" + sys.argv[2])
dist.barrier()  # every rank's open and epoch are in the server's log before the test reads it
local = epoch("wds:" + sys.argv[1])
assert len(local) == len(remote) > 0, (len(local), len(remote))
for a, b in zip(local, remote):
    assert all(torch.equal(x, y) for x, y in zip(a, b))
print(dist.get_rank(), len(remote), "batches alike")
dist.destroy_process_group()
# Under a default group that is not Gloo (NCCL on GPUs; here Gloo registered under another name) the
# scans go over a Gloo group made for it, made again when the default group is made again: here by
# a job that goes on with fewer ranks, where the first group would wait for the rank that left.
dist.Backend.register_backend("notgloo", lambda store, rank, size, timeout: dist.ProcessGroupGloo(store, rank, size, timeout))
import os
for world, port in zip((3, 2), os.environ["SPARE_PORTS"].split(",")):  # a new store each time
    if int(os.environ["RANK"]) >= world:
        break
    os.environ["MASTER_PORT"], os.environ["WORLD_SIZE"] = port, str(world)
    dist.init_process_group("notgloo")
    assert dist.get_backend() == "notgloo"
    remote, local = epoch("wds:" + sys.argv[2]), epoch("wds:" + sys.argv[1])
    assert len(local) == len(remote) > 0 and all(torch.equal(x, y) for a, b in zip(local, remote) for x, y in zip(a, b))
    dist.barrier()
    dist.destroy_process_group()
)PY";
    servers_.takeLog(true);
    // (scan_cache=off: each open scans, rather than read what the first one kept.)
    QVERIFY(runPythonRanks(3, script, {servers_.www() + "/" + pattern, servers_.httpUrl(pattern + ",scan_cache=off")}));
    QMap<QString, int> fetched;
    for (const auto& e : servers_.takeLog(true)) fetched[e.toArray()[1].toString().section('/', -1)]++;
    QCOMPARE(fetched.size(), 4);
    // Once per open of the three ranks (in the Gloo job, then twice under "notgloo"): 9 without sharing.
    for (auto it = fetched.begin(); it != fetched.end(); ++it) QVERIFY2(it.value() == 3, qPrintable(it.key()));

    QProcess alone;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("PYTHONPATH", QStringLiteral(STOKER_BUILD_PYTHON));
    alone.setProcessEnvironment(env);
    alone.start(QStringLiteral(STOKER_PYTHON), {"-c", R"PY(
import sys, stoker
try:
    stoker.Loader("wds:" + sys.argv[1], rank=0, world_size=2, transforms="Resize(40),CenterCrop(32)", share_scans=True)
except ValueError as e:
    print(e)
else:
    raise SystemExit("share_scans=True opened without a process group")
)PY", servers_.httpUrl(pattern)});
    QVERIFY(alone.waitForFinished(120000));
    const QByteArray said = alone.readAllStandardOutput();
    QVERIFY2(alone.exitCode() == 0, alone.readAllStandardError().constData());
    QVERIFY2(said.contains("share_scans=True") && said.contains("torch.distributed is not initialized"), said.constData());
  }

  // A scan whose index cannot travel as JSON (member names that are not UTF-8 -- tar allows any
  // bytes) goes empty: the other rank scans that shard itself instead of the exchange failing (one
  // rank out of the all-gather would leave the others waiting), and both serve the local batches.
  void pythonRanksShareScansOfOddNames() {
#ifndef STOKER_HAVE_PYTHON_PACKAGE
    QSKIP("this build has no Python package (stoker_c)");
#endif
    const QString dir = servers_.www() + "/odd";
    const auto made = runPythonArgs({"-c", R"PY(
import io, os, sys, tarfile
from PIL import Image
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
def jpeg(c):
    b = io.BytesIO()
    Image.new("RGB", (48, 40), (c, 255 - c, 90)).save(b, "JPEG")
    return b.getvalue()
odd = b"odd-" + bytes([0xFF, 0xFE])  # not UTF-8
for s, keys in enumerate([[b"plain-a", b"plain-b"], [odd + b"-a", odd + b"-b"]]):
    with tarfile.open(os.path.join(out, f"odd-{s}.tar"), "w", format=tarfile.GNU_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as t:
        for i, key in enumerate(keys):
            for ext, data in ((b".jpg", jpeg(40 * i + 100 * s)), (b".cls", str(i).encode())):
                info = tarfile.TarInfo(os.fsdecode(key + ext))
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
)PY", dir});
    QVERIFY2(made.exitCode == 0, qPrintable(made.err));
    // Rank 0 reads (and clears) the proxy's log once both ranks have opened: what the opens asked.
    const char* script = R"PY(
import collections, json, sys, urllib.request, torch, torch.distributed as dist, stoker
dist.init_process_group("gloo")
def loader(spec):
    return stoker.Loader(spec, batch_size=2, seed=1, num_workers=1, drop_last=False, transforms="Resize(32),CenterCrop(32)")
remote = loader("wds:" + sys.argv[2] + "odd/odd-{0..1}.tar")
dist.barrier()
if dist.get_rank() == 0:
    log = urllib.request.urlopen(sys.argv[2] + "__log").read().decode().splitlines()
    asked = collections.Counter(json.loads(line)[1].rsplit("/", 1)[-1] for line in log if line)
    assert asked == {"odd-0.tar": 1, "odd-1.tar": 2}, asked
dist.barrier()
local = loader("wds:" + sys.argv[1])
for e in range(2):
    got, want = list(remote), list(local)
    assert len(got) == len(want) > 0, (len(got), len(want))
    for a, b in zip(got, want):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
dist.destroy_process_group()
)PY";
    servers_.takeLog(true);
    QVERIFY(runPythonRanks(2, script, {dir + "/odd-{0..1}.tar", servers_.httpUrl("")}));
  }

  // With DALI indexes beside the shards (index=dali), opening asks for the four small .idx files
  // and no shard byte; a rank of two then asks only for its own shards -- so N ranks do not each
  // download every shard -- and the batches are the local ones, over HTTP and S3. `stoker dataset
  // index` writes a remote shard's index into a local folder, the bytes wds2idx's format gives.
  void webDatasetIndexesSpareTheShards() {
    QStringList tars;
    for (int s = 0; s < 4; ++s) tars << shards_ + QString("/train-%1.tar").arg(s, 6, 10, QChar('0'));
    auto r = runPythonArgs(QStringList{kScripts + "make_dali_index.py"} + tars);
    QVERIFY2(r.exitCode == 0, r.err.constData());
    for (int s = 0; s < 4; ++s) {
      const QString name = QString("train-%1.idx").arg(s, 6, 10, QChar('0'));
      upload(shards_ + "/" + name, "shards/" + name);
    }
    LoaderOptions o;
    o.transforms = "Resize(40),CenterCrop(32),ToDtype(u8)";
    o.max_inflight_parts = 3;
    o.batch_size = 4;
    o.num_workers = 2;
    o.shuffle = false;
    o.sampler_type = SamplerType::Distributed;
    o.shard_rank = 0;
    o.shard_world_size = 2;
    o.drop_last = false;
    auto batchesOf = [](const std::shared_ptr<Dataset>& ds, const LoaderOptions& options) { return imageBatches(ds, options, 0); };
    const QString pattern = "shards/train-{000000..000003}.tar";
    auto local = openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), o);
    const auto want = batchesOf(local, o);
    const auto all = readAll(*local, allIndices(*local));
    for (const QString& base : {servers_.httpUrl(pattern), s3(pattern)}) {
      const bool http = base.startsWith("http");
      servers_.takeLog(http);
      auto indexed = openDataset("wds:" + base.toStdString() + ",index=dali", o);
      QStringList opened;
      for (const auto& e : servers_.takeLog(http)) opened << e.toArray()[1].toString().section('/', -1).section('?', 0, 0);
      opened.sort();
      QCOMPARE(opened, (QStringList{"train-000000.idx", "train-000001.idx", "train-000002.idx", "train-000003.idx"}));
      QVERIFY(sameTensors(batchesOf(indexed, o), want));
      QSet<QString> read;
      for (const auto& e : servers_.takeLog(http)) read.insert(e.toArray()[1].toString().section('/', -1).section('?', 0, 0));
      QCOMPARE(read, (QSet<QString>{"train-000000.tar", "train-000002.tar"}));  // rank 0's, without shuffle
      QVERIFY(sameTensors(readAll(*indexed, allIndices(*indexed)), all));  // single samples too (a feed plan's reads)
    }
    const QString out = tmp_.filePath("remote-indexes");
    QVERIFY(QDir().mkpath(out));
    const auto refused = runStoker({"dataset", "index", "wds:" + servers_.httpUrl(pattern)});
    QCOMPARE(refused.exitCode, 2);
    QVERIFY2(refused.err.contains("--out-dir"), refused.err.constData());
    const auto written = runStoker({"dataset", "index", "wds:" + s3(pattern), "--out-dir", out});
    QVERIFY2(written.exitCode == 0, written.err.constData());
    QVERIFY2(written.out.contains("wrote 4 index files (18 samples)"), written.out.constData());
    for (int s = 0; s < 4; ++s) {
      const QString name = QString("/train-%1.idx").arg(s, 6, 10, QChar('0'));
      QCOMPARE(readFile(out + name), readFile(shards_ + name));
    }
    // index=dali:DIR opens from that folder -- local (the job's own copy: the open asks the server
    // for nothing) or remote -- and a rank still reads only its own shards.
    const QString indexesAtServer = servers_.httpUrl("shards");
    for (const QString& dir : {out, indexesAtServer})
      for (const QString& base : {servers_.httpUrl(pattern), s3(pattern)}) {
        const bool http = base.startsWith("http");
        servers_.takeLog(true);
        servers_.takeLog(false);
        auto indexed = openDataset("wds:" + base.toStdString() + ",index=dali:" + dir.toStdString(), o);
        QStringList opened;
        for (const auto& e : servers_.takeLog(true)) opened << e.toArray()[1].toString().section('/', -1).section('?', 0, 0);
        opened.sort();
        const QStringList fromServer{"train-000000.idx", "train-000001.idx", "train-000002.idx", "train-000003.idx"};
        QCOMPARE(opened, dir == out ? QStringList() : fromServer);
        QVERIFY(servers_.takeLog(false).isEmpty());
        QVERIFY(sameTensors(batchesOf(indexed, o), want));
        QSet<QString> read;
        for (const auto& e : servers_.takeLog(http)) read.insert(e.toArray()[1].toString().section('/', -1).section('?', 0, 0));
        QCOMPARE(read, (QSet<QString>{"train-000000.tar", "train-000002.tar"}));
      }
  }

  // Remote shards under cache_dir without indexes: the first open scans them and keeps each scan as
  // the shard's DALI index in the folder; a later open (the next job, another rank of the node)
  // asks the server only for the shards' opens and serves the same batches. A kept index that was
  // damaged is scanned again and replaced; processes opening at once scan each shard once.
  void webDatasetScansAreKept() {
    QStringList tars;
    for (int s = 0; s < 4; ++s) tars << shards_ + QString("/train-%1.tar").arg(s, 6, 10, QChar('0'));
    auto made = runPythonArgs(QStringList{kScripts + "make_dali_index.py"} + tars);  // what wds2idx would write
    QVERIFY2(made.exitCode == 0, made.err.constData());
    QStringList want;
    for (const QString& tar : tars) want << QString::fromUtf8(readFile(QString(tar).replace(".tar", ".idx")));
    want.sort();
    const LoaderOptions o = keptScanOptions();
    auto batchesOf = [](const std::shared_ptr<Dataset>& ds, const LoaderOptions& options) { return imageBatches(ds, options, 1); };
    const QString pattern = "shards/train-{000000..000003}.tar";
    auto local = openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), o);
    const auto expected = batchesOf(local, o);
    auto keptIndexes = [](const QString& dir) {
      QStringList texts;
      for (const QFileInfo& f : QDir(dir).entryInfoList({"*.wds.idx"}, QDir::Files)) texts << QString::fromUtf8(readFile(f.filePath()));
      texts.sort();
      return texts;
    };
    for (const QString& base : {servers_.httpUrl(pattern), s3(pattern)}) {
      const bool http = base.startsWith("http");
      LoaderOptions cached = o;
      cached.cache_dir = tmp_.filePath(http ? "scan-cache-http" : "scan-cache-s3").toStdString();
      const QString dir = QString::fromStdString(cached.cache_dir);
      const std::string spec = "wds:" + base.toStdString();
      servers_.takeLog(http);
      const auto scanned = openDataset(spec, cached);
      QVERIFY(sameTensors(batchesOf(scanned, cached), expected));
      QVERIFY(servers_.takeLog(http).size() > 4);  // the opens and the scans
      for (const std::string& n : Loader(scanned, cached, DeviceSpec::parse("cpu")).notes())  // the scan went to the cache
        QVERIFY2(n.find("the open downloaded") == std::string::npos, n.c_str());
      QCOMPARE(keptIndexes(dir), want);
      QCOMPARE(QDir(dir).entryList({"*.lock"}, QDir::Files), QStringList());
      // The parts gone (cache_limit evicts them first): the scan would fetch every shard again.
      for (const QFileInfo& f : QDir(dir).entryInfoList({"*.part"}, QDir::Files)) QVERIFY(QFile::remove(f.filePath()));
      auto again = openDataset(spec, cached);
      const QJsonArray opens = servers_.takeLog(http);
      QCOMPARE(opens.size(), 4);  // one open per shard (its size and ETag), no scan
      for (const auto& e : opens) QCOMPARE(e.toArray()[2].toString(), QString("bytes=0-0"));
      QVERIFY(sameTensors(batchesOf(again, cached), expected));
      QCOMPARE(servers_.takeLog(http).size(), 4);  // each shard's one part, for its images
      // A damaged kept index: scanned again and replaced.
      const QString damaged = QDir(dir).entryInfoList({"*.wds.idx"}, QDir::Files).first().filePath();
      QVERIFY(writeFile(damaged, "v1.2 3\njpg 0 zz\n"));
      QVERIFY(sameTensors(batchesOf(openDataset(spec, cached), cached), expected));
      QCOMPARE(keptIndexes(dir), want);
    }
    // Two processes opening at once, every request 150 ms late so that their scans would overlap:
    // each shard is fetched once (one part each, shards being smaller than part_size).
    const QString shared = tmp_.filePath("scan-cache-ranks");
    const QString options = tmp_.filePath("scan-cache-ranks.json");
    QVERIFY(writeFile(options, QString("{\"cache_dir\": \"%1\", \"max_inflight_parts\": 3}").arg(shared).toUtf8()));
    QVERIFY(servers_.fault(true, "", 0, 150));
    servers_.takeLog(true);
    std::vector<std::unique_ptr<QProcess>> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.push_back(std::make_unique<QProcess>());
      ranks.back()->start(STOKER_CLI_PATH, {"bench", "--dataset", "wds:" + servers_.httpUrl(pattern), "--options", options,
                                            "--transforms", QString::fromStdString(o.transforms), "--batch-size", "4", "--epochs", "1", "--quiet"});
    }
    for (auto& p : ranks) {
      QVERIFY(p->waitForFinished(120000));
      QVERIFY2(p->exitCode() == 0, p->readAllStandardError().constData());
    }
    QVERIFY(servers_.fault(true, "", 0));
    std::map<QString, int> fetched;  // per shard: requests other than the opens (of its first byte)
    for (const auto& e : servers_.takeLog(true))
      if (e.toArray()[2].toString() != "bytes=0-0") ++fetched[e.toArray()[1].toString().section('/', -1)];
    QCOMPARE(fetched.size(), std::size_t(4));
    for (const auto& [shard, n] : fetched) QVERIFY2(n == 1, qPrintable(shard + " fetched " + QString::number(n) + " times"));
    QCOMPARE(keptIndexes(shared), want);
    // The ranks' scan locks are gone with the scans: a cache folder does not collect a file per shard.
    QCOMPARE(QDir(shared).entryList({"*.lock"}, QDir::Files), QStringList());
  }

  // Without cache_dir the scans are kept too, in the user's cache (STOKER_CACHE_DIR, else
  // $XDG_CACHE_HOME/stoker, else ~/.cache/stoker): the script run again, or the next `stoker
  // bench`, asks the server only for the shards' opens instead of downloading them to find their
  // tar headers. scan_cache=DIR names the folder, scan_cache=off keeps none; a folder that cannot be
  // made costs only the next open's scans, and the open's note says why.
  void webDatasetScansAreKeptWithoutACache() {
    const LoaderOptions o = keptScanOptions();
    auto batchesOf = [](const std::shared_ptr<Dataset>& ds, const LoaderOptions& options) { return imageBatches(ds, options, 1); };
    auto notesOf = [](const std::shared_ptr<Dataset>& ds, const LoaderOptions& options) {
      QStringList notes;
      for (const std::string& n : Loader(ds, options, DeviceSpec::parse("cpu")).notes()) notes << QString::fromStdString(n);
      return notes.join("\n");
    };
    auto keptScans = [](const QString& dir) { return QDir(dir).entryList({"*.wds.idx"}, QDir::Files).size(); };
    const QString pattern = "shards/train-{000000..000003}.tar";
    const auto expected = batchesOf(openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), o), o);
    const QString userScans = userCache_->filePath("wds-scans");
    for (const QString& base : {servers_.httpUrl(pattern), s3(pattern)}) {
      const bool http = base.startsWith("http");
      QVERIFY(QDir(userScans).removeRecursively());
      const std::string spec = "wds:" + base.toStdString();
      servers_.takeLog(http);
      const auto scanned = openDataset(spec, o);
      const QJsonArray scans = servers_.takeLog(http);
      QCOMPARE(scans.size(), 4);  // each shard's open, which brings the first block for its scan (shards are under part_size)
      for (const auto& e : scans) QCOMPARE(e.toArray()[2].toString(), QString("bytes=0-8388607"));
      const QString note = notesOf(scanned, o);
      QVERIFY2(note.contains("wds: the open downloaded ") && note.contains("The scans are kept in " + userScans + ": the next open"),
               qPrintable(note));
      QCOMPARE(keptScans(userScans), 4);
      QCOMPARE(QDir(userScans).entryList({"*.lock", "*stoker-tmp*"}, QDir::Files | QDir::Hidden), QStringList());
      QVERIFY(sameTensors(batchesOf(scanned, o), expected));
      // The next run: one open per shard (its size and ETag), no scan, the same batches, no note.
      servers_.takeLog(http);
      const auto again = openDataset(spec, o);
      const QJsonArray opens = servers_.takeLog(http);
      QCOMPARE(opens.size(), 4);
      for (const auto& e : opens) QCOMPARE(e.toArray()[2].toString(), QString("bytes=0-0"));
      QVERIFY2(!notesOf(again, o).contains("downloaded"), qPrintable(notesOf(again, o)));
      QVERIFY(sameTensors(batchesOf(again, o), expected));
      // scan_cache=off: every open scans, and the note says what would spare it.
      const auto off = openDataset(spec + ",scan_cache=off", o);
      QCOMPARE(servers_.takeLog(http).size(), 4 + 4);  // the epoch above fetched a block per shard
      QVERIFY2(notesOf(off, o).contains("DALI indexes (`stoker dataset index`, then index=dali) or cache_dir spare the download"),
               qPrintable(notesOf(off, o)));
    }
    // A folder named in the spec.
    const QString named = tmp_.filePath("named-scans");
    const std::string http = "wds:" + servers_.httpUrl(pattern).toStdString();
    QVERIFY(sameTensors(batchesOf(openDataset(http + ",scan_cache=" + named.toStdString(), o), o), expected));
    QCOMPARE(keptScans(named), 4);
    // A user cache that cannot be made (under a regular file): the open goes on and says why.
    QVERIFY(writeFile(tmp_.filePath("not-a-folder"), "x"));
    {
      ScopedEnv blocked("STOKER_CACHE_DIR", tmp_.filePath("not-a-folder/cache").toUtf8());
      const auto unkept = openDataset(http, o);
      QVERIFY(sameTensors(batchesOf(unkept, o), expected));
      const QString note = notesOf(unkept, o);
      QVERIFY2(note.contains("The scans could not be kept for the next open (" + tmp_.filePath("not-a-folder/cache/wds-scans: ")) &&
                   note.contains("scan_cache=DIR names another folder"),
               qPrintable(note));
    }
    NAMED(expectBadInput([&] { openDataset(http + ",scan_cache=", o); }, {"scan_cache=: name a folder", "scan_cache=off"}));
    // Kept scans are opened many at once, not within the scans' bound (max_inflight_parts x
    // workers, here 1): with every request 200 ms, the 4 opens overlap at the server. So they do
    // under cache_dir for scans kept before the notes of the last scan were: the first open that
    // reads them notes them.
    LoaderOptions one = o;
    one.max_inflight_parts = 1;
    one.num_workers = 1;
    LoaderOptions cached = one;
    cached.cache_dir = tmp_.filePath("kept-scan-parts").toStdString();
    for (const LoaderOptions& k : {one, cached}) {
      openDataset(http, k);  // scans (or, the second time, reads the scans the first kept)
      if (!k.cache_dir.empty()) {
        for (const QString& last : QDir(QString::fromStdString(k.cache_dir)).entryList({"*.wds.last"}, QDir::Files))
          QVERIFY(QFile::remove(QString::fromStdString(k.cache_dir) + "/" + last));
        openDataset(http, k);  // one scan at a time, each noted again
      }
      QVERIFY(servers_.fault(true, "", 0, 200));
      servers_.takeLog(true);
      QElapsedTimer opening;
      opening.start();
      const auto again = openDataset(http, k);
      const qint64 ms = opening.elapsed();
      QVERIFY(servers_.fault(true, "", 0));
      int requests = 0, most = 0;
      for (const auto& e : servers_.takeLog(true)) ++requests, most = std::max(most, e.toArray()[5].toInt());
      qInfo("4 kept scans opened in %lld ms at 200 ms a request%s: %d requests, at most %d at once", ms,
            k.cache_dir.empty() ? "" : " (cache_dir)", requests, most);
      QVERIFY2(requests == 4 && most >= 3, qPrintable(QString("%1 requests, at most %2 at once").arg(requests).arg(most)));
      QVERIFY(sameTensors(batchesOf(again, k), batchesOf(openDataset("wds:" + (servers_.www() + "/" + pattern).toStdString(), k), k)));
    }
    // Where the user's cache is: STOKER_CACHE_DIR, else XDG_CACHE_HOME, else HOME's .cache.
    {
      ScopedEnv none("STOKER_CACHE_DIR", "");
      ScopedEnv xdg("XDG_CACHE_HOME", "/x/cache");
      QCOMPARE(QString::fromStdString(userCacheDir()), QString("/x/cache/stoker"));
      ScopedEnv noXdg("XDG_CACHE_HOME", "");
      ScopedEnv home("HOME", "/home/u");
      QCOMPARE(QString::fromStdString(userCacheDir()), QString("/home/u/.cache/stoker"));
      ScopedEnv noHome("HOME", "");
      QCOMPARE(QString::fromStdString(userCacheDir()), QString());
    }
  }

  // An open's progress counts only what it downloads. Shards whose scans were kept are opened,
  // not read: the open says how many (in shards, not their bytes, which a kept open of 1,000
  // shards showed as a download of GB/s), and an open that scans some of them counts only those.
  // An S3 image folder's open counts its class folders listed.
  void openProgressCountsWhatItReads() {
    const LoaderOptions o = keptScanOptions();
    const QString pattern = "shards/train-{000000..000003}.tar";
    const QString kept = tmp_.filePath("progress-scans");
    const std::string spec = "wds:" + servers_.httpUrl(pattern).toStdString() + ",scan_cache=" + kept.toStdString();
    auto openRecorded = [&](const std::string& what, ProgressRecorder& recorder) {
      OpenProgressScope scope({&recorder, nullptr});
      return openDataset(what, o);
    };
    auto describe = [](const ProgressUpdate& u) {
      return QString("%1 of %2 %3%4").arg(u.done).arg(u.total).arg(QString::fromStdString(u.unit.empty() ? "bytes" : u.unit),
                                                                   u.finished ? " (finished)" : "");
    };
    ProgressRecorder scans;
    const auto scanned = openRecorded(spec, scans);
    const auto* shards = dynamic_cast<const WebDataset*>(scanned.get());
    QVERIFY(shards && !scans.updates.empty());
    QVERIFY2(scans.updates.back().unit.empty() && scans.updates.back().done == shards->shardBytes(), qPrintable(describe(scans.updates.back())));
    // Every scan kept: the shards are counted, and no byte.
    ProgressRecorder opens;
    openRecorded(spec, opens);
    QVERIFY(opens.updates.size() >= 2);  // the first shard opened, then (throttled) the last update
    for (const ProgressUpdate& u : opens.updates)
      QVERIFY2(u.unit == "shards opened" && u.done <= 4 && u.total == 4 && u.done > 0, qPrintable(describe(u)));
    QVERIFY(opens.updates.back().finished && opens.updates.back().done == 4);
    // Two scans gone: the open reads those two shards, and counts their bytes alone.
    WdsKeptScans folder(kept.toStdString(), 0);
    std::uint64_t rescanned = 0;
    for (int s : {1, 2}) {
      const QString name = QString("train-%1.tar").arg(s, 6, 10, QChar('0'));
      const std::string url = servers_.httpUrl("shards/" + name).toStdString();
      QVERIFY(QFile::remove(QString::fromStdString(folder.pathOf(folder.lastScanOf(url)))));
      rescanned += static_cast<std::uint64_t>(QFileInfo(shards_ + "/" + name).size());
    }
    ProgressRecorder some;
    openRecorded(spec, some);
    QVERIFY(!some.updates.empty());
    const ProgressUpdate& last = some.updates.back();
    QVERIFY2(last.finished && last.unit.empty() && last.done == rescanned && last.total == rescanned,
             qPrintable(describe(last) + QString(", %1 bytes rescanned").arg(rescanned)));
    // Listing an S3 image folder: its class folders, counted as listed.
    ScopedEnv pages("STOKER_S3_LIST_MAX_KEYS", "4");
    ProgressRecorder listing;
    const auto folders = openRecorded("imagefolder:" + s3("photos/").toStdString(), listing);
    const auto classes = static_cast<std::uint64_t>(dynamic_cast<const ImageFolderDataset&>(*folders).classes().size());
    QVERIFY(classes >= 3 && listing.updates.size() >= 2);
    for (const ProgressUpdate& u : listing.updates)
      QVERIFY2(u.unit == "class folders listed" && u.done > 0 && u.done <= classes && u.total == classes, qPrintable(describe(u)));
    QVERIFY2(listing.updates.front().item.find("/photos/") != std::string::npos, listing.updates.front().item.c_str());
    QVERIFY(listing.updates.back().finished && listing.updates.back().done == classes);
    // The CLI's line (an open over a second: each request 0.6 s) counts them too.
    QVERIFY(servers_.fault(false, "", 0, 600));
    const auto cli = runStoker({"dataset", "info", "imagefolder:" + s3("photos/")});
    QVERIFY(servers_.fault(false, "", 0));
    QVERIFY2(cli.exitCode == 0 && cli.err.contains(QString("open 100.0%  %1 / %1 class folders listed").arg(classes).toUtf8()),
             cli.err.constData());
  }

  // An open's rate counts from its first piece read: pieces done without reading before it (kept
  // scans, opened first) took time that says nothing of the download's speed. Counted from the
  // open's start, a 0.6 s kept pass made the rate of 4 MiB read in 0.05 s thirteen times too slow.
  void openRateCountsFromTheFirstRead() {
    using Clock = std::chrono::steady_clock;
    ProgressRecorder recorder;
    OpenProgressMeter meter({&recorder, nullptr}, 6, "shards opened");
    for (int i = 0; i < 4; ++i) {
      OpenProgressMeter::Piece kept(meter, "kept");
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      kept.doneWithoutReading();
    }
    const auto readFrom = Clock::now();
    OpenProgressMeter::Piece read(meter, "read");
    read.sized(8 << 20);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    read.reached(4 << 20);
    meter.finish();
    const double seconds = std::chrono::duration<double>(Clock::now() - readFrom).count();
    QVERIFY(!recorder.updates.empty());
    const ProgressUpdate& last = recorder.updates.back();
    QVERIFY(last.finished && last.unit.empty() && last.done == (4u << 20));
    // The meter's reading began after readFrom, so its rate is at least the bytes over `seconds`.
    QVERIFY2(last.perSecond >= static_cast<double>(last.done) / seconds,
             qPrintable(QString("%1 B/s, against %2 bytes read in %3 s").arg(last.perSecond).arg(last.done).arg(seconds)));
    // A piece read in one step (its size known only when done) counts from the step before it.
    ProgressRecorder oneStep;
    OpenProgressMeter again({&oneStep, nullptr}, 2, "shards opened");
    Clock::time_point wholeFrom;
    {
      OpenProgressMeter::Piece kept(again, "kept");
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      wholeFrom = Clock::now();  // before the step the meter counts from
      kept.doneWithoutReading();
    }
    OpenProgressMeter::Piece whole(again, "whole");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    whole.done(1 << 20);
    again.finish();
    const double wholeSeconds = std::chrono::duration<double>(Clock::now() - wholeFrom).count();
    QVERIFY(!oneStep.updates.empty() && oneStep.updates.back().done == (1u << 20));
    // ...and not from its own step, which would make it instant: it took the 50 ms slept at least.
    QVERIFY2(oneStep.updates.back().perSecond >= static_cast<double>(1 << 20) / wholeSeconds &&
                 oneStep.updates.back().perSecond <= static_cast<double>(1 << 20) / 0.05,
             qPrintable(QString("%1 B/s over %2 s").arg(oneStep.updates.back().perSecond).arg(wholeSeconds)));
  }

  // The words every printer but the CLI's bar says an open's progress in (Python's stderr, the
  // workbench's status line, the Remote... dialog), from a real meter's updates in each form.
  void openProgressSaysItselfInWords() {
    QCOMPARE(describeOpenProgress(ProgressUpdate{}), std::string());  // nothing heard yet
    ProgressRecorder counted;
    OpenProgressMeter shards({&counted, nullptr}, 80, "shards opened");
    for (int i = 0; i < 12; ++i) OpenProgressMeter::Piece(shards, "kept").doneWithoutReading();
    QVERIFY(!counted.updates.empty());
    QCOMPARE(describeOpenProgress(counted.updates.back()), std::string("1 of 80 shards opened"));  // the first emits
    shards.finish();
    QCOMPARE(describeOpenProgress(counted.updates.back()), std::string("12 of 12 shards opened"));
    ProgressRecorder listed;
    OpenProgressMeter listing({&listed, nullptr}, -1, "objects listed");
    listing.tally(12000, "page");
    QCOMPARE(describeOpenProgress(listed.updates.back()), std::string("12000 objects listed"));
    listing.finish();
    QCOMPARE(describeOpenProgress(listed.updates.back()), std::string("12000 of 12000 objects listed"));
    ProgressRecorder read;
    OpenProgressMeter bytes({&read, nullptr}, 4, "shards opened");
    OpenProgressMeter::Piece shard(bytes, "shard");
    shard.sized(10 << 20);
    shard.reached(3 << 20);
    // One of four shards sized, at 10 MiB: the other three are taken to be as large.
    QCOMPARE(describeOpenProgress(read.updates.back()), std::string("3.0 MiB of about 40.0 MiB downloaded"));
  }

  // An open waiting for another process's scan of a shard (the node's ranks scan each shard once,
  // under a lock in the scans' folder) stops when cancelled: the holder may take minutes on a shard
  // of GBs, and Stop or Ctrl-C waited for it. Here the test holds that lock itself.
  void waitingForAnotherScanStopsWhenCancelled() {
    const QString dir = tmp_.filePath("scan-lock-wait");
    const std::string shard = servers_.httpUrl("shards/train-000000.tar").toStdString();
    const std::string spec = "wds:" + shard + ",scan_cache=" + dir.toStdString();
    LoaderOptions o = keptScanOptions();
    WdsKeptScans kept(dir.toStdString(), 0);
    QVERIFY(kept.makeFolder());
    {
      const FileLock another(kept.lastPathOf(shard) + ".lock");
      QVERIFY(another.held());
      CancelToken cancel;
      const auto started = std::chrono::steady_clock::now();
      std::thread canceller([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        cancel.cancel();
      });
      {
        OpenProgressScope scope({nullptr, &cancel});
        NAMED(expectError([&] { openDataset(spec, o); }, ErrorKind::Cancelled, {"train-000000.tar", "cancelled"}));
      }
      canceller.join();
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      QVERIFY2(waited < 2.0, qPrintable(QString("the open stopped %1 s in").arg(waited)));
    }
    QCOMPARE(openDataset(spec, o)->size(), openDataset("wds:" + (servers_.www() + "/shards/train-000000.tar").toStdString(), o)->size());
  }

  // The user's cache keeps scans under its limit: past it, the least recently used go (a scan read
  // counts as used), down to 90 %; so do temporary files of writers that died long ago.
  void keptScansStayUnderTheirLimit() {
    const QString dir = tmp_.filePath("kept-under-limit");
    WdsKeptScans kept(dir.toStdString(), 3000);
    QVERIFY(kept.makeFolder());
    const std::string text(1000, 'x');
    for (int i = 0; i < 4; ++i) {
      const std::string path = kept.pathOf("scan" + std::to_string(i));
      kept.keep(path, text);
      const timespec at[2] = {{1000 + i, 0}, {1000 + i, 0}};  // scan0 oldest
      QCOMPARE(::utimensat(AT_FDCWD, path.c_str(), at, 0), 0);
    }
    WdsKeptScans::touch(kept.pathOf("scan0"));  // read now: the most recent
    const QString stale = dir + "/.x.wds.idx.stoker-tmp-1-1";
    QVERIFY(writeFile(stale, "half"));
    const timespec old[2] = {{1000, 0}, {1000, 0}};
    QCOMPARE(::utimensat(AT_FDCWD, stale.toUtf8().constData(), old, 0), 0);
    kept.trim();  // 4000 bytes over 3000: down to 2700, the two least recently used go
    QCOMPARE(QDir(dir).entryList(QDir::Files | QDir::Hidden), QStringList({"scan0.wds.idx", "scan3.wds.idx"}));
    QCOMPARE(QString::fromStdString(kept.problem()), QString());
    WdsKeptScans unlimited(dir.toStdString(), 0);  // cache_dir, or a folder the user named: never trimmed
    unlimited.keep(unlimited.pathOf("scan9"), text + text + text + text);
    unlimited.trim();
    QCOMPARE(QDir(dir).entryList(QDir::Files).size(), 3);
  }

  // imagefolder: over an S3 prefix: classes from the common prefixes, files from every page of the
  // listing, in torchvision's order; the same samples as the local folder.
  void imageFolderOverS3() {
    ScopedEnv pages("STOKER_S3_LIST_MAX_KEYS", "4");
    LoaderOptions o;
    o.transforms = "Resize(40),CenterCrop(32),ToDtype(u8)";
    o.max_inflight_parts = 4;
    auto local = openDataset("imagefolder:" + tmp_.filePath("photos").toStdString(), o);
    auto remote = openDataset("imagefolder:" + s3("photos/").toStdString(), o);
    QCOMPARE(remote->size(), local->size());
    const auto* r = dynamic_cast<const ImageFolderDataset*>(remote.get());
    const auto* l = dynamic_cast<const ImageFolderDataset*>(local.get());
    QCOMPARE(r->classes(), l->classes());
    for (std::int64_t i = 0; i < local->size(); ++i)
      QCOMPARE(QString::fromStdString(r->path(i)).section("photos/", 1), QString::fromStdString(l->path(i)).section("photos/", 1));
    QVERIFY(sameTensors(readAll(*remote, allIndices(*remote)), readAll(*local, allIndices(*local))));
    NAMED(expectBadInput([&] { openDataset("imagefolder:" + s3("textonly").toStdString(), o); }, {"no image files in class folder a"}));
    NAMED(expectBadInput([&] { openDataset("imagefolder:" + s3("nothing/").toStdString(), o); }, {"no class folders"}));
    NAMED(expectBadInput([&] { openDataset("imagefolder:" + servers_.httpUrl("photos/").toStdString(), o); }, {"no listing"}));
    // The classes' listings run at once: with every page 200 ms, they overlap at the server, and
    // the open lists the same files.
    QVERIFY(servers_.fault(false, "", 0, 200));
    servers_.takeLog(false);
    QElapsedTimer listing;
    listing.start();
    auto atOnce = openDataset("imagefolder:" + s3("photos/").toStdString(), o);
    const qint64 listingMs = listing.elapsed();
    QVERIFY(servers_.fault(false, "", 0));
    int listings = 0, most = 0;
    for (const auto& e : servers_.takeLog(false))
      if (e.toArray()[1].toString().contains("list-type=2")) ++listings, most = std::max(most, e.toArray()[5].toInt());
    qInfo("opened in %lld ms: %d listing requests of 200 ms, at most %d at once", listingMs, listings, most);
    QVERIFY2(listings >= 4 && most >= 3, qPrintable(QString("%1 listing requests, at most %2 at once").arg(listings).arg(most)));
    const auto* a = dynamic_cast<const ImageFolderDataset*>(atOnce.get());
    QCOMPARE(a->size(), r->size());
    for (std::int64_t i = 0; i < a->size(); ++i) QCOMPARE(a->path(i), r->path(i));
    // A long listing (here a key a page, 250 ms a page) stops between its pages when the open is
    // cancelled, 0.6 s in: it makes fewer requests than the whole listing.
    ScopedEnv onePerPage("STOKER_S3_LIST_MAX_KEYS", "1");
    servers_.takeLog(false);
    QCOMPARE(openDataset("imagefolder:" + s3("photos/").toStdString(), o)->size(), local->size());
    const int wholeListing = servers_.takeLog(false).size();
    QVERIFY(servers_.fault(false, "", 0, 250));
    CancelToken stop;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      stop.cancel();
    });
    {
      OpenProgressScope scope({nullptr, &stop});
      // Stopped in a page's request or between pages: "(listing, page N)" or "(listing)".
      NAMED(expectError([&] { openDataset("imagefolder:" + s3("photos/").toStdString(), o); }, ErrorKind::Cancelled, {"photos/", "(listing"}));
    }
    canceller.join();
    QVERIFY(servers_.fault(false, "", 0));
    const int requests = servers_.takeLog(false).size();
    qInfo("listing a key a page: %d requests whole, %d when cancelled 0.6 s in", wholeListing, requests);
    QVERIFY2(requests >= 1 && requests * 3 <= wholeListing * 2,
             qPrintable(QString("%1 requests, %2 for the whole listing").arg(requests).arg(wholeListing)));
  }

  // With cache_dir, an S3 image folder's images are fetched once: a later open (a new epoch, a new
  // process, another rank of the node) lists the prefix and asks for no image. An image replaced
  // on the server after the listing is refused by name, never read under the old label.
  void imageFolderImagesAreCached() {
    LoaderOptions o;
    o.transforms = "Resize(40),CenterCrop(32),ToDtype(u8)";
    o.max_inflight_parts = 4;
    o.cache_dir = tmp_.filePath("image-cache").toStdString();
    auto local = openDataset("imagefolder:" + tmp_.filePath("photos").toStdString(), o);
    const auto want = readAll(*local, allIndices(*local));
    const std::string spec = "imagefolder:" + s3("photos/").toStdString();
    auto isListing = [](const QJsonValue& e) { return e.toArray()[1].toString().contains("list-type=2"); };
    servers_.takeLog(false);
    auto first = openDataset(spec, o);
    QVERIFY(sameTensors(readAll(*first, allIndices(*first)), want));
    int images = 0;
    for (const auto& e : servers_.takeLog(false)) images += !isListing(e);
    QCOMPARE(images, static_cast<int>(local->size()));  // one request each
    auto again = openDataset(spec, o);
    QVERIFY(sameTensors(readAll(*again, allIndices(*again)), want));
    images = 0;
    for (const auto& e : servers_.takeLog(false)) images += !isListing(e);
    QCOMPARE(images, 0);
    QCOMPARE(cacheFolder(tmp_.filePath("image-cache")).parts, static_cast<int>(local->size()));
    QCOMPARE(cacheFolder(tmp_.filePath("image-cache")).temps, 0);

    // Replaced after the listing: the uncached read names it; the cache keeps serving the listed version.
    LoaderOptions plain = o;
    plain.cache_dir.clear();
    auto listed = openDataset(spec, plain);
    const QString url = QString::fromStdString(dynamic_cast<const ImageFolderDataset*>(listed.get())->path(0));
    const QString key = url.section(RemoteServers::bucket() + "/", 1);
    const QString original = tmp_.filePath(key);
    QVERIFY(QFileInfo::exists(original));
    QVERIFY(writeFile(tmp_.filePath("replacement.jpg"), readFile(original) + QByteArray(100, '\0')));
    upload(tmp_.filePath("replacement.jpg"), key);
    NAMED(expectBadInput([&] { readAll(*listed, {0}); }, {key, "changed since the dataset was listed"}));
    QVERIFY(sameTensors(readAll(*again, {0}), readAll(*local, {0})));
    upload(original, key);
  }

  // `stoker ckpt inspect URL` reads the header only: one range request when it fits in 64 KiB,
  // two when it does not, and lists what the local file lists.
  void inspectReadsOnlyTheHeader() {
    // A small header over 4 MiB of data, and a header of 3000 tensors (~150 KiB).
    writeModel("small.safetensors", 4, 1 << 20);
    writeModel("wide.safetensors", 3000, 8);
    upload(servers_.www() + "/wide.safetensors", "ckpt/wide.safetensors");
    for (const auto& [name, requests] : {std::pair{QString("small.safetensors"), 1}, std::pair{QString("wide.safetensors"), 2}}) {
      servers_.takeLog(true);
      const auto remote = runStoker({"ckpt", "inspect", servers_.httpUrl(name)});
      QVERIFY2(remote.exitCode == 0, remote.err.constData());
      const QJsonArray log = servers_.takeLog(true);
      QCOMPARE(log.size(), requests);
      qint64 bytes = 0;
      for (const auto& e : log) bytes += e.toArray()[4].toInteger();
      QVERIFY2(bytes < 400000, qPrintable(QString::number(bytes)));
      const auto local = runStoker({"ckpt", "inspect", servers_.www() + "/" + name});
      QCOMPARE(remote.out.mid(remote.out.indexOf('\n')), local.out.mid(local.out.indexOf('\n')));
    }
    const CheckpointInfo info = inspectCheckpoint(s3("ckpt/wide.safetensors").toStdString());
    QCOMPARE(info.tensors.size(), std::size_t(3000));
    NAMED(expectBadInput([&] { inspectCheckpoint(servers_.httpUrl("blob.safetensors").toStdString()); }, {"HTTP 404"}));
  }

  // A remote torch.save zip (`model.pt`, HF's `pytorch_model.bin`) by URL: inspect reads its zip
  // directory, the local headers (fetched ahead, neighbours joined: not a request per tensor) and
  // data.pkl, never the tensors; convert and verify read it as the local file, views included.
  void remotePtFilesReadAlike() {
    const QString local = servers_.www() + "/model.pt";
    if (!test::pythonTorchAvailable()) QSKIP("python3-torch is not installed (the set-up installs it)");
    const auto made = test::runPythonArgs({"-c", R"(
import sys, torch
torch.manual_seed(0)
sd = {f"layer.{i}.weight": torch.randn(16, 8) for i in range(300)}
sd["big"] = torch.randn(512, 1024)
base = torch.randn(64, 32)
sd["view.t"] = base.t()
sd["view.row"] = base[3]
sd["half"] = torch.randn(100).half()
sd["epoch"] = 7
torch.save(sd, sys.argv[1])
)", local});
    QVERIFY2(made.exitCode == 0, made.err.constData());
    QVERIFY(QDir().mkpath(servers_.www() + "/hub"));
    QVERIFY(QFile::copy(local, servers_.www() + "/hub/pytorch_model.bin"));
    QVERIFY(QDir().mkpath(servers_.www() + "/ptdir"));
    QVERIFY(QFile::copy(local, servers_.www() + "/ptdir/model.pt"));
    upload(local, "ckpt/model.pt");
    const qint64 fileBytes = QFileInfo(local).size();

    servers_.takeLog(true);
    const auto remote = runStoker({"ckpt", "inspect", servers_.httpUrl("model.pt")});
    QVERIFY2(remote.exitCode == 0, remote.err.constData());
    const QJsonArray log = servers_.takeLog(true);
    qint64 bytes = 0;
    for (const auto& e : log) bytes += e.toArray()[4].toInteger();
    qInfo("inspect of a %lld-byte .pt with 305 tensors: %lld requests, %lld bytes", fileBytes, qint64(log.size()), bytes);
    QVERIFY2(log.size() <= 8, qPrintable(QString::number(log.size())));
    QVERIFY2(bytes < fileBytes / 2, qPrintable(QString::number(bytes)));
    const auto inspectedLocally = runStoker({"ckpt", "inspect", local});
    QCOMPARE(remote.out.mid(remote.out.indexOf('\n')), inspectedLocally.out.mid(inspectedLocally.out.indexOf('\n')));
    QVERIFY2(remote.out.contains("view.t") && remote.out.contains("epoch"), remote.out.constData());

    const QString expected = tmp_.filePath("pt-local");
    const auto base = runStoker({"ckpt", "convert", local, expected, "--to", "single"});
    QVERIFY2(base.exitCode == 0, base.err.constData());
    convertsAsTheLocalFile({servers_.httpUrl("model.pt"), servers_.httpUrl("hub/pytorch_model.bin"),
                            servers_.httpUrl("ptdir/"), s3("ckpt/model.pt")},
                           local, expected, "pt");
    if (QTest::currentTestFailed()) return;
    // A file that is neither: named, with what it was taken for.
    NAMED(expectBadInput([&] { inspectCheckpoint(servers_.httpUrl("blob.bin").toStdString()); },
                         {"blob.bin", "neither a torch.save zip (.pt) nor a safetensors file"}));
    // Cut short after its start: its directory is gone, so the zip is corrupt -- never a crash.
    QVERIFY(writeFile(servers_.www() + "/cut.pt", readFile(local).left(100000)));
    NAMED(expectBadInput([&] { inspectCheckpoint(servers_.httpUrl("cut.pt").toStdString()); }, {"cut.pt", "corrupt zip"}));
  }

  // A remote PyTorch DCP by its folder URL (or its .metadata): torch 1.13's file per item (a real
  // 2-process Gloo save) and torch 2.11's items back to back (committed fixtures). Inspect fetches
  // .metadata and each item's ends ahead -- not a request per item -- and lists what the local
  // folder lists; convert (to one file, and to DCP again, with the non-tensor items) and verify give
  // the local results.
  void remoteDcpCheckpointsReadAlike() {
    if (!test::pythonTorchAvailable()) QSKIP("python3-torch is not installed (the set-up installs it)");
    const QString fixtures = QStringLiteral(STOKER_SOURCE_DIR "/tests/ckpt/dcp_fixtures.py");
    const QString dcp13 = servers_.www() + "/dcp13";
    const auto made = test::runPythonArgs({fixtures, "sharded", dcp13});
    QVERIFY2(made.exitCode == 0, made.err.constData());
    QFile::remove(dcp13 + "/reference.pt");
    const QString dcp2 = servers_.www() + "/dcp2";
    QVERIFY(QDir().mkpath(dcp2));
    for (const QString& f : {".metadata", "__0_0.distcp"})
      QVERIFY(QFile::copy(QStringLiteral(STOKER_SOURCE_DIR "/tests/fixtures/torch2/dcp/") + f, dcp2 + "/" + f));
    for (const QString& f : QDir(dcp13).entryList(QDir::Files | QDir::Hidden)) upload(dcp13 + "/" + f, "dcp13/" + f);
    const QString dcpZstd = servers_.www() + "/dcpzstd";
    const auto zstd = test::runPythonArgs({fixtures, "torch2zstd", dcp13, dcpZstd});
    QVERIFY2(zstd.exitCode == 0, zstd.err.constData());

    servers_.takeLog(true);
    const auto inspected = runStoker({"ckpt", "inspect", servers_.httpUrl("dcp2/")});
    QVERIFY2(inspected.exitCode == 0, inspected.err.constData());
    const QJsonArray log = servers_.takeLog(true);
    const int items = static_cast<int>(inspected.out.count('\n'));
    qInfo("inspect of torch 2.11's DCP over HTTP: %lld requests (%d lines listed)", qint64(log.size()), items);
    QVERIFY2(log.size() <= 6, qPrintable(QString::number(log.size())));
    const auto local2 = runStoker({"ckpt", "inspect", dcp2});
    QCOMPARE(inspected.out.mid(inspected.out.indexOf('\n')), local2.out.mid(local2.out.indexOf('\n')));

    struct Case {
      QString source, local;
    };
    const QList<Case> cases{{servers_.httpUrl("dcp13/"), dcp13}, {s3("dcp13/"), dcp13},
                            {servers_.httpUrl("dcp2/.metadata"), dcp2}, {servers_.httpUrl("dcp2/"), dcp2},
                            {servers_.httpUrl("dcpzstd/"), dcpZstd}};
    for (int i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const auto remote = runStoker({"ckpt", "inspect", c.source});
      const auto local = runStoker({"ckpt", "inspect", c.local});
      QVERIFY2(remote.exitCode == 0, qPrintable(c.source + ": " + remote.err));
      QCOMPARE(remote.out.mid(remote.out.indexOf('\n')), local.out.mid(local.out.indexOf('\n')));
      for (const QString& to : {QString("single"), QString("dcp:2")}) {
        const QString expected = tmp_.filePath(QString("dcp-local-%1-%2").arg(i).arg(to.left(3)));
        const QString out = tmp_.filePath(QString("dcp-remote-%1-%2").arg(i).arg(to.left(3)));
        if (!QFileInfo::exists(expected)) QVERIFY(runStoker({"ckpt", "convert", c.local, expected, "--to", to}).exitCode == 0);
        const auto convert = runStoker({"ckpt", "convert", c.source, out, "--to", to});
        QVERIFY2(convert.exitCode == 0, qPrintable(c.source + " --to " + to + ": " + convert.err));
        const QStringList files = QDir(expected).entryList(QDir::Files | QDir::Hidden);
        QCOMPARE(QDir(out).entryList(QDir::Files | QDir::Hidden), files);
        for (const QString& f : files)
          if (!f.startsWith(".stoker")) QVERIFY2(readFile(out + "/" + f) == readFile(expected + "/" + f), qPrintable(to + ": " + f));
      }
      const auto verify = runStoker({"ckpt", "verify", c.source, c.local});
      QVERIFY2(verify.exitCode == 0, qPrintable(c.source + ": " + verify.out + verify.err));
    }

    // zstd items (torch >= 2.6's extension) read alike too; a data file the server does not have is named.
    const QString gone = servers_.www() + "/dcpgone";
    QVERIFY(QDir().mkpath(gone));
    for (const QString& f : QDir(dcp13).entryList(QDir::Files | QDir::Hidden))
      if (f != "__1_0.distcp") QVERIFY(QFile::copy(dcp13 + "/" + f, gone + "/" + f));
    NAMED(expectBadInput([&] { inspectCheckpoint(servers_.httpUrl("dcpgone/").toStdString()); }, {"__1_0.distcp", "is missing"}));
  }

  // A remote checkpoint is converted and verified by range reads of its tensors -- one file, an HF
  // index with its shards, or a folder URL -- and gives what the local files give. Inspecting an
  // index reads the index and each shard's header, never the tensors.
  void remoteCheckpointsConvertAndVerify() {
    writeModel("small.safetensors", 4, 1 << 20);
    const QString local = servers_.www() + "/small.safetensors";
    const auto sharded = runStoker({"ckpt", "convert", local, servers_.www() + "/hf", "--to", "hf:1500KB"});
    QVERIFY2(sharded.exitCode == 0, sharded.err.constData());
    QStringList shardNames = QDir(servers_.www() + "/hf").entryList({"*.safetensors"}, QDir::Files);
    QVERIFY2(shardNames.size() >= 3, qPrintable(shardNames.join(' ')));
    for (const QString& f : QDir(servers_.www() + "/hf").entryList(QDir::Files)) upload(servers_.www() + "/hf/" + f, "hf/" + f);
    upload(local, "ckpt/small.safetensors");

    // The index and each shard's header: one request each, a few KiB in all.
    servers_.takeLog(true);
    const auto inspected = runStoker({"ckpt", "inspect", servers_.httpUrl("hf/model.safetensors.index.json")});
    QVERIFY2(inspected.exitCode == 0, inspected.err.constData());
    QVERIFY2(inspected.out.contains("hf") && inspected.out.contains("layer.3.weight"), inspected.out.constData());
    const QJsonArray log = servers_.takeLog(true);
    QCOMPARE(log.size(), 1 + shardNames.size());
    qint64 bytes = 0;
    for (const auto& e : log) bytes += e.toArray()[4].toInteger();
    QVERIFY2(bytes < 300000, qPrintable(QString::number(bytes)));

    // Every way of naming it converts to the same single file as the local one, and verifies.
    const QString expected = tmp_.filePath("ckpt-local");
    const auto base = runStoker({"ckpt", "convert", local, expected, "--to", "single"});
    QVERIFY2(base.exitCode == 0, base.err.constData());
    convertsAsTheLocalFile({servers_.httpUrl("small.safetensors"), servers_.httpUrl("hf/model.safetensors.index.json"),
                            servers_.httpUrl("hf/"), s3("hf/"), s3("ckpt/small.safetensors")},
                           local, expected, "ckpt");
    if (QTest::currentTestFailed()) return;
    // Resharded from S3 straight into another layout, and resumed as a finished conversion.
    const QString ranks = tmp_.filePath("ckpt-ranks");
    for (int pass = 0; pass < 2; ++pass) {
      const auto convert = runStoker(pass == 0 ? QStringList{"ckpt", "convert", s3("hf/"), ranks, "--to", "ranks:2"}
                                               : QStringList{"ckpt", "convert", s3("hf/"), ranks, "--to", "ranks:2", "--resume"});
      QVERIFY2(convert.exitCode == 0, convert.err.constData());
    }
    QVERIFY(runStoker({"ckpt", "verify", ranks, local}).exitCode == 0);
    // A presigned URL expires: --resume with a newly signed one (the same object, its ETag) is the
    // same conversion.
    const QString signedRanks = tmp_.filePath("ckpt-signed");
    for (int pass = 0; pass < 2; ++pass) {
      const QString url = servers_.httpUrl("small.safetensors") + "?X-Amz-Expires=3600&X-Amz-Signature=sig" + QString::number(pass);
      QStringList args{"ckpt", "convert", url, signedRanks, "--to", "ranks:2"};
      if (pass == 1) args << "--resume";
      const auto convert = runStoker(args);
      QVERIFY2(convert.exitCode == 0, convert.err.constData());
    }
    // The ranks layout read back from a folder URL (its metadata.json and each rank's header): the
    // same listing, the same single file, verified.
    QVERIFY(QDir().mkpath(servers_.www() + "/ranks"));
    for (const QString& f : QDir(ranks).entryList(QDir::Files)) {
      QVERIFY(QFile::copy(ranks + "/" + f, servers_.www() + "/ranks/" + f));
      upload(ranks + "/" + f, "ranks/" + f);
    }
    const QStringList rankSources{servers_.httpUrl("ranks/"), s3("ranks/metadata.json")};
    for (const QString& source : rankSources) {
      const auto remote = runStoker({"ckpt", "inspect", source});
      const auto localRanks = runStoker({"ckpt", "inspect", ranks});
      QVERIFY2(remote.exitCode == 0, qPrintable(source + ": " + remote.err));
      QCOMPARE(remote.out.mid(remote.out.indexOf('\n')), localRanks.out.mid(localRanks.out.indexOf('\n')));
    }
    convertsAsTheLocalFile(rankSources, local, expected, "ranks");
    if (QTest::currentTestFailed()) return;
    QVERIFY(QFile::remove(servers_.www() + "/ranks/rank_1.safetensors"));
    const auto lost = runStoker({"ckpt", "inspect", servers_.httpUrl("ranks/")});
    QVERIFY2(lost.out.contains("rank_1.safetensors is missing"), lost.out.constData());
    // A bucket the caller may not list answers 403 for a missing key: the folder's probes go on
    // past them (the ranks and DCP files here), and a 403 for every probe is the error.
    QVERIFY(servers_.fault(true, "status:403", 2));
    const auto pastForbidden = runStoker({"ckpt", "inspect", servers_.httpUrl("hf/")});
    QVERIFY2(pastForbidden.exitCode == 0 && pastForbidden.out.contains("layer.3.weight"), pastForbidden.err.constData());
    QVERIFY(servers_.fault(true, "status:403", 100));
    const auto allForbidden = runStoker({"ckpt", "inspect", servers_.httpUrl("hf/")});
    QVERIFY(servers_.fault(true, "", 0));
    QVERIFY2(allForbidden.exitCode != 0 && allForbidden.err.contains("HTTP 403") && allForbidden.err.contains("metadata.json"),
             allForbidden.err.constData());
    // Two remote sources against each other.
    const auto both = runStoker({"ckpt", "verify", servers_.httpUrl("hf/"), s3("ckpt/small.safetensors")});
    QVERIFY2(both.exitCode == 0, both.err.constData());

    // A shard the server does not have is a problem of the index: shown, and refused by convert.
    QByteArray index = readFile(servers_.www() + "/hf/model.safetensors.index.json");
    index.replace(shardNames.last().toUtf8(), "model-gone.safetensors");
    QVERIFY(QDir().mkpath(servers_.www() + "/broken"));
    QVERIFY(writeFile(servers_.www() + "/broken/model.safetensors.index.json", index));
    for (const QString& f : shardNames) QVERIFY(QFile::copy(servers_.www() + "/hf/" + f, servers_.www() + "/broken/" + f));
    const auto broken = runStoker({"ckpt", "inspect", servers_.httpUrl("broken/")});
    QVERIFY2(broken.out.contains("model-gone.safetensors is named by the index but missing"), broken.out.constData());
    const auto refused = runStoker({"ckpt", "convert", servers_.httpUrl("broken/"), tmp_.filePath("ckpt-broken"), "--to", "single"});
    QVERIFY2(refused.exitCode != 0 && refused.err.contains("named by the index but missing"), refused.err.constData());
    // A folder URL with neither file, and a file that is no index.
    NAMED(expectBadInput([&] { inspectCheckpoint(servers_.httpUrl("tokens/").toStdString()); },
                         {"none of metadata.json (ranks), .metadata (DCP), model.safetensors.index.json"}));
    NAMED(expectBadInput([&] { inspectCheckpoint(servers_.httpUrl("broken/model.safetensors.index.json").toStdString() + "x"); },
                         {"HTTP 404"}));

    // Replaced on the server between inspect and convert: refused, nothing of two versions written.
    QVERIFY(QFile::copy(local, servers_.www() + "/moving.safetensors"));
    const CheckpointInfo info = inspectCheckpoint(servers_.httpUrl("moving.safetensors").toStdString());
    QByteArray changed = readFile(local);
    changed.append(QByteArray(4096, '\0'));  // another size: another ETag, whatever the clock
    QVERIFY(writeFile(servers_.www() + "/moving.safetensors", changed));
    const ReshardPlan plan = planReshard(info, parseTargetSpec("single", "keep"));
    NAMED(expectBadInput([&] { convertCheckpoint(info, plan, tmp_.filePath("ckpt-moving").toStdString(), {}); },
                         {"moving.safetensors", "changed since it was opened"}));
    QVERIFY(!QFileInfo::exists(tmp_.filePath("ckpt-moving") + "/model.safetensors"));
  }

  // The readahead a remote conversion reads through: every read gives the object's bytes, in
  // order or not; each block is fetched once while it stays held; blocks ahead are fetched
  // concurrently (counted at the proxy); no more blocks are held than allowed; a block the reader
  // has elsewhere is not fetched; a fetch that failed reaches the reader that needed the block.
  void readaheadServesEveryRead() {
    auto object = RemoteObject::open(servers_.httpUrl("blob.bin").toStdString());
    ReadaheadOptions o;
    o.blockBytes = 64 << 10;  // 16 blocks
    o.ahead = 6;
    o.maxBlocks = 8;
    o.threads = 3;
    {
      RemoteReadahead readahead(o);
      QVERIFY(servers_.fault(true, "", 0, 20));  // every request waits 20 ms: fetches overlap
      servers_.takeLog(true);
      QByteArray got(blob_.size(), '\0');
      for (qsizetype at = 0; at < got.size(); at += 10000)
        readahead.read(object, got.data() + at, static_cast<std::uint64_t>(std::min<qsizetype>(10000, got.size() - at)),
                       static_cast<std::uint64_t>(at));
      QVERIFY(got == blob_);
      QCOMPARE(readahead.counters().fetched, std::uint64_t(16));  // in order: each block once
      QVERIFY(servers_.fault(true, "", 0));
      int most = 0;
      for (const auto& e : servers_.takeLog(true)) most = std::max(most, e.toArray()[5].toInt());
      QVERIFY2(most >= 2, qPrintable(QString::number(most)));
      QVERIFY2(readahead.counters().waited < 16, qPrintable(QString::number(readahead.counters().waited)));
      // Out of order, across block edges: the bytes, with at most maxBlocks held (+1 being copied).
      std::mt19937 rng(5);
      for (int i = 0; i < 300; ++i) {
        const auto at = static_cast<std::uint64_t>(rng() % static_cast<unsigned>(blob_.size()));
        const auto n = std::min<std::uint64_t>(1 + rng() % 200000, static_cast<std::uint64_t>(blob_.size()) - at);
        QByteArray part(static_cast<qsizetype>(n), '\0');
        readahead.read(object, part.data(), n, at);
        QVERIFY(part == blob_.mid(static_cast<qsizetype>(at), static_cast<qsizetype>(n)));
        QVERIFY(readahead.counters().held <= std::uint64_t(o.maxBlocks + 1));
      }
    }
    // Blocks adopted for reads that never come (an epoch other than the one foreseen) give way,
    // the last adopted first: with every slot adopted, reads elsewhere still take and prefetch
    // blocks within maxBlocks (9 held, the adopted 8 and the block read, before they gave way).
    {
      RemoteReadahead readahead(o);
      const std::uint64_t block = o.blockBytes;
      for (std::uint64_t b = 8; b < 16; ++b) {
        const auto* from = reinterpret_cast<const std::uint8_t*>(blob_.constData()) + b * block;
        ByteVector bytes(from, from + std::min<std::uint64_t>(block, static_cast<std::uint64_t>(blob_.size()) - b * block));
        QVERIFY(readahead.adopt(object, b, bytes));
      }
      ByteVector again(10);
      QVERIFY(!readahead.adopt(object, 8, again));  // held already
      QCOMPARE(readahead.counters().adopted, std::uint64_t(8));
      QByteArray got(static_cast<qsizetype>(4 * block), '\0');
      readahead.read(object, got.data(), 4 * block, 0);
      QVERIFY(got == blob_.left(got.size()));
      QVERIFY2(readahead.counters().held <= std::uint64_t(o.maxBlocks), qPrintable(QString::number(readahead.counters().held)));
      QByteArray tail(1000, '\0');
      readahead.read(object, tail.data(), 1000, 8 * block + 5);  // adopted, or fetched again if it gave way
      QVERIFY(tail == blob_.mid(static_cast<qsizetype>(8 * block + 5), 1000));
    }
    // A block not held whose bytes the reader has elsewhere (a WebDataset's samples kept from a
    // dropped block): the read is served from there without a request. Where the caller has
    // nothing, the block is fetched as before; once held, the caller is not asked.
    {
      RemoteReadahead readahead(o);
      servers_.takeLog(true);
      int asked = 0;
      QByteArray got(100, '\0');
      readahead.read(object, got.data(), 100, 5, [&] {
        ++asked;
        got.fill('k');
        return true;
      });
      QCOMPARE(asked, 1);
      QCOMPARE(got, QByteArray(100, 'k'));
      QCOMPARE(readahead.counters().fetched, std::uint64_t(0));
      QVERIFY(servers_.takeLog(true).isEmpty());
      readahead.read(object, got.data(), 100, 5, [&] { return ++asked, false; });
      QCOMPARE(asked, 2);
      QVERIFY(got == blob_.mid(5, 100));
      readahead.read(object, got.data(), 100, 105, [&] { return ++asked, false; });
      QCOMPARE(asked, 2);
      QVERIFY(got == blob_.mid(105, 100));
    }
    // A server that keeps failing: the reader gets the named error after the retry budget.
    RemoteReadahead failing(o);
    QByteArray past(10, '\0');
    NAMED(expectBadInput([&] { failing.read(object, past.data(), 10, static_cast<std::uint64_t>(blob_.size()) - 5); }, {"past its end"}));
    QVERIFY(servers_.fault(true, "status:503", 100));
    QByteArray got(1000, '\0');
    NAMED(expectError([&] { failing.read(object, got.data(), 1000, 300000); }, ErrorKind::Network,
                      {servers_.httpUrl("blob.bin"), "HTTP 503", "after 4 attempts"}));
    // A server error that a retry does not mend (507, 501, a proxy's 52x) is the server's, not the
    // sample's: a Network error at once, which skip_bad_samples does not skip (it was bad input).
    QVERIFY(servers_.fault(true, "status:507", 100));
    const std::uint64_t retriesBefore = netCounters().retries;
    NAMED(expectError([&] { failing.read(object, got.data(), 1000, 300000); }, ErrorKind::Network,
                      {servers_.httpUrl("blob.bin"), "HTTP 507"}));
    QCOMPARE(netCounters().retries, retriesBefore);  // not retried
    QVERIFY(servers_.fault(true, "", 0));
    failing.read(object, got.data(), 1000, 300000);  // asked again once the server is back
    QVERIFY(got == blob_.mid(300000, 1000));
  }

  // Every request Stoker signs holds under S3's own rules, checked by the proxy in front of s3rver
  // (sigv4_check.py, botocore's signer): keys with spaces, '+', '=', ',', '%', '~', parentheses and
  // UTF-8, listed under a prefix that needs encoding, across pages (continuation tokens), and read
  // by range. A request the proxy refused would be a 403 here.
  void signaturesHoldForAwkwardKeys() {
    const QStringList names{"a b+c=d.bin", "100%,(1)~.bin", QString::fromUtf8("caf\xc3\xa9 \xe2\x82\xac.bin"), "x&y;z@!$'*.bin"};
    for (int i = 0; i < names.size(); ++i) {
      QVERIFY(writeFile(tmp_.filePath("awkward.bin"), blob_.mid(i * 1000, 20000)));
      upload(tmp_.filePath("awkward.bin"), "odd keys/" + names[i]);
    }
    ScopedEnv pages("STOKER_S3_LIST_MAX_KEYS", "1");
    servers_.takeLog(false);
    const auto listed = listS3(s3("odd keys/").toStdString(), false);
    QCOMPARE(listed.size(), std::size_t(names.size()));
    for (const auto& o : listed) {
      const QString name = QString::fromStdString(o.url).section('/', -1);
      const int i = static_cast<int>(names.indexOf(name));
      QVERIFY2(i >= 0, o.url.c_str());
      auto object = RemoteObject::open(o.url);
      QByteArray got(12000, '\0');
      object->read(1000, got.data(), 12000, PartOptions{4096, 3});  // three parts
      QVERIFY2(got == blob_.mid(i * 1000 + 1000, 12000), o.url.c_str());
    }
    int refused = 0, requests = 0;
    for (const auto& e : servers_.takeLog(false)) ++requests, refused += e.toArray()[3].toInt() == 403;
    QCOMPARE(refused, 0);
    QVERIFY2(requests >= names.size() * (1 + 1 + 3), qPrintable(QString::number(requests)));  // a page, an open, three parts each
  }

  // Transient failures are retried -- resuming a broken body at the byte where it broke -- and
  // the data is what the file holds.
  void transientFaultsAreRetried() {
    for (const bool http : {true, false}) {
      const std::string url = (http ? servers_.httpUrl("blob.bin") : s3("blob.bin")).toStdString();
      auto o = RemoteObject::open(url);
      for (const QString& mode : {"status:503", "status:429", "status:500", "drop", "stall", "trickle"}) {
        ScopedEnv stall("STOKER_HTTP_STALL_S", "1");
        QVERIFY(servers_.fault(http, mode, 2));
        servers_.takeLog(http);
        const std::uint64_t retries = netCounters().retries;
        QByteArray got(200000, '\0');
        o->read(1000, got.data(), static_cast<std::size_t>(got.size()), PartOptions{1 << 20, 1});
        QVERIFY2(got == blob_.mid(1000, 200000), qPrintable(mode));
        QCOMPARE(netCounters().retries - retries, std::uint64_t(2));
        const QJsonArray log = servers_.takeLog(http);
        QCOMPARE(log.size(), 3);
        if (mode == "drop" || mode == "stall")  // the retry asks only for what did not arrive
          QCOMPARE(log[1].toArray()[2].toString(), QString("bytes=%1-200999").arg(1000 + 100000));
      }
    }
    QVERIFY(servers_.fault(true, "", 0));
  }

  // A request in flight when the open it serves is stopped (the workbench's Cancel, Ctrl-C in
  // Python: util/open_progress) ends within curl's progress tick, also on threads runJobs made:
  // before, a server that stopped answering held it for every retry's stall timeout.
  void aStoppedOpenEndsItsRequestInFlight() {
    ScopedEnv stall("STOKER_HTTP_STALL_S", "30");
    auto o = RemoteObject::open(servers_.httpUrl("blob.bin").toStdString());
    QVERIFY(servers_.fault(true, "stall", 100));
    for (const bool onAJobThread : {false, true}) {
      CancelToken cancel;
      OpenProgressScope scope({nullptr, &cancel});
      std::thread stopper([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        cancel.cancel();
      });
      const auto started = std::chrono::steady_clock::now();
      QByteArray got(200000, '\0');
      auto read = [&] { o->read(1000, got.data(), static_cast<std::size_t>(got.size()), PartOptions{1 << 20, 1}); };
      ErrorKind kind{};
      std::string what = "no error";
      auto readNoting = [&] {
        try {
          read();
        } catch (const Error& e) {
          kind = e.kind();
          what = e.what();
        }
      };
      if (onAJobThread) {
        const std::thread::id caller = std::this_thread::get_id();
        runJobs(2, [&] {
          if (std::this_thread::get_id() != caller) readNoting();  // on the thread runJobs made
        });
      } else {
        readNoting();
      }
      stopper.join();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      QVERIFY2(kind == ErrorKind::Cancelled, what.c_str());
      QVERIFY2(seconds < 3.0, qPrintable(QString("stopped after %1 s").arg(seconds)));
    }
    QVERIFY(servers_.fault(true, "", 0));
  }

  // After the retry budget, the error names the URL, the HTTP status and the attempts.
  void theRetryBudgetEndsInANamedError() {
    auto o = RemoteObject::open(servers_.httpUrl("blob.bin").toStdString());
    QVERIFY(servers_.fault(true, "status:503", 100));
    QByteArray got(1000, '\0');
    NAMED(expectError([&] { o->read(0, got.data(), 1000, {}); }, ErrorKind::Network,
                        {servers_.httpUrl("blob.bin"), "HTTP 503", "SlowDown", "after 4 attempts"}));
    QVERIFY(servers_.fault(true, "", 0));
    // A batch of remote token windows, fetched by the worker's kept helpers: the first window
    // that fails names its sample and the server's reply.
    {
      LoaderOptions o;
      o.max_inflight_parts = 4;
      const auto tokens = openDataset("tokens:" + servers_.httpUrl("tokens/tokens.bin").toStdString() + ",ctx=32", o);
      QVERIFY(servers_.fault(true, "status:503", 1000));
      NAMED(expectError([&] { readAll(*tokens, {5, 6, 7, 8, 9, 10, 11, 12}); }, ErrorKind::Network, {"sample 5", "HTTP 503"}));
      QVERIFY(servers_.fault(true, "", 0));
      QCOMPARE(readAll(*tokens, {5, 6, 7, 8}).at(0).size(0), 4);  // the helpers are still there
    }
    // Nobody listening: the same, with curl's reason.
    NAMED(expectError([&] { RemoteObject::open("http://127.0.0.1:" + std::to_string(freePort()) + "/x.bin"); }, ErrorKind::Network,
                        {"Couldn't connect", "after 4 attempts"}));
    // An S3 endpoint (AWS_ENDPOINT_URL) that nobody serves: the object's s3:// name and curl's reason.
    {
      const QByteArray down = "http://127.0.0.1:" + QByteArray::number(freePort());
      const QByteArray was = qgetenv("AWS_ENDPOINT_URL");
      qputenv("AWS_ENDPOINT_URL", down);
      const QString problem = expectError([&] { RemoteObject::open(s3("tokens/tokens.bin").toStdString()); }, ErrorKind::Network,
                                          {s3("tokens/tokens.bin"), "Couldn't connect", "after 4 attempts"});
      qputenv("AWS_ENDPOINT_URL", was);
      NAMED(problem);
    }
  }

  // Credentials that expire during a run (an STS session token lasts 1-12 hours) are read again
  // once; still expired, the error is a Network one, which skip_bad_samples does not skip (every
  // later sample would have been skipped). A host name that does not resolve is retried, then a
  // Network error too: before, it was bad input at the first DNS hiccup.
  void expiredCredentialsAndUnresolvedHosts() {
    auto o = RemoteObject::open(s3("blob.bin").toStdString());
    QByteArray got(1000, '\0');
    QVERIFY(servers_.fault(false, "status:400:ExpiredToken", 1));
    o->read(5000, got.data(), 1000, {});
    QVERIFY(got == blob_.mid(5000, 1000));
    QVERIFY(servers_.fault(false, "status:400:ExpiredToken", 100));
    NAMED(expectError([&] { o->read(5000, got.data(), 1000, {}); }, ErrorKind::Network,
                      {"ExpiredToken", "the credentials expired", "renew AWS_SESSION_TOKEN"}));
    // None found when they are read again: the error says so (unsigned, a private bucket would
    // answer 403, which was bad input that skip_bad_samples skipped).
    {
      ScopedEnv id("AWS_ACCESS_KEY_ID", ""), secret("AWS_SECRET_ACCESS_KEY", ""), token("AWS_SESSION_TOKEN", "");
      ScopedEnv files("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"), config("AWS_CONFIG_FILE", "/nonexistent");
      ScopedEnv profile("AWS_PROFILE", "");
      QVERIFY(servers_.fault(false, "status:400:ExpiredToken", 1));
      NAMED(expectError([&] { o->read(5000, got.data(), 1000, {}); }, ErrorKind::Network, {"none are found now"}));
    }
    QVERIFY(servers_.fault(false, "", 0));
    ScopedEnv attempts("STOKER_HTTP_ATTEMPTS", "2");
    NAMED(expectError([&] { RemoteObject::open("http://nosuch.invalid/x.bin"); }, ErrorKind::Network,
                      {"resolve", "after 2 attempts"}));
  }

  // Replies that would be wrong data are refused at once: a server that ignores Range, a
  // Content-Length that disagrees with Content-Range, an object changed since it was opened.
  void wrongRepliesAreNeverData() {
    auto o = RemoteObject::open(servers_.httpUrl("blob.bin").toStdString());
    QByteArray got(5000, '\0');
    QVERIFY(servers_.fault(true, "ignore_range", 1));
    NAMED(expectBadInput([&] { o->read(4096, got.data(), 5000); }, {"ignored the Range request"}));
    QVERIFY(servers_.fault(true, "short", 1));
    NAMED(expectBadInput([&] { o->read(4096, got.data(), 5000); }, {"Content-Length 2500 disagrees"}));
    // A retry's reply is checked as the first one is: after a body cut at its half, a 200 with the
    // whole object was taken, and its first bytes spliced in after the 2,500 already read.
    QVERIFY(servers_.fault(true, "drop|ignore_range", 2));
    NAMED(expectBadInput([&] { o->read(4096, got.data(), 5000); }, {"ignored the Range request"}));
    // A 200 whose body ends before what was asked (a server ignoring Range, its body cut) is resumed
    // from where it ended, not taken as done: a cache part committed short served its unwritten
    // tail as data, for good (the file is reserved at its full size).
    const QByteArray small = randomBytes(10000, 5);
    QVERIFY(writeFile(servers_.www() + "/small.bin", small));
    const QString cacheDir = tmp_.filePath("short-200");
    PartOptions parts{8192, 1, PartCache::at(cacheDir.toStdString(), 0)};
    auto shortened = RemoteObject::open(servers_.httpUrl("small.bin").toStdString());
    QVERIFY(servers_.fault(true, "ignore_range+short", 1));  // part 0: a 200 of 5,000 bytes
    QByteArray whole(small.size(), '\0');
    shortened->read(0, whole.data(), static_cast<std::size_t>(whole.size()), parts);
    QVERIFY(servers_.fault(true, "", 0));
    QVERIFY(whole == small);
    whole.fill('\0');
    RemoteObject::open(servers_.httpUrl("small.bin").toStdString())->read(0, whole.data(), static_cast<std::size_t>(whole.size()), parts);
    QVERIFY2(whole == small, "the cache folder kept a part short");
    // An empty object's zero bytes cost no request (through the cache, the last part's index
    // wrapped below the first's and the read ran over 2^41 parts).
    QVERIFY(writeFile(servers_.www() + "/empty.bin", QByteArray()));
    auto empty = RemoteObject::open(servers_.httpUrl("empty.bin").toStdString());
    QCOMPARE(empty->size(), std::uint64_t(0));
    servers_.takeLog(true);
    empty->read(0, whole.data(), 0, parts);
    QCOMPARE(servers_.takeLog(true).size(), 0);
    // An open whose reply does not say the object's size: refused, unless its body ended before
    // what was asked (then the object ends there). Before, the size was taken as 0: an empty shard.
    const std::string smallUrl = servers_.httpUrl("small.bin").toStdString();
    QVERIFY(servers_.fault(true, "ignore_range+no_length", 1));
    NAMED(expectBadInput([&] { RemoteObject::open(smallUrl, 4096); }, {"sent the whole object without its size"}));
    QVERIFY(servers_.fault(true, "unknown_total", 1));
    NAMED(expectBadInput([&] { RemoteObject::open(smallUrl, 4096); }, {"does not say the object's size", "/*"}));
    for (const char* mode : {"ignore_range+no_length", "unknown_total"}) {
      QVERIFY(servers_.fault(true, mode, 1));
      QCOMPARE(RemoteObject::open(smallUrl, 1 << 20)->size(), std::uint64_t(small.size()));
    }
    // The whole object came and then the reply broke (its length said one byte more): the retry
    // from its end is a 416, which says the size. Before, a 416 meant "an empty object".
    QVERIFY(servers_.fault(true, "ignore_range+overlong", 1));
    QCOMPARE(RemoteObject::open(smallUrl, 1 << 20)->size(), std::uint64_t(small.size()));
    // Every attempt's ETag is compared, not the last one's only: a replica with another version
    // that broke off, then the right one resumed, made one read of two versions.
    QVERIFY(servers_.fault(true, "drop+etag:\"another\"|", 2));
    NAMED(expectBadInput([&] { RemoteObject::open(smallUrl, 1 << 20); }, {"changed while it was read", "\"another\""}));
    auto pinned = RemoteObject::open(servers_.httpUrl("blob.bin").toStdString());
    QVERIFY(servers_.fault(true, "drop+etag:\"another\"|", 2));
    NAMED(expectBadInput([&] { pinned->read(4096, got.data(), 5000); }, {"changed while it was read"}));
    QVERIFY(servers_.fault(true, "", 0));
    QVERIFY(writeFile(servers_.www() + "/changing.bin", randomBytes(10000, 3)));
    auto changing = RemoteObject::open(servers_.httpUrl("changing.bin").toStdString());
    QTest::qWait(1100);  // nginx's ETag holds the modification time in seconds
    QVERIFY(writeFile(servers_.www() + "/changing.bin", randomBytes(10001, 4)));
    NAMED(expectBadInput([&] { changing->read(10, got.data(), 100); }, {"changed since it was opened"}));
  }

  // A signed S3 request follows no redirect: at another host curl would drop its signature but
  // send the session token (a header of ours) to whoever the Location names. Before, the request
  // went on to the other server, which served the object. Unsigned HTTP follows one, as any client.
  void signedRequestsFollowNoRedirect() {
    servers_.takeLog(true);
    QVERIFY(servers_.fault(false, "redirect:" + servers_.httpUrl("blob.bin"), 1));
    NAMED(expectBadInput([&] { RemoteObject::open(s3("blob.bin").toStdString()); },
                         {"HTTP 307", "signed requests follow no redirect", "AWS_REGION"}));
    QVERIFY(servers_.fault(false, "", 0));
    QCOMPARE(servers_.takeLog(true).size(), 0);  // nothing reached the other server
    QVERIFY(servers_.fault(true, "redirect:" + servers_.httpUrl("blob.bin"), 1));
    auto moved = RemoteObject::open(servers_.httpUrl("moved.bin").toStdString());
    QVERIFY(servers_.fault(true, "", 0));
    QCOMPARE(moved->size(), static_cast<std::uint64_t>(blob_.size()));
  }

  // 403 names the key id (never the secret), 404 says which of bucket or key, TLS must verify.
  void badAccessIsNamed() {
    // The message opening s3://…/blob.bin fails with ("" when it opens).
    auto refusal = [&] {
      try {
        RemoteObject::open(s3("blob.bin").toStdString());
      } catch (const Error& e) {
        return QString(e.what());
      }
      return QString();
    };
    {
      ScopedEnv key("AWS_ACCESS_KEY_ID", "AKIDNOTKNOWN");
      ScopedEnv secret("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMIsecretvalue");
      ScopedEnv token("AWS_SESSION_TOKEN", "tokenvalue123");
      const QString msg = refusal();
      QVERIFY2(!msg.isEmpty(), "a wrong key id was accepted");
      QVERIFY2(msg.contains("HTTP 403") && msg.contains("InvalidAccessKeyId") && msg.contains("AKIDNOTKNOWN"), qPrintable(msg));
      QVERIFY2(!msg.contains("wJalrXUtnFEMIsecretvalue") && !msg.contains("tokenvalue123"), qPrintable(msg));
      const std::string described = loadS3Config().describe();
      QVERIFY(described.find("secretvalue") == std::string::npos && described.find("tokenvalue") == std::string::npos);
    }
    {
      // The right key id with a wrong secret: the signature does not hold (checked by the proxy, as S3 does).
      ScopedEnv secret("AWS_SECRET_ACCESS_KEY", "not-the-s3rver-secret");
      const QString msg = refusal();
      QVERIFY2(!msg.isEmpty(), "a wrong secret was accepted");
      QVERIFY2(msg.contains("HTTP 403") && msg.contains("SignatureDoesNotMatch") && msg.contains("S3RVER"), qPrintable(msg));
      QVERIFY2(!msg.contains("not-the-s3rver-secret"), qPrintable(msg));
    }
    NAMED(expectBadInput([&] { RemoteObject::open(s3("nothing-here.bin").toStdString()); }, {"HTTP 404", "NoSuchKey"}));
    NAMED(expectBadInput([&] { RemoteObject::open("s3://no-such-bucket/x.bin"); }, {"HTTP 404", "NoSuchBucket"}));
    NAMED(expectBadInput([&] { openDataset("tokens:" + servers_.httpUrl("tokens/none.bin").toStdString()); },
                           {"none.bin", "HTTP 404"}));
    LoaderOptions images;
    images.transforms = "Resize(40),CenterCrop(32)";
    NAMED(expectBadInput([&] { openDataset("wds:" + s3("empty/x-*.tar").toStdString(), images); }, {"no shard"}));
    NAMED(expectBadInput([&] { RemoteObject::open("s3://Bad_Bucket/x"); }, {"a bucket is 3-63"}));
    // A password in the URL (basic auth) or a presigned signature never reaches the message.
    const QString withPassword = servers_.httpUrl("none.bin").replace("http://", "http://ann:pw-in-url@") + "?X-Amz-Signature=abc123&x=1";
    try {
      RemoteObject::open(withPassword.toStdString());
      QFAIL("a missing object was opened");
    } catch (const Error& e) {
      const QString msg = e.what();
      QVERIFY2(msg.contains("http://***@127.0.0.1") && msg.contains("X-Amz-Signature=***&x=1") && !msg.contains("pw-in-url") &&
                   !msg.contains("abc123"),
               qPrintable(msg));
    }
    // A self-signed certificate is refused, unless trusted (AWS_CA_BUNDLE) or the check is off.
    const std::string tls = servers_.httpsUrl("blob.bin").toStdString();
    NAMED(expectBadInput([&] { RemoteObject::open(tls); }, {"TLS", "STOKER_TLS_INSECURE=1"}));
    {
      ScopedEnv ca("AWS_CA_BUNDLE", servers_.certificate().toUtf8());
      QCOMPARE(RemoteObject::open(tls)->size(), std::uint64_t(blob_.size()));
    }
    ScopedEnv insecure("STOKER_TLS_INSECURE", "1");
    QCOMPARE(RemoteObject::open(tls)->size(), std::uint64_t(blob_.size()));
  }

  // Issue 40: a secret never appears in a log, an error, telemetry, an exported snippet or a saved
  // file. A dataset URL with a password (basic auth) and a presigned signature, used everywhere a
  // spec goes: the description, `stoker bench` (table, JSON, telemetry file, both exports),
  // `dataset info`/`export` (the file's metadata), errors from the spec's parser, the CLI and
  // `stoker.Loader` (its error, describe(), its telemetry's `dataset`). (The workbench's settings:
  // tst_loader_workspace.)
  void secretsInAUrlStayOut() {
    const QString url = servers_.httpUrl("tokens/tokens.bin").replace("http://", "http://ann:pw-in-url@") +
                        "?X-Amz-Signature=sig-in-url";
    const QString spec = "tokens:" + url + ",ctx=64";
    const QString missing = "tokens:" + QString(url).replace("tokens/tokens.bin", "tokens/none.bin") + ",ctx=64";
    const QStringList secrets = {"pw-in-url", "sig-in-url"};
    auto clean = [&](const QByteArray& text, const char* where) {
      for (const QString& s : secrets)
        if (QString::fromUtf8(text).contains(s)) return QString("%1 holds %2: %3").arg(where, s, QString::fromUtf8(text.left(2000)));
      return QString();
    };
    QVERIFY(holdsSecret(spec.toStdString()));
    QCOMPARE(redactedUrl("a http://u:p@h/x and https://v:q@k/y?X-Amz-Signature=s1, X-Amz-Signature=s2&z=1"),
             std::string("a http://***@h/x and https://***@k/y?X-Amz-Signature=***, X-Amz-Signature=***&z=1"));
    // A password whose '/', '?' or '#' was not percent-encoded is hidden whole; a port and a path
    // with an '@' are not a password.
    QCOMPARE(redactedUrl("wds:https://ann:p/s?s#w@host/x.tar,shuffle"), std::string("wds:https://***@host/x.tar,shuffle"));
    QCOMPARE(redactedUrl("https://ann:p#w@host/x"), std::string("https://***@host/x"));
    QCOMPARE(redactedUrl("https://host:8080/pkg@2.0/x"), std::string("https://host:8080/pkg@2.0/x"));
    QCOMPARE(redactedUrl("https://host/a@b and https://h:9/c"), std::string("https://host/a@b and https://h:9/c"));
    // The other presigned forms: S3's SigV2, GCS's, Azure's SAS; "config=" is no "sig=".
    QCOMPARE(redactedUrl("https://b.s3.amazonaws.com/k?AWSAccessKeyId=AKIA1&Expires=9&Signature=abc%2B"),
             std::string("https://b.s3.amazonaws.com/k?AWSAccessKeyId=***&Expires=9&Signature=***"));
    QCOMPARE(redactedUrl("https://storage.googleapis.com/b/k?X-Goog-Algorithm=x&X-Goog-Credential=c&X-Goog-Signature=s"),
             std::string("https://storage.googleapis.com/b/k?X-Goog-Algorithm=x&X-Goog-Credential=***&X-Goog-Signature=***"));
    QCOMPARE(redactedUrl("https://a.blob.core.windows.net/c/k?sv=1&sig=s%3D&config=keep"),
             std::string("https://a.blob.core.windows.net/c/k?sv=1&sig=***&config=keep"));
    // Generic credentials by their parameter's name (a hub's ?token=, an API's ?key=): the PyTorch
    // export wrote such a token twice.
    QCOMPARE(redactedUrl("https://hub/x.safetensors?token=SECRET1&rev=main"), std::string("https://hub/x.safetensors?token=***&rev=main"));
    QCOMPARE(redactedUrl("wds:https://h/s.tar?Access_Token=A1,shuffle"), std::string("wds:https://h/s.tar?Access_Token=***,shuffle"));
    QCOMPARE(redactedUrl("https://h/x?api_key=k2&client_secret=c3&key=shard-000.tar&max_tokens=9&monkey=keep"),
             std::string("https://h/x?api_key=***&client_secret=***&key=shard-000.tar&max_tokens=9&monkey=keep"));
    QVERIFY(!holdsSecret("https://host/x.bin?config=1&design=2"));
    QVERIFY(!holdsSecret("tokens:https://host/x.bin,ctx=8"));
    QVERIFY(!holdsSecret("tokens:https://***@host/x.bin,ctx=8"));  // hidden already
    // Every Error hides them as it is made, however deep in the core it is thrown: here a remote
    // file that is no checkpoint (the workbench's Checkpoints log showed such an error raw).
    const Error made(ErrorKind::Io, "http://u:pw-in-url@h/x", "at https://h/y?X-Amz-Signature=sig-in-url&a=1");
    QCOMPARE(std::string(made.what()), std::string("http://***@h/x: at https://h/y?X-Amz-Signature=***&a=1"));
    QVERIFY(clean(QByteArray(made.subject().c_str()) + made.reason().c_str(), "an Error").isEmpty());
    try {
      inspectCheckpoint(url.toStdString());
      QFAIL("a token file was read as a checkpoint");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("http://***@127.0.0.1") && QString(e.what()).contains("neither"), e.what());
      QVERIFY2(clean(e.what(), "inspect's error").isEmpty(), e.what());
    }
    const auto ds = openDataset(spec.toStdString());
    QVERIFY2(clean(QByteArray::fromStdString(ds->description()), "the description").isEmpty(), ds->description().c_str());
    QVERIFY(QString::fromStdString(ds->description()).contains("http://***@127.0.0.1"));

    const QString telemetry = tmp_.filePath("secret-telemetry.jsonl");
    const auto bench = runStoker({"bench", "--dataset", spec, "--batch-size", "64", "--epochs", "1", "--json", "--publish",
                                  "file:" + telemetry});
    QVERIFY2(bench.exitCode == 0, bench.err.constData());
    QVERIFY2(clean(bench.out + bench.err, "bench --json").isEmpty(), qPrintable(clean(bench.out + bench.err, "bench --json")));
    QFile records(telemetry);
    QVERIFY(records.open(QIODevice::ReadOnly));
    const QByteArray sent = records.readAll();
    QVERIFY(sent.size() > 100);
    QVERIFY2(clean(sent, "bench's telemetry").isEmpty(), qPrintable(clean(sent, "bench's telemetry")));
    const auto table = runStoker({"bench", "--dataset", spec, "--batch-size", "64", "--epochs", "1"});
    QVERIFY2(table.exitCode == 0 && clean(table.out + table.err, "bench").isEmpty(), (table.out + table.err).constData());
    for (const char* exportFlag : {"--export-python", "--export-pytorch"}) {
      const auto exported = runStoker({"bench", "--dataset", spec, exportFlag});
      QVERIFY2(exported.exitCode == 0, exported.err.constData());
      QVERIFY2(clean(exported.out, exportFlag).isEmpty(), qPrintable(clean(exported.out, exportFlag)));
      QVERIFY2(exported.out.contains("http://***@127.0.0.1") && exported.out.contains("X-Amz-Signature=***") &&
                   exported.out.contains("put it back"),
               exported.out.constData());
    }
    const auto info = runStoker({"dataset", "info", spec, "--json"});
    QVERIFY2(info.exitCode == 0 && clean(info.out + info.err, "dataset info").isEmpty(), (info.out + info.err).constData());
    const QString exportedFile = tmp_.filePath("secret-export.safetensors");
    const auto dexport = runStoker({"dataset", "export", spec, exportedFile, "--limit", "4"});
    QVERIFY2(dexport.exitCode == 0, dexport.err.constData());
    QFile written(exportedFile);
    QVERIFY(written.open(QIODevice::ReadOnly));
    QVERIFY2(clean(written.readAll(), "the exported file").isEmpty(), "dataset export wrote the secret into its metadata");
    // Errors that echo the spec: an unknown spec option, an unknown kind, transforms for tokens.
    for (const QStringList& args : {QStringList{"bench", "--dataset", spec + ",dtype=u9"},
                                    QStringList{"bench", "--dataset", "tokenz:" + url},
                                    QStringList{"bench", "--dataset", spec, "--transforms", "CenterCrop(8)"},
                                    QStringList{"bench", "--dataset", missing}}) {
      const auto refused = runStoker(args);
      QVERIFY2(refused.exitCode != 0 && refused.err.contains("error:"), refused.err.constData());
      QVERIFY2(clean(refused.err, "an error").isEmpty(), refused.err.constData());
      QVERIFY2(refused.err.contains("***"), refused.err.constData());
    }
    // A checkpoint by such a URL: inspect's table and JSON, a conversion's plan, its progress lines.
    writeModel("secret-model.safetensors", 2, 4096);
    const QString model = servers_.httpUrl("secret-model.safetensors").replace("http://", "http://ann:pw-in-url@");
    for (const QStringList& args : {QStringList{"ckpt", "inspect", model}, QStringList{"ckpt", "inspect", model, "--json"},
                                    QStringList{"ckpt", "convert", model, tmp_.filePath("secret-plan"), "--to", "ranks:2", "--dry-run"},
                                    QStringList{"ckpt", "convert", model, tmp_.filePath("secret-plan"), "--to", "ranks:2", "--dry-run", "--json"},
                                    QStringList{"ckpt", "convert", model, tmp_.filePath("secret-converted"), "--to", "single"}}) {
      const auto shown = runStoker(args);
      QVERIFY2(shown.exitCode == 0, shown.err.constData());
      QVERIFY2(clean(shown.out + shown.err, "ckpt").isEmpty(), qPrintable(args.join(' ') + ": " + clean(shown.out + shown.err, "ckpt")));
      QVERIFY2(args[1] == "convert" && !args.contains("--dry-run") ? true : shown.out.contains("http://***@127.0.0.1"),
               shown.out.constData());
    }
#ifdef STOKER_HAVE_PYTHON_PACKAGE
    const QString pyTelemetry = tmp_.filePath("secret-python.jsonl");
    QProcess p;
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    e.insert("PYTHONPATH", QStringLiteral(STOKER_BUILD_PYTHON));
    p.setProcessEnvironment(e);
    p.start(QStringLiteral(STOKER_PYTHON), {"-c", R"(
import sys, json, stoker, stoker.ckpt
spec, missing, out, model = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
print(json.dumps(stoker.ckpt.inspect(model)))
loader = stoker.Loader(spec, batch_size=64, publish='file:' + out, telemetry_interval_ms=10)
n = sum(1 for _ in loader)
print(json.dumps(loader.describe()))
loader.close()
try:
    stoker.Loader(missing, batch_size=4)
    raise SystemExit('a missing object was opened')
except ValueError as e:
    print(e)
)", spec, missing, pyTelemetry, model});
    QVERIFY(p.waitForFinished(120000));
    const QByteArray pyOut = p.readAllStandardOutput(), pyErr = p.readAllStandardError();
    QVERIFY2(p.exitCode() == 0, pyErr.constData());
    QVERIFY2(clean(pyOut + pyErr, "stoker.Loader").isEmpty(), (pyOut + pyErr).constData());
    QVERIFY2(pyOut.contains("***") && pyOut.contains("layer.1.weight"), pyOut.constData());
    QFile pyRecords(pyTelemetry);
    QVERIFY(pyRecords.open(QIODevice::ReadOnly));
    const QByteArray pySent = pyRecords.readAll();
    QVERIFY2(pySent.contains("\"dataset\":\"tokens:http://***@127.0.0.1"), pySent.left(600).constData());
    QVERIFY2(clean(pySent, "stoker.Loader's telemetry").isEmpty(), "the Python loader sent the secret");
#endif
  }

  // The workbench's form keeps part_size and max_inflight_parts live for a remote dataset.
  void partKnobsMatterForRemoteDatasets() {
    QVERIFY(datasetIsRemote("wds:s3://b-1/x-{0..3}.tar"));
    QVERIFY(datasetIsRemote("tokens:https://h/t.bin,ctx=8"));
    QVERIFY(datasetIsRemote("http://h/f.safetensors"));
    QVERIFY(!datasetIsRemote("tokens:/data/t.bin"));
    QVERIFY(!datasetIsRemote("fashion-mnist"));
    auto has = [](const std::vector<InactiveKnob>& v, const char* knob) {
      return std::any_of(v.begin(), v.end(), [&](const InactiveKnob& k) { return k.knob == knob; });
    };
    const LoaderOptions o;  // reader_mode mmap
    QVERIFY(has(inactiveKnobs(o, true, false), "part_size"));
    QVERIFY(!has(inactiveKnobs(o, true, true), "part_size"));
    QVERIFY(!has(inactiveKnobs(o, true, true), "max_inflight_parts"));
  }

  // Three ranks of `stoker feed` over one remote token file (no cache) read disjoint bytes: no
  // window is asked for twice, and together the ranks ask for the file about once, not three
  // times (counted at the proxy; windows of ctx + 1 tokens overlap their neighbours by one token).
  // --drop-last: DistributedSampler pads the tail otherwise, by repeating the first samples.
  // Runs `stoker feed ARGS` as `world` ranks of one job (torchrun's variables); each rank's
  // standard output, or a failure (QVERIFY) with the stderr of the first rank that failed.
  void runFeedRanks(int world, const QStringList& args, QList<QByteArray>& outputs) {
    const int port = freePort();
    std::vector<std::unique_ptr<QProcess>> ranks;
    for (int r = 0; r < world; ++r) {
      auto p = std::make_unique<QProcess>();
      QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
      env.insert("RANK", QString::number(r));
      env.insert("WORLD_SIZE", QString::number(world));
      env.insert("MASTER_ADDR", "127.0.0.1");
      env.insert("MASTER_PORT", QString::number(port));
      p->setProcessEnvironment(env);
      p->start(STOKER_CLI_PATH, QStringList{"feed"} + args);
      ranks.push_back(std::move(p));
    }
    outputs.clear();
    for (auto& p : ranks) {
      QVERIFY(p->waitForFinished(120000));
      QVERIFY2(p->exitCode() == 0, p->readAllStandardError().constData());
      outputs.append(p->readAllStandardOutput());
    }
  }

  void ranksReadDisjointBytes() {
    const QString spec = "tokens:" + servers_.httpUrl("tokens/tokens.bin") + ",ctx=64";
    const qint64 fileBytes = QFileInfo(servers_.www() + "/tokens/tokens.bin").size();
    servers_.takeLog(true);
    QList<QByteArray> outputs;
    runFeedRanks(3, {"--dataset", spec, "--batch-size", "16", "--epochs", "1", "--workers", "1", "--drop-last"}, outputs);
    if (QTest::currentTestFailed()) return;
    // Every range asked for (a batch's windows go as the ranges of one request, neighbours joined),
    // but the opens' first byte.
    std::vector<std::pair<qint64, qint64>> asked;
    int requests = 0;
    for (const auto& e : servers_.takeLog(true)) {
      const QString range = e.toArray()[2].toString();
      if (range == "bytes=0-0") continue;
      ++requests;
      for (const QString& r : range.mid(6).split(',')) asked.emplace_back(r.section('-', 0, 0).toLongLong(), r.section('-', 1, 1).toLongLong());
    }
    std::sort(asked.begin(), asked.end());
    qint64 bytes = 0;
    for (std::size_t k = 0; k < asked.size(); ++k) {
      bytes += asked[k].second - asked[k].first + 1;
      // Windows of ctx + 1 tokens share one token (2 bytes) with the next: no more overlap than that.
      if (k > 0)
        QVERIFY2(asked[k].first >= asked[k - 1].second - 1,
                 qPrintable(QString("asked twice: %1-%2 and %3-%4").arg(asked[k - 1].first).arg(asked[k - 1].second).arg(asked[k].first).arg(asked[k].second)));
    }
    const qint64 expectedWindows = (fileBytes / 2 - 1) / 64;
    QVERIFY2(bytes >= (expectedWindows - 3 * 16) * 128 && bytes < fileBytes * 103 / 100, qPrintable(QString("%1 of %2").arg(bytes).arg(fileBytes)));
    QVERIFY2(requests <= expectedWindows / 8, qPrintable(QString::number(requests)));  // batches of 16 windows, not a request each
    // Without --workers a rank gets 16 for these windows (feed's default of 1 is nobody's choice).
    runFeedRanks(1, {"--dataset", spec, "--batch-size", "16", "--epochs", "1", "--drop-last", "--json"}, outputs);
    if (QTest::currentTestFailed()) return;
    QCOMPARE(QJsonDocument::fromJson(outputs[0]).object()["num_workers"].toInt(), 16);
  }

  // `stoker feed` ranks (a c10d job, the planner dealing samples) opening remote WebDataset shards
  // share their scans over their group: rank r scans shards r, r + 3, ..., so each shard's scan
  // request (from byte 0) reaches the server once for the three ranks, not three times, and every
  // rank feeds exactly the samples it feeds from the same shards on local disk.
  void feedRanksShareTheirScans() {
    const QString pattern = "shards/train-{000000..000003}.tar";
    const QTemporaryDir records;
    auto feed = [&](const QString& shards, const QString& record, QList<QByteArray>& outputs, const QStringList& more) {
      runFeedRanks(3, QStringList{"--dataset", "wds:" + shards, "--transforms", "Resize(40),CenterCrop(32)", "--batch-size", "4",
                                  "--epochs", "2", "--workers", "1", "--record", records.filePath(record), "--json"} + more,
                   outputs);
    };
    QList<QByteArray> local, remote, cached;
    feed(servers_.www() + "/" + pattern, "local", local, {});
    if (QTest::currentTestFailed()) return;
    servers_.takeLog(true);
    feed(servers_.httpUrl(pattern), "remote", remote, {});
    if (QTest::currentTestFailed()) return;
    // Requests from byte 0 per shard: the opens' scans. A sample lies past its tar header, and
    // bytes=0-0 opens a shard another rank scanned (its size and ETag) when this rank first reads it.
    QMap<QString, int> scans;
    for (const auto& e : servers_.takeLog(true))
      if (const QString range = e.toArray()[2].toString(); range.startsWith("bytes=0-") && range != "bytes=0-0")
        scans[e.toArray()[1].toString().section('/', -1)]++;
    QCOMPARE(scans.size(), 4);
    for (auto it = scans.begin(); it != scans.end(); ++it) QVERIFY2(it.value() == 1, qPrintable(QString("%1: %2").arg(it.key()).arg(it.value())));
    for (int r = 0; r < 3; ++r) {
      const auto digests = [](const QByteArray& out) {
        QStringList d;
        for (const auto& e : QJsonDocument::fromJson(out).object()["epochs"].toArray()) d << e.toObject()["plan_digest"].toString();
        return d;
      };
      QCOMPARE(digests(remote[r]), digests(local[r]));
      QCOMPARE(digests(remote[r]).size(), 2);
      const QString name = QString("/rank%1.txt").arg(r);
      const QByteArray fed = readFile(records.filePath("remote") + name);
      QVERIFY(!fed.isEmpty());
      QCOMPARE(fed, readFile(records.filePath("local") + name));
    }

    // The loader's knobs come from --options: here a cache_dir the node's three ranks share, which
    // ends up holding every shard's index (each rank's own scans and those it took from the others).
    const QString options = records.filePath("options.json");
    QVERIFY(writeFile(options, QString(R"({"cache_dir": "%1", "max_inflight_parts": 2})").arg(records.filePath("cache")).toUtf8()));
    feed(servers_.httpUrl(pattern), "cached", cached, {"--options", options});
    if (QTest::currentTestFailed()) return;
    QCOMPARE(QDir(records.filePath("cache")).entryList({"*.wds.idx"}, QDir::Files).size(), 4);
    for (int r = 0; r < 3; ++r) {
      const QString name = QString("/rank%1.txt").arg(r);
      QCOMPARE(readFile(records.filePath("cached") + name), readFile(records.filePath("local") + name));
    }
  }

  // A rank that cannot open -- its listing of an s3:// glob fails (here: another bucket, which does
  // not exist), or its node's cache_dir cannot be made -- still takes part in the exchange, with
  // no scans: the others open, scanning its share themselves, instead of waiting in the
  // all-gather, and it reports its own error.
  void aRankThatCannotOpenStillTakesPart() {
    const LoaderOptions o = sharingRankOptions();
    const std::string good = "wds:s3://" + RemoteServers::bucket().toStdString() + "/shards/train-*.tar";
    const auto local = openDataset("wds:" + (servers_.www() + "/shards/train-*.tar").toStdString(), o);
    QVERIFY(writeFile(tmp_.filePath("a-file"), "not a folder"));
    struct Case {
      std::string rank1Spec, rank1CacheDir, message;
    };
    const Case cases[] = {
        {"wds:s3://no-such-bucket-here/shards/train-*.tar", "", "NoSuchBucket"},
        {good, tmp_.filePath("a-file/cache").toStdString(), "a-file"},
    };
    for (const Case& c : cases) {
      ThreadAllGather gather(3);
      std::vector<std::string> failures;
      const auto ranks = openRanksOnThreads([&](int r) { return r == 1 ? c.rank1Spec : good; }, 3,
                                            [&](int r) {
                                              LoaderOptions mine = o;
                                              mine.shard_rank = r;
                                              if (r == 1) mine.cache_dir = c.rank1CacheDir;
                                              return mine;
                                            },
                                            gather.exchange(), failures);
      QCOMPARE(gather.in, 3);  // without rank 1 the others waited out ThreadAllGather's 60 s
      QVERIFY2(failures[1].find(c.message) != std::string::npos, failures[1].c_str());
      for (int r : {0, 2}) {
        QVERIFY2(failures[static_cast<std::size_t>(r)].empty(), failures[static_cast<std::size_t>(r)].c_str());
        QCOMPARE(ranks[static_cast<std::size_t>(r)]->size(), local->size());
      }
    }
  }

  // Ranks whose shard lists differ (an s3:// glob listed while shards came or went; here rank 1
  // names three of the four) would deal other shards under the same numbers: some read twice,
  // others never, and unequal steps. The lists travel with the scans, and every rank refuses.
  void ranksWithDifferentShardListsRefuse() {
    const std::string four = "wds:" + servers_.httpUrl("shards/train-{000000..000003}.tar").toStdString() + ",scan_cache=off";
    const std::string three = "wds:" + servers_.httpUrl("shards/train-{000000..000002}.tar").toStdString() + ",scan_cache=off";
    ThreadAllGather gather(3);
    std::vector<std::string> failures;
    openRanksOnThreads([&](int r) { return r == 1 ? three : four; }, 3,
                       [&](int r) {
                         LoaderOptions mine = sharingRankOptions();
                         mine.shard_rank = r;
                         return mine;
                       },
                       gather.exchange(), failures);
    QCOMPARE(gather.in, 3);
    for (int r = 0; r < 3; ++r)
      QVERIFY2(failures[static_cast<std::size_t>(r)].find(r == 1 ? "(3 shards here, 4 on another rank)" : "(4 shards here, 3 on another rank)") !=
                       std::string::npos &&
                   failures[static_cast<std::size_t>(r)].find("the ranks opened different shard lists") != std::string::npos,
               failures[static_cast<std::size_t>(r)].c_str());
    // The same lists open, as before (the check costs one small entry in the exchange).
    ThreadAllGather same(3);
    const auto ranks = openRanksOnThreads(four, 3,
                                          [&](int r) {
                                            LoaderOptions mine = sharingRankOptions();
                                            mine.shard_rank = r;
                                            return mine;
                                          },
                                          same.exchange(), failures);
    for (int r = 0; r < 3; ++r) QVERIFY2(failures[static_cast<std::size_t>(r)].empty(), failures[static_cast<std::size_t>(r)].c_str());
  }

  // Uncached remote token windows wait a round trip a batch: with few workers the loader says that
  // more read more; not with enough of them, not with a cache, not for the local file.
  void fewWorkersOnRemoteWindowsAreNoted() {
    const std::string http = "tokens:" + servers_.httpUrl("tokens/tokens.bin").toStdString() + ",ctx=64";
    auto noted = [](const std::string& spec, const LoaderOptions& o) {
      for (const std::string& n : Loader(openDataset(spec, o), o, DeviceSpec::parse("cpu")).notes())
        if (n.find("each batch waits a round trip") != std::string::npos) return QString::fromStdString(n);
      return QString();
    };
    LoaderOptions o;
    o.num_workers = 2;
    const QString note = noted(http, o);
    QVERIFY2(note.contains("one a worker (num_workers 2)") && note.contains("stoker tune` tries up to 64") &&
                 note.contains("cache_dir"),
             qPrintable(note));
    QVERIFY(noted("tokens:" + (servers_.www() + "/tokens/tokens.bin").toStdString() + ",ctx=64", o).isEmpty());
    o.num_workers = 16;
    o.prefetch = 32;
    QVERIFY(noted(http, o).isEmpty());
    o.num_workers = 2;
    o.prefetch = 4;
    o.cache_dir = tmp_.filePath("few-workers-cache").toStdString();
    QVERIFY(noted(http, o).isEmpty());
  }

  // Workers nobody chose (Python without num_workers=, `stoker bench` without --workers or a
  // setting naming them): uncached remote token windows get 16, the ring two batches each, and a
  // note says why; chosen workers, local files, cached ones and large batches keep theirs or fewer.
  void workersNobodyChoseAreRaisedForRemoteWindows() {
    QCOMPARE(workersForNetwork(1 << 20), 16);
    QCOMPARE(workersForNetwork(100LL << 20), 6);  // 3 batches a worker within 2 GiB
    QCOMPARE(workersForNetwork(4LL << 30), 1);
    const std::string http = "tokens:" + servers_.httpUrl("tokens/tokens.bin").toStdString() + ",ctx=64";
    const std::string local = "tokens:" + (servers_.www() + "/tokens/tokens.bin").toStdString() + ",ctx=64";
    LoaderOptions o;
    o.batch_size = 8;
    o.num_workers = 2;
    o.prefetch = 8;
    Loader raised(openDataset(http, o), o, DeviceSpec::parse("cpu"));
    QCOMPARE(raised.networkWorkers(), 16);  // what the bottleneck panel advises
    QVERIFY(raised.raiseWorkersForNetwork());
    QCOMPARE(raised.options().num_workers, 16);
    QCOMPARE(raised.options().prefetch, 32);
    const auto notes = raised.notes();
    const QString all = QString::fromStdString(std::accumulate(notes.begin(), notes.end(), std::string(),
                                                               [](std::string a, const std::string& n) { return a + n + "\n"; }));
    QVERIFY2(all.contains("num_workers 16 (not given)") && all.contains("give num_workers to choose") &&
                 !all.contains("each batch waits a round trip") && !all.contains("retuned:"),
             qPrintable(all));
    QVERIFY(!raised.raiseWorkersForNetwork());  // has them already
    QVERIFY_EXCEPTION_THROWN(raised.raiseWorkersForNetwork(-1), Error);
    Loader keptRing(openDataset(http, o), o, DeviceSpec::parse("cpu"));
    QVERIFY(keptRing.raiseWorkersForNetwork(0));  // the user chose the ring's depth
    QCOMPARE(keptRing.options().num_workers, 16);
    QCOMPARE(keptRing.options().prefetch, 8);
    // The raised loader serves the local file's batches.
    Loader plain(openDataset(local, o), o, DeviceSpec::parse("cpu"));
    QVERIFY(!plain.raiseWorkersForNetwork());
    QCOMPARE(plain.options().num_workers, 2);
    QCOMPARE(plain.networkWorkers(), 0);
    {
      Epoch a = raised.epoch(0), b = plain.epoch(0);
      int batches = 0;
      while (auto x = a.next()) {
        auto y = b.next();
        QVERIFY(y && x->tensors.size() == y->tensors.size());
        for (std::size_t f = 0; f < x->tensors.size(); ++f) QVERIFY(x->tensors[f].equal(y->tensors[f]));
        ++batches;
      }
      QVERIFY(!b.next() && batches > 10);
    }
    LoaderOptions cached = o;
    cached.cache_dir = tmp_.filePath("raise-workers-cache").toStdString();
    Loader fromCache(openDataset(http, cached), cached, DeviceSpec::parse("cpu"));
    QVERIFY(!fromCache.raiseWorkersForNetwork());
    QCOMPARE(fromCache.options().num_workers, 2);
    LoaderOptions resident = o;  // read once at the open: no batch waits on the network
    resident.loading_mode = LoadingMode::Resident;
    Loader held(openDataset(http, resident), resident, DeviceSpec::parse("cpu"));
    QVERIFY(!held.raiseWorkersForNetwork());
    QCOMPARE(held.options().num_workers, 2);
    // `stoker bench`: raised without --workers, kept with it or with an options file naming them.
    auto benchWorkers = [&](QStringList extra) {
      const auto r = runStoker(QStringList{"bench", "--dataset", QString::fromStdString(http), "--batch-size", "8",
                                           "--epochs", "1", "--json"} + extra);
      if (r.exitCode != 0) return std::make_pair(QString("failed"), QString::fromUtf8(r.err));
      const QJsonObject doc = QJsonDocument::fromJson(r.out).object();
      const QJsonArray notes = doc["per_device"].toArray()[0].toObject()["notes"].toArray();
      const QJsonObject options = doc["options"].toObject();
      return std::make_pair(QString("%1 %2").arg(options["num_workers"].toInt()).arg(options["prefetch"].toInt()),
                            QString::fromUtf8(QJsonDocument(notes).toJson()));
    };
    const auto unset = benchWorkers({});
    QVERIFY2(unset.first == "16 32" && unset.second.contains("(not given)"), qPrintable(unset.first + unset.second));
    QCOMPARE(benchWorkers({"--prefetch", "4"}).first, QString("16 4"));  // the depth chosen stays
    const QString saved = tmp_.filePath("raised-workers.json");  // --save-options saves what ran
    QCOMPARE(benchWorkers({"--save-options", saved}).first, QString("16 32"));
    QCOMPARE(QJsonDocument::fromJson(readFile(saved)).object()["num_workers"].toInt(), 16);
    QCOMPARE(benchWorkers({"--workers", "3"}).first, QString("3 8"));
    const QString file = tmp_.filePath("three-workers.json");
    QVERIFY(writeFile(file, R"({"num_workers": 3, "batch_size": 8})"));
    QCOMPARE(benchWorkers({"--options", file}).first.section(' ', 0, 0), QString("3"));
    QCOMPARE(benchWorkers({"--preset", "debug_mode"}).first.section(' ', 0, 0), QString("0"));
    // On several devices each one's loader reads its share a round trip a batch: raised alike,
    // and --save-options saves what ran there too.
    const QString savedTwo = tmp_.filePath("raised-workers-two.json");
    const auto two = runStoker({"bench", "--dataset", QString::fromStdString(http), "--batch-size", "8", "--epochs", "1",
                                "--device", "sim:0,sim:1", "--json", "--save-options", savedTwo});
    QVERIFY2(two.exitCode == 0, two.err.constData());
    const QJsonObject twoDoc = QJsonDocument::fromJson(two.out).object();
    QCOMPARE(twoDoc["options"].toObject()["num_workers"].toInt(), 16);
    QCOMPARE(twoDoc["options"].toObject()["prefetch"].toInt(), 32);
    const QString twoNotes = QString::fromUtf8(QJsonDocument(twoDoc["notes"].toArray()).toJson());
    QVERIFY2(twoNotes.count("num_workers 16 (not given)") == 2, qPrintable(twoNotes));
    QCOMPARE(QJsonDocument::fromJson(readFile(savedTwo)).object()["num_workers"].toInt(), 16);
    const auto twoChosen = runStoker({"bench", "--dataset", QString::fromStdString(http), "--batch-size", "8", "--epochs", "1",
                                      "--device", "sim:0,sim:1", "--json", "--workers", "3"});
    QVERIFY2(twoChosen.exitCode == 0, twoChosen.err.constData());
    QCOMPARE(QJsonDocument::fromJson(twoChosen.out).object()["options"].toObject()["num_workers"].toInt(), 3);
    // --export-python opens nothing, so it leaves workers nobody chose to stoker.Loader (which raises
    // them); chosen ones, and a local file's, stay in the snippet.
    auto exported = [&](const QString& spec, QStringList extra) {
      const auto r = runStoker(QStringList{"bench", "--dataset", spec, "--batch-size", "8", "--export-python"} + extra);
      return std::make_pair(QString::fromUtf8(r.out), QString::fromUtf8(r.err));
    };
    const auto left = exported(QString::fromStdString(http), {});
    QVERIFY2(!left.first.contains("num_workers=") && !left.first.contains("prefetch=") && left.second.contains("left to stoker.Loader"),
             qPrintable(left.first + left.second));
    const auto pinned = exported(QString::fromStdString(http), {"--workers", "3"});
    QVERIFY2(pinned.first.contains("num_workers=3") && !pinned.second.contains("left to"), qPrintable(pinned.first + pinned.second));
    QVERIFY(!exported(QString::fromStdString(local), {}).second.contains("left to"));
    const QString cachedFile = tmp_.filePath("cached-windows.json");  // cached windows do not wait on the network
    QVERIFY(writeFile(cachedFile, QJsonDocument(QJsonObject{{"cache_dir", tmp_.filePath("export-cache")}}).toJson()));
    QVERIFY(!exported(QString::fromStdString(http), {"--options", cachedFile}).second.contains("left to"));
#ifdef STOKER_HAVE_PYTHON_PACKAGE
    // The snippet, pasted into a script, gets the raised workers.
    QProcess p;
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    e.insert("PYTHONPATH", QStringLiteral(STOKER_BUILD_PYTHON));
    p.setProcessEnvironment(e);
    p.start(QStringLiteral(STOKER_PYTHON), {"-c", left.first + "\nprint(loader.options['num_workers'], loader.options['prefetch'])\n"});
    QVERIFY(p.waitForFinished(60000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    QCOMPARE(QString::fromUtf8(p.readAllStandardOutput()).trimmed(), QString("16 32"));
#endif
  }

  // The auto-tuner searches part_size and max_inflight_parts for a remote dataset, each setting on
  // the dataset opened again with it; not for a local one, and not with cache_dir (a note says why).
  void theTunerSearchesThePartKnobs() {
    const std::string spec = "tokens:" + servers_.httpUrl("tokens/tokens.bin").toStdString() + ",ctx=64";
    QVERIFY(defaultTuneCandidates(LoaderOptions{}, 2, true).size() == defaultTuneCandidates(LoaderOptions{}, 2, false).size() + 2);
    // Remote workers mostly wait on the network: up to 16 of them even on 2 cores (4 for local data),
    // and up to 64 where their batches are small: token windows (64 x 1024 x 2 int64 fields, 1 MiB a
    // batch), not image batches (64 x 3 x 224 x 224 float, 38 MiB: 64 workers would hold 7 GiB).
    QCOMPARE(defaultTuneCandidates(LoaderOptions{}, 2, true).front().second.back(), std::string("16"));
    QCOMPARE(defaultTuneCandidates(LoaderOptions{}, 2, false).front().second.back(), std::string("4"));
    QCOMPARE(defaultTuneCandidates(LoaderOptions{}, 16, true).front().second.back(), std::string("32"));
    LoaderOptions windows;
    windows.batch_size = 64;
    QCOMPARE(defaultTuneCandidates(windows, 2, true, 2 * 1024 * 8).front().second.back(), std::string("64"));
    QCOMPARE(defaultTuneCandidates(windows, 2, false, 2 * 1024 * 8).front().second.back(), std::string("4"));
    QCOMPARE(defaultTuneCandidates(windows, 2, true, 3 * 224 * 224 * 4).front().second.back(), std::string("16"));
    QCOMPARE(defaultTuneCandidates(windows, 16, true, 3 * 224 * 224 * 4).front().second.back(), std::string("32"));
    LoaderOptions base;
    base.batch_size = 16;
    base.num_workers = 1;
    base.prefetch = 2;
    base.loading_mode = LoadingMode::Streaming;
    TuneSpec tune;
    tune.budgetSeconds = 20;
    tune.measure.warmupSeconds = 0.05;
    tune.measure.minSeconds = 0.1;
    tune.measure.maxSeconds = 0.3;
    tune.remoteDataset = true;
    tune.candidates = {{"max_inflight_parts", {"1", "8"}}, {"part_size", {"65536", "1048576"}}};
    std::vector<LoaderOptions> reopened;
    tune.reopen = [&](const LoaderOptions& o) {
      reopened.push_back(o);
      return openDataset(spec, o);
    };
    LoaderSessionOptions session;
    const auto devices = expandDevices("cpu");
    const TuneResult r = autoTune(openDataset(spec, base), base, devices, session, tune, nullptr, {});
    auto tried = [&](const char* knob) {
      return std::count_if(r.trials.begin(), r.trials.end(), [&](const TuneTrial& t) { return t.change.find(knob) != std::string::npos; });
    };
    QVERIFY2(tried("max_inflight_parts") >= 1 && tried("part_size") >= 1, qPrintable(QString::number(r.trials.size())));
    QVERIFY(!reopened.empty());
    for (const auto& o : reopened) QVERIFY(datasetKnobsDiffer(base, o));  // each trial read a dataset opened with its knobs
    // With cache_dir the trials would read the cache: not searched, and said.
    base.cache_dir = tmp_.filePath("tune-cache").toStdString();
    reopened.clear();
    const TuneResult cached = autoTune(openDataset(spec, base), base, devices, session, tune, nullptr, {});
    QVERIFY(reopened.empty());
    QVERIFY(std::any_of(cached.notes.begin(), cached.notes.end(), [](const std::string& n) { return n.find("cache_dir") != std::string::npos; }));
  }

  // skip_bad_samples skips and counts a remote image that does not decode, as a local one.
  void skipBadSamplesCoversRemoteSamples() {
    const auto r = runPythonArgs({"-c", R"(
import io, sys, tarfile
good = open(sys.argv[2], 'rb').read()
with tarfile.open(sys.argv[1], 'w') as tf:
    for name, data in (('a.jpg', good), ('a.cls', b'0'), ('b.jpg', b'not a jpeg at all'), ('b.cls', b'1')):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
)", servers_.www() + "/bad.tar", QDirIterator(tmp_.filePath("photos"), {"*.jpg"}, QDir::Files, QDirIterator::Subdirectories).next()});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    LoaderOptions o;
    o.transforms = "Resize(40),CenterCrop(32),ToDtype(u8)";
    o.skip_bad_samples = true;
    o.batch_size = 2;
    o.shuffle = false;
    o.sampler_type = SamplerType::Sequential;
    o.drop_last = false;
    o.num_workers = 0;
    auto ds = openDataset("wds:" + servers_.httpUrl("bad.tar").toStdString(), o);
    {
      Loader loader(ds, o, DeviceSpec::parse("cpu"));
      {
        auto epoch = loader.epoch(0);
        auto batch = epoch.next();
        QVERIFY(batch.has_value());
        QCOMPARE(batch->size(), std::int64_t(1));
        QVERIFY(!epoch.next().has_value());
      }
      QCOMPARE(loader.lastEpoch().skipped, std::int64_t(1));
      QVERIFY2(loader.lastEpoch().firstSkipped.find("bad.tar: b: not an image") != std::string::npos, loader.lastEpoch().firstSkipped.c_str());
    }
  }

  // Credentials and endpoints from the shared files, as AWS_PROFILE names them.
  void profilesComeFromTheSharedFiles() {
    const QString creds = tmp_.filePath("aws-credentials"), config = tmp_.filePath("aws-config");
    QVERIFY(writeFile(creds, "[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = d\n\n"
                             "[train]\naws_access_key_id = TRAINKEY\naws_secret_access_key = t\naws_session_token = tok\n"));
    QVERIFY(writeFile(config, "[profile train]\nregion = eu-west-3\nendpoint_url = http://127.0.0.1:9/\ns3 =\n  addressing_style = path\n"));
    ScopedEnv c("AWS_SHARED_CREDENTIALS_FILE", creds.toUtf8()), f("AWS_CONFIG_FILE", config.toUtf8());
    qunsetenv("AWS_ACCESS_KEY_ID");
    qunsetenv("AWS_ENDPOINT_URL");
    ScopedEnv profile("AWS_PROFILE", "train");
    S3Config s = loadS3Config();
    QCOMPARE(QString::fromStdString(s.accessKeyId), QString("TRAINKEY"));
    QCOMPARE(QString::fromStdString(s.sessionToken), QString("tok"));
    QCOMPARE(QString::fromStdString(s.region), QString("eu-west-3"));
    QCOMPARE(QString::fromStdString(s.endpoint), QString("http://127.0.0.1:9"));
    QVERIFY(s.pathStyle);
    QCOMPARE(QString::fromStdString(s.objectUrl("b-1", "a b/c")), QString("http://127.0.0.1:9/b-1/a%20b/c"));
    {
      ScopedEnv other("AWS_PROFILE", "missing");
      NAMED(expectBadInput([] { loadS3Config(); }, {"AWS_PROFILE=missing", "no such profile"}));
    }
    {
      ScopedEnv defaultProfile("AWS_PROFILE", "");
      s = loadS3Config();
      QCOMPARE(QString::fromStdString(s.accessKeyId), QString("DEFAULTKEY"));
      QCOMPARE(QString::fromStdString(s.objectUrl("b-1", "k")), QString("https://b-1.s3.us-east-1.amazonaws.com/k"));
      // A dotted bucket as a host name fails AWS's wildcard certificate: path-style, as botocore.
      QCOMPARE(QString::fromStdString(s.objectUrl("my.data", "k")), QString("https://s3.us-east-1.amazonaws.com/my.data/k"));
      ScopedEnv virtualHost("STOKER_S3_ADDRESSING", "virtual");
      QCOMPARE(QString::fromStdString(loadS3Config().objectUrl("my.data", "k")), QString("https://my.data.s3.us-east-1.amazonaws.com/k"));
    }
    {
      ScopedEnv anonymous("AWS_NO_SIGN_REQUEST", "true");
      QVERIFY(loadS3Config().anonymous());
    }
    qputenv("AWS_ACCESS_KEY_ID", "S3RVER");
    qputenv("AWS_ENDPOINT_URL", QByteArray("http://127.0.0.1:") + QByteArray::number(servers_.s3ProxyPort()));
  }

  // Small reads go by bytes: as many token windows or images at once as max_inflight_parts parts
  // of part_size hold (readsInFlight), never fewer than max_inflight_parts, at most 64 unless asked
  // for more; with a cache a read may bring a whole part, so it counts as one. Token windows, an S3
  // image folder and WebDataset shards take it from their windows' and images' mean size.
  void smallReadsGoByTheBytesOfParts() {
    PartOptions p;  // 8 MiB x 4
    QCOMPARE(readsInFlight(p, 45000), kMaxReadsInFlight);
    p.partSize = 65536;
    p.maxInflight = 2;
    QCOMPARE(readsInFlight(p, 16384), 8);
    QCOMPARE(readsInFlight(p, 1 << 20), 2);  // larger than a part
    QCOMPARE(readsInFlight(p, 0), 2);
    p.maxInflight = 100;
    QCOMPARE(readsInFlight(p, 10), 100);
    p.maxInflight = 2;
    p.cache = PartCache::at(tmp_.filePath("inflight-cache").toStdString(), 1 << 30);
    QCOMPARE(readsInFlight(p, 16384), 2);

    LoaderOptions o;
    o.max_inflight_parts = 1;
    o.part_size = 4096;
    const std::string tokens = "tokens:" + servers_.httpUrl("tokens/tokens.bin").toStdString() + ",ctx=64";
    QCOMPARE(openDataset(tokens, o)->parallelReads(), 4096 / 130);  // 65 u16 tokens a window
    o.max_inflight_parts = 2;
    QCOMPARE(openDataset(tokens, o)->parallelReads(), 2 * 4096 / 130);
    o.part_size = 8 << 20;
    QCOMPARE(openDataset(tokens, o)->parallelReads(), kMaxReadsInFlight);
    LoaderOptions cached = o;
    cached.cache_dir = tmp_.filePath("inflight-cache").toStdString();
    QCOMPARE(openDataset(tokens, cached)->parallelReads(), 1);  // cached windows are memory reads

    // The photos' mean size, as the S3 listing gives it (the files uploaded).
    std::uint64_t bytes = 0, files = 0;
    for (QDirIterator it(tmp_.filePath("photos"), QDir::Files, QDirIterator::Subdirectories); it.hasNext(); ++files)
      bytes += static_cast<std::uint64_t>(QFileInfo(it.next()).size());
    QVERIFY(files > 0 && bytes / files > 16384 && bytes / files < (1 << 20));
    LoaderOptions images = o;
    images.transforms = "Resize(40),CenterCrop(32),ToDtype(u8)";
    images.part_size = 1 << 20;
    const int byMean = static_cast<int>(2 * (1 << 20) / (bytes / files));
    QVERIFY(byMean > 2 && byMean < kMaxReadsInFlight);
    QCOMPARE(openDataset("imagefolder:" + s3("photos/").toStdString(), images)->parallelReads(), byMean);
    // A WebDataset sample reads its image and its .cls: a little more than the image.
    const std::string shards = "wds:" + servers_.httpUrl("shards/train-{000000..000003}.tar").toStdString();
    const int wds = openDataset(shards, images)->parallelReads();
    QVERIFY2(wds > 2 && wds <= byMean, qPrintable(QString::number(wds)));
    images.part_size = 8 << 20;
    QCOMPARE(openDataset(shards, images)->parallelReads(), kMaxReadsInFlight);
    QCOMPARE(openDataset("wds:" + (shards_ + "/train-{000000..000003}.tar").toStdString(), images)->parallelReads(), 1);
  }

  // An epoch reads a remote dataset's batch in one call, its windows at once -- more than
  // max_inflight_parts, as small windows go by bytes (the proxy sees them overlap) -- even with no
  // worker thread; skip_bad_samples reads sample by sample. (One window a request: S3, and servers
  // that serve one range a GET; over nginx a batch is one request, batchesGoAsSeveralRangesARequest.)
  void epochsFetchABatchInParallel() {
    ScopedEnv single("STOKER_HTTP_RANGES_PER_REQUEST", "1");
    LoaderOptions o;
    o.batch_size = 8;
    o.num_workers = 0;
    o.max_inflight_parts = 2;
    o.sampler_type = SamplerType::Sequential;
    o.shuffle = false;
    auto local = openDataset("tokens:" + (servers_.www() + "/tokens/tokens.bin").toStdString() + ",ctx=64", o);
    auto remote = openDataset("tokens:" + servers_.httpUrl("tokens/tokens.bin").toStdString() + ",ctx=64", o);
    QCOMPARE(remote->parallelReads(), kMaxReadsInFlight);
    QCOMPARE(local->parallelReads(), 1);
    auto overlap = [&](const LoaderOptions& options, int& most) {
      QVERIFY(servers_.fault(true, "", 0, 30));  // 30 ms a request: parallel ones overlap for sure
      servers_.takeLog(true);
      Loader loader(remote, options, DeviceSpec::parse("cpu"));
      auto epoch = loader.epoch(0);
      std::vector<at::Tensor> inputs;
      for (int b = 0; b < 3; ++b) {
        auto batch = epoch.next();
        QVERIFY(batch.has_value());
        inputs.push_back(batch->tensors[0].clone());
      }
      epoch.stop();
      const std::vector<std::int64_t> first{0, 1, 2, 3, 4, 5, 6, 7};
      QVERIFY(at::equal(inputs[0], readAll(*local, first)[0]));
      most = 0;
      const QJsonArray log = servers_.takeLog(true);
      for (const auto& e : log) most = std::max(most, e.toArray()[5].toInt());
      if (qEnvironmentVariableIsSet("STOKER_TEST_DEBUG")) qInfo("%s", QJsonDocument(log).toJson(QJsonDocument::Compact).constData());
      QVERIFY(servers_.fault(true, "", 0, 0));
    };
    int most = 0;
    overlap(o, most);
    QVERIFY2(most > o.max_inflight_parts, qPrintable(QString::number(most)));
    LoaderOptions skip = o;
    skip.skip_bad_samples = true;
    overlap(skip, most);
    QCOMPARE(most, 1);  // one sample at a time, so a bad one can be named and skipped
  }

  // Over HTTP a batch of token windows goes as the ranges of one request (nginx answers
  // multipart/byteranges), windows that touch joined into one range: an epoch of consecutive
  // windows asks for each batch as one range. A reply dropped or cut short is resumed for what
  // did not arrive; a server that answers several ranges with the whole object (200) is read one
  // range a request from then on, one that serves fewer than asked is asked for what it serves;
  // S3 (one range a GET) never gets several;
  // STOKER_HTTP_RANGES_PER_REQUEST=1 reads a window a request.
  void batchesGoAsSeveralRangesARequest() {
    LoaderOptions o;
    const std::string http = "tokens:" + servers_.httpUrl("tokens/tokens.bin").toStdString() + ",ctx=64";
    auto local = openDataset("tokens:" + (servers_.www() + "/tokens/tokens.bin").toStdString() + ",ctx=64", o);
    std::vector<std::int64_t> idx;  // 100 windows: scattered, nine neighbours (they share a token), one twice
    for (std::int64_t k = 0; k < 90; ++k) idx.push_back((k * 7919) % local->size());
    for (std::int64_t k = 0; k < 9; ++k) idx.push_back(500 + k);
    idx.push_back(idx[3]);
    const auto expected = readAll(*local, idx);
    struct Asked {
      int requests = 0, ranges = 0, most = 0, status200 = 0, singles = 0;
    };
    auto asked = [&](bool viaHttp) {
      Asked a;
      for (const auto& e : servers_.takeLog(viaHttp)) {
        const QString range = e.toArray()[2].toString();
        if (range == "bytes=0-0") continue;  // an open
        const int n = static_cast<int>(range.count(',')) + 1;
        ++a.requests;
        a.ranges += n;
        a.most = std::max(a.most, n);
        a.status200 += e.toArray()[3].toInt() == 200;
        a.singles += n == 1;
      }
      return a;
    };
    // The ranges the batch needs: window i is bytes [128 i, 128 i + 130), and windows that touch join.
    std::set<std::int64_t> starts(idx.begin(), idx.end());
    int joined = 0;
    std::int64_t end = -1;
    for (const std::int64_t i : starts) {
      joined += 128 * i > end;
      end = 128 * i + 130;
    }
    QVERIFY(joined > 64 && joined < 92);  // 500..508 joined, idx[3] asked once
    servers_.takeLog(true);
    {
      auto remote = openDataset(http, o);
      QVERIFY(sameTensors(readAll(*remote, idx), expected));
      const Asked a = asked(true);
      QCOMPARE(a.requests, 2);  // 64 ranges and the rest
      QCOMPARE(a.most, rangesPerRequest());
      QCOMPARE(a.ranges, joined);
    }
    for (const char* mode : {"drop", "short", "status:503"}) {
      auto remote = openDataset(http, o);
      servers_.takeLog(true);
      const std::uint64_t retries = netCounters().retries;
      QVERIFY(servers_.fault(true, mode, 1));
      QVERIFY2(sameTensors(readAll(*remote, idx), expected), mode);
      QCOMPARE(netCounters().retries - retries, std::uint64_t(1));
      const Asked a = asked(true);
      QCOMPARE(a.requests, 3);
      if (std::string(mode) != "status:503") QVERIFY2(a.ranges < joined + 64, mode);  // the retry asked for what was missing only
    }
    {
      auto remote = openDataset(http, o);
      servers_.takeLog(true);
      QVERIFY(servers_.fault(true, "ignore_range", 1));
      QVERIFY(sameTensors(readAll(*remote, idx), expected));
      QVERIFY(servers_.fault(true, "", 0));
      const Asked a = asked(true);
      QCOMPARE(a.status200, 1);
      QCOMPARE(a.singles, 100);  // then a window a request
      QVERIFY(a.requests == 101 || a.requests == 102);  // the other request of several ranges, unless the decline came first
      const std::vector<std::int64_t> later{1, 100, 200};
      QVERIFY(sameTensors(readAll(*remote, later), readAll(*local, later)));
      const Asked b = asked(true);
      QCOMPARE(b.requests, 3);  // declined once: one range a request from then on
      QCOMPARE(b.most, 1);
    }
    {  // a server that serves the first 10 ranges of a request: the rest asked for at once (no retry
       // counted, no backoff), and later requests ask for 10
      auto remote = openDataset(http, o);
      servers_.takeLog(true);
      const std::uint64_t retries = netCounters().retries;
      QVERIFY(servers_.fault(true, "first_ranges:10", 1000));
      QVERIFY(sameTensors(readAll(*remote, idx), expected));
      QCOMPARE(netCounters().retries, retries);
      const Asked a = asked(true);
      QVERIFY2(a.requests >= (joined + 9) / 10 && a.requests <= (joined + 9) / 10 + 2, qPrintable(QString::number(a.requests)));
      QVERIFY(sameTensors(readAll(*remote, idx), expected));
      QVERIFY(servers_.fault(true, "", 0));
      const Asked b = asked(true);
      QCOMPARE(b.most, 10);
      QCOMPARE(b.requests, (joined + 9) / 10);
    }
    {  // a sequential epoch: each batch of consecutive windows is one range
      LoaderOptions seq;
      seq.batch_size = 8;
      seq.num_workers = 0;
      seq.sampler_type = SamplerType::Sequential;
      seq.shuffle = false;
      auto remote = openDataset(http, seq);
      servers_.takeLog(true);
      Loader loader(remote, seq, DeviceSpec::parse("cpu"));
      auto epoch = loader.epoch(0);
      auto batch = epoch.next();
      QVERIFY(batch.has_value());
      QVERIFY(at::equal(batch->tensors[0], readAll(*local, {0, 1, 2, 3, 4, 5, 6, 7})[0]));
      epoch.stop();
      bool first = false;
      for (const auto& e : servers_.takeLog(true)) first = first || e.toArray()[2].toString() == "bytes=0-1025";  // 8 windows of 130 bytes, 128 apart
      QVERIFY(first);
    }
    // `stoker bench` says what it asked the network for: about a request a batch, against one a window.
    // Its telemetry records carry the same counters (the Monitor, Prometheus).
    for (const QString per : {"64", "1"}) {
      const QString records = tmp_.filePath("net-telemetry-" + per + ".jsonl");
      const auto r = runStoker({"bench", "--dataset", QString::fromStdString(http), "--batch-size", "32", "--epochs", "1", "--json", "--quiet",
                                "--publish", "file:" + records},
                               {"STOKER_HTTP_RANGES_PER_REQUEST=" + per});
      QVERIFY2(r.exitCode == 0, r.err.constData());
      const QJsonObject net = QJsonDocument::fromJson(r.out).object()["network"].toObject();
      const double perBatch = net["requests_per_batch"].toDouble();
      QVERIFY2(per == "64" ? perBatch > 0.9 && perBatch < 1.5 : perBatch >= 31, qPrintable(per + ": " + QString::number(perBatch)));
      QVERIFY(net["bytes"].toDouble() >= 0.9 * 130 * static_cast<double>(local->size()));  // every window's 130 bytes, neighbours joined
      QCOMPARE(net["retries"].toInt(), 0);
      const QList<QByteArray> lines = readFile(records).trimmed().split('\n');
      const QJsonObject last = QJsonDocument::fromJson(lines.last()).object();
      QVERIFY2(last["net_requests"].toDouble() > 0 && last["net_requests"].toDouble() <= net["requests"].toDouble(), lines.last().constData());
      QVERIFY(last["net_bytes"].toDouble() > 0);
      QCOMPARE(last["net_retries"].toInt(-1), 0);
    }
    const auto text = runStoker({"bench", "--dataset", QString::fromStdString(http), "--batch-size", "32", "--epochs", "1"});
    QVERIFY2(text.out.contains(" a batch), ") && text.out.contains("network: "), text.out.constData());
    servers_.takeLog(false);
    auto overS3 = openDataset("tokens:" + s3("tokens/tokens.bin").toStdString() + ",ctx=64", o);
    QVERIFY(sameTensors(readAll(*overS3, idx), expected));
    QCOMPARE(asked(false).most, 1);
    {
      ScopedEnv single("STOKER_HTTP_RANGES_PER_REQUEST", "1");
      auto remote = openDataset(http, o);
      servers_.takeLog(true);
      QVERIFY(sameTensors(readAll(*remote, idx), expected));
      const Asked a = asked(true);
      QCOMPARE(a.most, 1);
      QCOMPARE(a.requests, 100);
    }
    {
      ScopedEnv bad("STOKER_HTTP_RANGES_PER_REQUEST", "0");
      auto remote = openDataset(http, o);
      NAMED(expectBadInput([&] { readAll(*remote, idx); }, {"STOKER_HTTP_RANGES_PER_REQUEST=0", "must be 1-256"}));
    }
  }

  // The multipart/byteranges parser on replies nginx would not send: every part checked before a
  // byte is copied, bytes outside the asked ranges skipped, a runaway reply stopped.
  void multipartRepliesAreCheckedPartByPart() {
    QCOMPARE(byterangesBoundary("multipart/byteranges; boundary=00000000000000000001"), std::string("00000000000000000001"));
    QCOMPARE(byterangesBoundary("Multipart/ByteRanges;boundary=\"a b\";x=y"), std::string("a b"));
    QCOMPARE(byterangesBoundary("multipart/byteranges; boundary=THIS_STRING; charset=x"), std::string("THIS_STRING"));
    QCOMPARE(byterangesBoundary("application/octet-stream"), std::string());
    const QByteArray object = randomBytes(1000, 11);
    struct Part {
      int first, last;
      const char* contentRange = nullptr;  // else bytes FIRST-LAST/1000
    };
    auto body = [&](const std::vector<Part>& parts, const std::string& preamble = "\r\n") {
      std::string out = preamble;
      for (const Part& p : parts) {
        out += "--BND\r\nContent-Type: application/octet-stream\r\n";
        if (!p.contentRange || *p.contentRange)
          out += "Content-Range: " + (p.contentRange ? std::string(p.contentRange) : "bytes " + std::to_string(p.first) + "-" + std::to_string(p.last) + "/1000") + "\r\n";
        out += "\r\n" + object.mid(p.first, p.last - p.first + 1).toStdString() + "\r\n";
      }
      return out + "--BND--\r\nepilogue";
    };
    // Feeds `reply` (in pieces of `step` bytes) for ranges [10,20) [100,150) [900,1000); returns the refusal.
    std::vector<std::uint8_t> dst(160);
    std::vector<ByteRange> ranges;
    auto feed = [&](const std::string& reply, std::size_t step, const char* type = "multipart/byteranges; boundary=BND",
                    const char* contentRange = "") {
      std::fill(dst.begin(), dst.end(), 0);
      ranges = {{10, 10, dst.data(), 0}, {100, 50, dst.data() + 10, 0}, {900, 100, dst.data() + 60, 0}};
      MultipartRangeReply r(ranges);
      std::string why = r.begin(type, contentRange);
      for (std::size_t at = 0; why.empty() && at < reply.size(); at += step) why = r.feed(reply.data() + at, std::min(step, reply.size() - at));
      return why;
    };
    auto filled = [&] {
      return QByteArray(reinterpret_cast<const char*>(dst.data()), 160) == object.mid(10, 10) + object.mid(100, 50) + object.mid(900, 100);
    };
    for (const std::size_t step : {std::size_t(1), std::size_t(7), std::size_t(100000)}) {
      QCOMPARE(feed(body({{10, 19}, {100, 149}, {900, 999}}), step), std::string());
      QVERIFY(filled());
      QCOMPARE(feed(body({{900, 999}, {10, 19}, {100, 149}}, "preamble\r\n"), step), std::string());  // any order, a preamble
      QVERIFY(filled());
      QCOMPARE(feed(body({{5, 160}, {900, 999}}), step), std::string());  // joined, with bytes around the ranges
      QVERIFY(filled());
    }
    MultipartRangeReply counted(ranges);
    QCOMPARE(counted.got(), std::size_t(160));
    QCOMPARE(counted.wanted(), std::size_t(160));
    // What a retry asks for: the ranges, less what arrived.
    QCOMPARE(feed(body({{10, 19}, {100, 119}}), 1000), std::string());
    QCOMPARE(rangesStillWanted(ranges), std::string("120-149,900-999"));
    {  // a whole reply with fewer parts than ranges (lighttpd serves 10) says so; a cut one does not
      const std::string two = body({{10, 19}, {100, 149}});
      MultipartRangeReply r(ranges = {{10, 10, dst.data(), 0}, {100, 50, dst.data() + 10, 0}, {900, 100, dst.data() + 60, 0}});
      QCOMPARE(r.begin("multipart/byteranges; boundary=BND", ""), std::string());
      QCOMPARE(r.feed(two.data(), two.size() - 12), std::string());
      QVERIFY(!r.closed());
      QCOMPARE(r.feed(two.data() + two.size() - 12, 12), std::string());
      QVERIFY(r.closed());
      QCOMPARE(r.parts(), 2);
      QVERIFY(!r.onePart());
    }
    // One part alone (no multipart type): what its Content-Range says, and the request knows it was one.
    {
      std::fill(dst.begin(), dst.end(), 0);
      ranges = {{10, 10, dst.data(), 0}, {100, 50, dst.data() + 10, 0}};
      MultipartRangeReply r(ranges);
      QCOMPARE(r.begin("application/octet-stream", "bytes 10-19/1000"), std::string());
      QCOMPARE(r.feed(object.constData() + 10, 10), std::string());
      QVERIFY(r.onePart());
      QCOMPARE(r.got(), std::size_t(10));
      QVERIFY(!r.feed("x", 1).empty());  // past its Content-Range
      QVERIFY(!MultipartRangeReply(ranges).begin("application/octet-stream", "").empty());
    }
    // Refused, each with its reason.
    auto refused = [&](const std::string& reply, const char* words) {
      const std::string why = feed(reply, 13);
      QVERIFY2(why.find(words) != std::string::npos, why.c_str());
    };
    refused(body({{10, 19, ""}}), "has no Content-Range");
    refused(body({{10, 19, "bytes 10-1000/1000"}}), "is not a range of the object");
    refused(body({{10, 19, "bytes ten-19/1000"}}), "is not \"bytes FIRST-LAST/SIZE\"");
    refused(body({{10, 19, "bytes 10-19/1000"}, {100, 149, "bytes 100-149/2000"}}), "the object has 2000 bytes");
    QCOMPARE(feed(body({{10, 19}, {10, 19}}), 5), std::string());  // sent again: kept once
    QCOMPARE(MultipartRangeReply(ranges).got(), std::size_t(10));
    refused(body({{12, 19}}), "skipped bytes 10-11");
    refused(std::string(20000, 'x'), "no part delimiter and headers");
    // One part spanning far more than the ranges asked (a server joining scattered ranges): stopped.
    {
      std::vector<std::uint8_t> two(20);
      ranges = {{0, 10, two.data(), 0}, {10000000, 10, two.data() + 10, 0}};
      MultipartRangeReply r(ranges);
      QCOMPARE(r.begin("application/octet-stream", "bytes 0-10000009/20000000"), std::string());
      const std::string zeros(1 << 16, '\0');
      std::string why;
      for (int k = 0; k < 4 && why.empty() && !r.overspent(); ++k) why = r.feed(zeros.data(), zeros.size());
      QCOMPARE(why, std::string());
      QVERIFY(r.overspent());
    }
  }

  // cache_dir: the first reads keep whole aligned parts on disk; the dataset opened again (the next
  // epoch of a new process, another rank of the node) asks the server only for the open.
  void theCacheServesLaterReads() {
    const QString dir = tmp_.filePath("cache");
    LoaderOptions o;
    o.part_size = 64 << 10;
    o.max_inflight_parts = 3;
    o.cache_dir = dir.toStdString();
    auto local = openDataset("tokens:" + (servers_.www() + "/tokens/tokens.bin").toStdString() + ",ctx=64", o);
    const auto idx = spreadIndices(local->size(), 400);
    const auto want = readAll(*local, idx);
    const qint64 fileBytes = QFileInfo(servers_.www() + "/tokens/tokens.bin").size();
    const int partsPerObject = static_cast<int>((fileBytes + o.part_size - 1) / o.part_size);
    for (bool http : {true, false}) {
      const std::string spec = "tokens:" + (http ? servers_.httpUrl("tokens/tokens.bin") : s3("tokens/tokens.bin")).toStdString() + ",ctx=64";
      servers_.takeLog(http);
      auto first = openDataset(spec, o);
      QVERIFY(sameTensors(readAll(*first, idx), want));
      const QJsonArray fetched = servers_.takeLog(http);
      QVERIFY2(fetched.size() >= 2 && fetched.size() <= 1 + partsPerObject, qPrintable(QString::number(fetched.size())));
      auto again = openDataset(spec, o);
      QVERIFY(sameTensors(readAll(*again, idx), want));
      const QJsonArray reread = servers_.takeLog(http);
      QCOMPARE(reread.size(), 1);  // the open (size and ETag), no part
    }
    const CacheFolder c = cacheFolder(dir);
    QCOMPARE(c.temps, 0);
    QVERIFY2(c.parts >= 2 && c.parts <= 2 * partsPerObject, qPrintable(QString::number(c.parts)));
    const PartCacheCounters n = PartCache::at(o.cache_dir, 0)->counters();
    QVERIFY(n.misses >= 2 && n.hits >= 2);
    QCOMPARE(n.writeFailures, std::uint64_t(0));
    // A part whose file lost its bytes (a power cut before they reached the disk) is fetched again.
    const QString damaged = QDir(dir).entryInfoList({"*.part"}, QDir::Files).first().filePath();
    QVERIFY(writeFile(damaged, "short"));
    auto healed = openDataset("tokens:" + servers_.httpUrl("tokens/tokens.bin").toStdString() + ",ctx=64", o);
    auto healedS3 = openDataset("tokens:" + s3("tokens/tokens.bin").toStdString() + ",ctx=64", o);
    QVERIFY(sameTensors(readAll(*healed, idx), want));
    QVERIFY(sameTensors(readAll(*healedS3, idx), want));
    QVERIFY(QFileInfo(damaged).size() > 5);
    // A power cut can keep a part's rename and size but not its bytes (its blocks were reserved:
    // zeros). Each part carries its checksum and the host and boot that wrote it as an xattr; one
    // this host wrote in an earlier boot is checked before it is served, and fetched again when its
    // bytes differ (STOKER_CACHE_VERIFY=always: every part with a checksum).
    const QStringList parts = QDir(dir).entryList({"*.part"}, QDir::Files, QDir::Name);
    QVERIFY(parts.size() >= 2);
    const QString zeroed = QDir(dir).filePath(parts[0]), zeroedNow = QDir(dir).filePath(parts[1]);
    char attribute[512] = {};
    const ssize_t got = ::getxattr(QFile::encodeName(zeroed).constData(), "user.stoker.xxh3", attribute, sizeof attribute - 1);
    if (got < 0 && errno == ENOTSUP) {
      qInfo("this file system takes no user xattrs: the cache's power-cut check is not tested here");
    } else {
      QFile bootId("/proc/sys/kernel/random/boot_id");
      QVERIFY(bootId.open(QIODevice::ReadOnly));
      const QByteArray boot = bootId.readAll().trimmed();
      const QByteArray value(attribute, static_cast<int>(got));
      QCOMPARE(value.mid(16), " " + QSysInfo::machineHostName().toUtf8() + " " + boot);  // "<xxh3> <host> <boot>"
      const auto zero = [](const QString& path) {
        const QByteArray good = readFile(path);
        QFile f(path);  // rewritten in place: the file keeps its name, size and attribute
        return f.open(QIODevice::ReadWrite) && f.write(QByteArray(good.size(), '\0')) == good.size() ? good : QByteArray();
      };
      const auto readBoth = [&] {
        for (const std::string& url : {servers_.httpUrl("tokens/tokens.bin").toStdString(), s3("tokens/tokens.bin").toStdString()}) {
          auto checked = openDataset("tokens:" + url + ",ctx=64", o);  // the parts are the two objects'
          if (!sameTensors(readAll(*checked, idx), want)) return false;
        }
        return true;
      };
      const std::uint64_t damaged = PartCache::at(o.cache_dir, 0)->counters().damaged;
      // Written by this host in an earlier boot, then its bytes lost.
      const QByteArray good = zero(zeroed);
      QVERIFY(!good.isEmpty());
      const QByteArray earlier = value.left(16) + " " + QSysInfo::machineHostName().toUtf8() + " 00000000-0000-0000-0000-000000000000";
      QCOMPARE(::setxattr(QFile::encodeName(zeroed).constData(), "user.stoker.xxh3", earlier.constData(), earlier.size(), 0), 0);
      QVERIFY(readBoth());
      QCOMPARE(PartCache::at(o.cache_dir, 0)->counters().damaged - damaged, std::uint64_t(1));
      QVERIFY(readFile(zeroed) == good);  // fetched again, with its checksum
      // Written in this boot: only STOKER_CACHE_VERIFY=always checks it.
      const QByteArray goodNow = zero(zeroedNow);
      QVERIFY(!goodNow.isEmpty());
      {
        ScopedEnv verify("STOKER_CACHE_VERIFY", "always");
        QVERIFY(readBoth());
      }
      QCOMPARE(PartCache::at(o.cache_dir, 0)->counters().damaged - damaged, std::uint64_t(2));
      QVERIFY(readFile(zeroedNow) == goodNow);
    }
    // An unusable folder is named.
    LoaderOptions bad = o;
    bad.cache_dir = (servers_.www() + "/blob.bin/cache").toStdString();
    NAMED(expectError([&] { openDataset("tokens:" + servers_.httpUrl("tokens/tokens.bin").toStdString() + ",ctx=64", bad); },
                      ErrorKind::Io, {"blob.bin/cache", "cache_dir cannot be created"}));
  }

  // Parts of more than one 2 MiB piece are written as they arrive, piece by piece: the bytes and the
  // files are the object's, also when the body breaks halfway and the retry resumes it (the file
  // then gets each byte once), and a later open reads them with no request.
  void cachedPartsStreamInPieces() {
    const QByteArray big = randomBytes((5 << 20) + 777, 9);
    QVERIFY(writeFile(servers_.www() + "/big.bin", big));
    const std::uint64_t partSize = (4 << 20) + 4096;  // two pieces and a bit, then the rest
    for (const bool broken : {false, true}) {
      const QString dir = tmp_.filePath(broken ? "pieces-broken" : "pieces");
      PartOptions parts{static_cast<std::int64_t>(partSize), 2, PartCache::at(dir.toStdString(), 0)};
      auto object = RemoteObject::open(servers_.httpUrl("big.bin").toStdString());
      const std::uint64_t retries = netCounters().retries;
      if (broken) QVERIFY(servers_.fault(true, "drop", 2));  // each part's body cut at its half
      QByteArray got(big.size(), '\0');
      object->read(0, got.data(), static_cast<std::size_t>(got.size()), parts);
      QVERIFY(servers_.fault(true, "", 0));
      QVERIFY(got == big);
      QCOMPARE(netCounters().retries - retries, std::uint64_t(broken ? 2 : 0));
      const CacheFolder c = cacheFolder(dir);
      QCOMPARE(c.parts, 2);
      QCOMPARE(c.temps, 0);
      QCOMPARE(c.bytes, big.size());
      QByteArray files;
      QStringList names = QDir(dir).entryList({"*.part"}, QDir::Files);
      std::sort(names.begin(), names.end(), [](const QString& a, const QString& b) { return a.length() != b.length() ? a.length() < b.length() : a < b; });
      for (const QString& n : names) files += readFile(QDir(dir).filePath(n));  // index 0, then 1
      QVERIFY(files == big);
      // A window across the first part's piece boundary, and one across the parts, from a new open.
      servers_.takeLog(true);
      auto again = RemoteObject::open(servers_.httpUrl("big.bin").toStdString());
      ByteVector scratch;
      for (const std::uint64_t at : {(std::uint64_t(2) << 20) - 100, partSize - 100}) {
        const std::uint8_t* p = again->bytesAt(at, 200, parts, scratch);
        QVERIFY(QByteArray(reinterpret_cast<const char*>(p), 200) == big.mid(static_cast<qsizetype>(at), 200));
      }
      QCOMPARE(servers_.takeLog(true).size(), 1);  // the open: both parts from the folder
    }
  }

  // cache_limit: the least recently used parts go, the folder stays under the limit, reads stay right.
  void theCacheStaysUnderItsLimit() {
    const QString dir = tmp_.filePath("small-cache");
    LoaderOptions o;
    o.part_size = 32 << 10;
    o.cache_dir = dir.toStdString();
    o.cache_limit = 100 << 10;  // three parts
    auto local = openDataset("tokens:" + (servers_.www() + "/tokens/tokens.bin").toStdString() + ",ctx=64", o);
    auto remote = openDataset("tokens:" + servers_.httpUrl("tokens/tokens.bin").toStdString() + ",ctx=64", o);
    const auto idx = spreadIndices(local->size(), 600);
    QVERIFY(sameTensors(readAll(*remote, idx), readAll(*local, idx)));
    const CacheFolder c = cacheFolder(dir);
    QVERIFY2(c.bytes <= o.cache_limit, qPrintable(QString::number(c.bytes)));
    QVERIFY(c.parts >= 1);
    const auto cache = PartCache::at(o.cache_dir, static_cast<std::uint64_t>(o.cache_limit));
    QVERIFY(cache->counters().evicted > 0);
    // Nor do the mappings the dataset keeps pass the limit: an evicted part's disk blocks stay
    // allocated while one holds it (the dataset kept every part it read: a dataset larger than the
    // limit stayed on disk whole). Past it a part serves the read that fetched it, then goes.
    QVERIFY2(cache->heldBytes() > 0 && cache->heldBytes() <= static_cast<std::uint64_t>(o.cache_limit),
             qPrintable(QString::number(cache->heldBytes())));
    QVERIFY(sameTensors(readAll(*remote, idx), readAll(*local, idx)));  // again, from parts kept or not
    remote.reset();
    QCOMPARE(cache->heldBytes(), std::uint64_t(0));
    NAMED(expectBadInput([] { LoaderOptions::builder().cacheLimit(-1).build(); }, {"cache_limit", "got -1"}));
  }

  // Ranks of a node that miss the same parts at once (random token windows): one fetches each part,
  // the others wait for its file (`<part>.lock`), so the node downloads it once. Four PartCaches on
  // one folder stand for four processes: flock's locks belong to open files, not to processes.
  void ranksOfANodeFetchEachPartOnce() {
    const QString dir = tmp_.filePath("one-fetch");
    QVERIFY(QDir().mkpath(dir));
    const QByteArray data = randomBytes(256 << 10, 11);
    QVERIFY(writeFile(servers_.www() + "/one-fetch.bin", data));
    const std::string url = servers_.httpUrl("one-fetch.bin").toStdString();
    servers_.takeLog(true);
    QVERIFY(servers_.fault(true, "", 0, 300));  // every reply 300 ms late: the ranks' misses overlap
    std::vector<QByteArray> got(4, QByteArray(data.size(), '\0'));
    std::vector<std::string> errors(4);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 4; ++r)
      ranks.emplace_back([&, r] {
        try {
          PartOptions parts{64 << 10, 2, std::make_shared<PartCache>(dir.toStdString(), 0)};
          RemoteObject::open(url)->read(0, got[r].data(), static_cast<std::size_t>(got[r].size()), parts);
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    for (std::thread& t : ranks) t.join();
    QVERIFY(servers_.fault(true, "", 0));
    for (int r = 0; r < 4; ++r) {
      QVERIFY2(errors[r].empty(), errors[r].c_str());
      QVERIFY(got[r] == data);
    }
    const QJsonArray log = servers_.takeLog(true);
    QCOMPARE(log.size(), 4 + 4);  // each rank's open, then the four parts once (without the lock: up to 16)
    const CacheFolder c = cacheFolder(dir);
    QCOMPARE(c.parts, 4);
    QCOMPARE(QDir(dir).entryList({"*.lock"}, QDir::Files).size(), 0);  // each holder removed its lock file
  }

  // Parts other processes (the node's other ranks) write count against the limit too: the folder
  // is scanned again after every eighth of the limit this process writes. Before, a process
  // counted only its own writes on top of the folder it found, and 8 ranks filled it to 8x.
  void othersPartsCountAgainstTheLimit() {
    const QString dir = tmp_.filePath("shared-cache");
    const QByteArray data = randomBytes(1 << 20, 9);
    QVERIFY(writeFile(servers_.www() + "/shared-cache.bin", data));
    PartOptions parts{32 << 10, 1, PartCache::at(dir.toStdString(), 1 << 20)};  // the folder is scanned now
    auto o = RemoteObject::open(servers_.httpUrl("shared-cache.bin").toStdString());
    // Another rank's parts, written since: 1.5 MiB, older than this process's.
    for (int i = 0; i < 48; ++i) {
      const QString path = dir + QString("/00000000000000%1-32768-0.part").arg(i, 2, 10, QChar('0'));
      QVERIFY(writeFile(path, QByteArray(32 << 10, 'x')));
      QFile f(path);
      QVERIFY(f.open(QIODevice::ReadWrite));
      QVERIFY(f.setFileTime(QDateTime::currentDateTime().addSecs(-600), QFileDevice::FileModificationTime));
    }
    QVERIFY(cacheFolder(dir).bytes > (1 << 20));
    QByteArray got(512 << 10, '\0');  // 16 parts: more than an eighth of the limit
    o->read(0, got.data(), static_cast<std::size_t>(got.size()), parts);
    QVERIFY(got == data.left(got.size()));
    const CacheFolder c = cacheFolder(dir);
    QVERIFY2(c.bytes <= (1 << 20), qPrintable(QString("%1 bytes in the folder").arg(c.bytes)));
  }


  // A full cache disk costs no sample (the parts that do not fit come from the network, said once),
  // and a process killed while writing a part leaves nothing that a later run reads as a part.
  void aFullOrKilledCacheCostsNoSample() {
#ifndef STOKER_HAVE_PYTHON_PACKAGE
    QSKIP("this build has no Python package (stoker_c)");
#endif
    const QString script = R"(
import sys, torch, stoker
def batches(spec, **kw):
    return [b for b in stoker.Loader(spec, batch_size=16, shuffle=True, seed=5, num_workers=2, **kw)]
local = batches('tokens:' + sys.argv[1] + ',ctx=64')
remote = batches('tokens:' + sys.argv[2] + ',ctx=64', cache_dir=sys.argv[3], part_size=65536)
assert len(local) == len(remote) > 10, (len(local), len(remote))
for a, b in zip(local, remote):
    assert all(torch.equal(x, y) for x, y in zip(a, b))
print(len(remote), 'batches alike')
)";
    auto run = [&](const QString& dir, const char* hook, const QByteArray& bytes) {
      QProcess p;
      QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
      e.insert("PYTHONPATH", QStringLiteral(STOKER_BUILD_PYTHON));
      e.insert(hook, bytes);
      p.setProcessEnvironment(e);
      p.start(QStringLiteral(STOKER_PYTHON), {"-c", script, servers_.www() + "/tokens/tokens.bin", servers_.httpUrl("tokens/tokens.bin"), dir});
      p.waitForFinished(120000);
      return std::tuple{p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString(p.readAllStandardError())};
    };
    // ENOSPC after one part and a half: the second part is not kept, every batch is right.
    const QString full = tmp_.filePath("full-cache");
    auto [code, err] = run(full, "STOKER_FAULT_ENOSPC_AFTER", "100000");
    QVERIFY2(code == 0, qPrintable(err));
    QVERIFY2(err.contains("No space left on device") && err.count("cache_dir") == 1, qPrintable(err));
    QCOMPARE(cacheFolder(full).parts, 1);
    QCOMPARE(cacheFolder(full).temps, 0);
    // SIGKILL in the middle of the second part: its temporary file stays, no part is half there,
    // and the next run reads right and completes the cache.
    const QString killed = tmp_.filePath("killed-cache");
    std::tie(code, err) = run(killed, "STOKER_FAULT_CRASH_AFTER", "100000");
    QCOMPARE(code, -1);
    QVERIFY(cacheFolder(killed).parts <= 1);
    QVERIFY(cacheFolder(killed).temps >= 1);
    std::tie(code, err) = run(killed, "STOKER_NO_HOOK", "");
    QVERIFY2(code == 0, qPrintable(err));
    const qint64 fileBytes = QFileInfo(servers_.www() + "/tokens/tokens.bin").size();
    QVERIFY(cacheFolder(killed).parts >= fileBytes / 65536);
  }

  // The proxy killed mid-epoch and back a moment later: the epoch completes with every sample
  // once and as stored; a proxy that stays away fails the read with the named error. Over S3 too,
  // where each retry is signed again (the proxy checks every signature) and windows go a range a
  // request.
  void aKilledProxyCostsNoSample_data() {
    QTest::addColumn<bool>("http");
    QTest::newRow("http") << true;
    QTest::newRow("s3") << false;
  }
  void aKilledProxyCostsNoSample() {
    QFETCH(bool, http);
    const auto url = [&](const QString& path) { return (http ? servers_.httpUrl(path) : s3(path)).toStdString(); };
    ScopedEnv attempts("STOKER_HTTP_ATTEMPTS", "12");
    ScopedEnv backoff("STOKER_HTTP_BACKOFF_MS", "100");
    LoaderOptions o;
    o.max_inflight_parts = 2;
    auto local = openDataset("tokens:" + (servers_.www() + "/tokens/tokens.bin").toStdString() + ",ctx=32", o);
    auto remote = openDataset("tokens:" + url("tokens/tokens.bin") + ",ctx=32", o);
    const std::int64_t n = std::min<std::int64_t>(remote->size(), 1200);
    std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = (i * 7919) % remote->size();
    std::vector<at::Tensor> got;
    std::atomic<std::int64_t> done{0};
    std::string failure;
    std::thread reader([&] {
      try {
        std::vector<at::Tensor> parts[2];
        for (std::int64_t at = 0; at < n; at += 8, done = at) {
          const std::vector<std::int64_t> batch(idx.begin() + at, idx.begin() + std::min(n, at + 8));
          const auto b = readAll(*remote, batch);
          for (int f = 0; f < 2; ++f) parts[f].push_back(b[static_cast<std::size_t>(f)]);
        }
        for (int f = 0; f < 2; ++f) got.push_back(at::cat(parts[f]));
      } catch (const std::exception& e) {
        failure = e.what();
      }
    });
    while (done < n / 3 && failure.empty()) QThread::msleep(5);
    servers_.killProxy(http);
    QThread::msleep(800);
    QString error;
    QVERIFY2(servers_.restartProxy(http, &error), qPrintable(error));
    reader.join();
    QVERIFY2(failure.empty(), failure.c_str());
    QVERIFY(sameTensors(got, readAll(*local, idx)));
    // Away for good: the named error after the budget.
    ScopedEnv few("STOKER_HTTP_ATTEMPTS", "3");
    servers_.killProxy(http);
    NAMED(expectError([&] { readAll(*remote, {1, 2, 3}); }, ErrorKind::Network, {"tokens.bin", "after 3 attempts"}));
    // skip_bad_samples skips a sample that cannot be read, not a network that is gone: every later
    // sample would be lost the same way. The epoch fails with the named error instead.
    {
      LoaderOptions skip;
      skip.skip_bad_samples = true;
      skip.num_workers = 0;
      skip.batch_size = 4;
      Loader loader(remote, skip, DeviceSpec::parse("cpu"));
      NAMED(expectError(
          [&] {
            auto epoch = loader.epoch(0);
            while (epoch.next()) {
            }
          },
          ErrorKind::Network, {"tokens.bin", "after 3 attempts"}));
    }
    LoaderOptions images;
    images.transforms = "Resize(40),CenterCrop(32)";
    NAMED(expectError([&] { openDataset("wds:" + url("shards/train-{000000..000001}.tar"), images); },
                      ErrorKind::Network, {"train-000000.tar", "Couldn't connect", "after 3 attempts"}));
    QVERIFY2(servers_.restartProxy(http, &error), qPrintable(error));
  }
};

QTEST_GUILESS_MAIN(TestRemote)
#include "tst_remote.moc"
