// The Monitor workspace: listens for telemetry from several ranks at once,
// keeps one table row per rank and device with its input-bound verdict,
// plots every rank's device, follows a telemetry file (skipping bad lines),
// reports a bad address readably, and shows the demo trainer end to end.
// For real jobs: 256 ranks publishing every 100 ms over 256 connections stay
// smooth (heat map, aggregate band, table); the straggler is named in the
// banner and the table; a session saves, replays and exports (PNG, CSV); the
// Monitor dials a publisher that listens; absent figures show as "—".
#include <QtTest>

#include <QFile>
#include <QLineEdit>
#include <QSettings>
#include <QSignalSpy>
#include <cmath>
#include <QTabWidget>
#include <QTableWidget>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <atomic>
#include <thread>

#include "event_loop_probe.h"
#include "wait_for.h"
#include "monitor_workspace.h"
#include "rank_heat_map.h"
#include "telemetry/telemetry_publisher.h"
#include "telemetry/telemetry_record.h"
#include "stage_breakdown_view.h"
#include "telemetry_plots.h"
#include "telemetry_source.h"
#include "test_support.h"

using namespace stoker;
using stoker::test::EventLoopProbe;
using stoker::test::saveScreenshot;
using stoker::test::waitFor;
using stoker::test::waitForCount;
using stoker::test::waitUntil;

namespace {

TelemetryRecord record(int rank, const std::string& device, double waitMs, double stepMs, double time) {
  TelemetryRecord r;
  r.time = time;
  r.host = "node";
  r.pid = 100 + rank;
  r.rank = rank;
  r.device = device;
  r.step = 5;
  r.steps_total = 100;
  r.samples_per_s = 1000 * (rank + 1);
  r.data_wait_ms = waitMs;
  r.step_ms = stepMs;
  r.mode = "resident";
  r.prefetch_depth = 4;
  r.mem_total = 1 << 30;
  return r;
}

// `ranks` connections to 127.0.0.1:port, each sending rank r's record every `periodMs` from one
// thread (a real job has a process per rank; 256 threads here would measure the machine, not
// the Monitor). Rank `slow` waits 60 % of its iterations, the others 2 %.
class RankFeeder {
 public:
  RankFeeder(int port, int ranks, int periodMs, int slow) {
    for (int r = 0; r < ranks; ++r) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) fds_.push_back(fd);
      else close(fd);
    }
    thread_ = std::thread([this, periodMs, slow] {
      const double start = 1.7e9;
      for (int tick = 0; !quit_; ++tick) {
        for (std::size_t r = 0; r < fds_.size(); ++r) {
          const int rank = static_cast<int>(r);
          TelemetryRecord rec = record(rank, "cuda:" + std::to_string(rank % 8), rank == slow ? 30 : 0.4,
                                       rank == slow ? 20 : 19.6, start + tick * periodMs / 1000.0);
          rec.host = "node-" + std::to_string(rank / 8);
          rec.pid = 1000 + rank;
          rec.step = tick;
          const std::string line = telemetryToJson(rec) + "\n";
          // Never blocks: a full socket drops the line, as a real publisher does.
          if (send(fds_[r], line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT) > 0) ++sent_;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(periodMs));
      }
    });
  }
  ~RankFeeder() {
    quit_ = true;
    thread_.join();
    for (int fd : fds_) close(fd);
  }
  int connections() const { return static_cast<int>(fds_.size()); }
  long long sent() const { return sent_; }

 private:
  std::vector<int> fds_;
  std::atomic<bool> quit_{false};
  std::atomic<long long> sent_{0};
  std::thread thread_;
};

bool listenOnAnyPort(MonitorWorkspace& w) {
  QSignalSpy listening(&w, &MonitorWorkspace::listening);
  w.setAddress("127.0.0.1:0");
  w.listen();
  return waitUntil([&] { return !listening.isEmpty(); });
}

}  // namespace

class TestMonitorWorkspace : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private Q_SLOTS:
  void initTestCase() {
    QCoreApplication::setOrganizationName("StokerTest");
    QStandardPaths::setTestModeEnabled(true);
  }

  void classifiesEveryRankFromManyPublishers() {
    MonitorWorkspace w;
    w.resize(1100, 700);
    w.show();
    QSignalSpy listening(&w, &MonitorWorkspace::listening);
    w.setAddress("127.0.0.1:0");
    w.listen();
    QVERIFY(waitUntil([&] { return !listening.isEmpty(); }));
    const std::string address = "127.0.0.1:" + std::to_string(w.port());
    EventLoopProbe probe;
    probe.start();
    {
      // Three ranks, each its own connection: fine (1 %), moderate (10 %), input-bound (30 %).
      TelemetryPublisher r0({address}), r1({address}), r2({address});
      const double now = 1.7e9;
      for (int i = 0; i < 20; ++i) {
        r0.onRecord(record(0, "cuda:0", 0.1, 9.9, now + i * 0.05));
        r1.onRecord(record(1, "cuda:0", 1.0, 9.0, now + i * 0.05));
        r2.onRecord(record(2, "cuda:1", 3.0, 7.0, now + i * 0.05));
        r2.onRecord(record(2, "cuda:0", 0.0, 10.0, now + i * 0.05));
        QTest::qWait(5);
      }
      for (auto* p : {&r0, &r1, &r2}) p->flush(2000);
    }
    QVERIFY2(waitUntil([&] { return w.table()->rowCount() == 4 && w.verdict(2, "cuda:1") == "input-bound"; }),
             qPrintable(w.statusText()));
    probe.stop();
    QCOMPARE(w.verdict(0, "cuda:0"), QString("fine"));
    QCOMPARE(w.verdict(1, "cuda:0"), QString("moderate"));
    QCOMPARE(w.verdict(2, "cuda:1"), QString("input-bound"));
    QCOMPARE(w.verdict(2, "cuda:0"), QString("fine"));
    QCOMPARE(w.table()->item(0, 0)->text(), QString("0"));  // ordered by rank
    QCOMPARE(w.table()->item(3, 1)->text(), QString("cuda:1"));
    QCOMPARE(w.plots()->series().size(), 4);
    QVERIFY(w.plots()->series().contains("rank 2 cuda:1"));
    QVERIFY2(w.statusText().contains("3 connection(s)") || w.statusText().contains("0 connection(s)"), qPrintable(w.statusText()));
    qInfo("longest event-loop gap: %lld ms (%lld ms by the wall clock, waits for a CPU included)", probe.worstMs(), probe.rawWorstMs());
    QVERIFY2(probe.worstMs() < stoker::test::stallBudgetMs(),
             qPrintable(QString("the event loop stalled %1 ms").arg(probe.worstMs())));
    saveScreenshot(&w, "monitor-workspace");
    QSignalSpy stopped(w.source(), &BackgroundJob::stopped);
    w.stop();
    QVERIFY(waitUntil([&] { return !stopped.isEmpty(); }));
  }

  // 256 ranks x 1 device, every 100 ms, 256 connections: the event loop does not stall past the
  // budget (but for one gap: see below); the table has a row per rank, the plots switch to the median and min-max band, the
  // heat map shows every rank, and the slow rank is the one straggler named.
  void manyRanksStaySmooth() {
    MonitorWorkspace w;
    w.resize(1400, 900);
    w.show();
    QVERIFY(listenOnAnyPort(w));
    EventLoopProbe probe;
    {
      // The feeder connects on this (the GUI) thread: measure from the first record on, not
      // during 256 connects.
      RankFeeder feeder(w.port(), 256, 100, 137);
      probe.start();
      QCOMPARE(feeder.connections(), 256);
      QVERIFY2(waitUntil([&] { return w.table()->rowCount() == 256 && !w.stragglerText().isEmpty(); }, 30000),
               qPrintable(w.statusText()));
      QTest::qWait(3000 * stoker::test::slowdown());  // keep it coming: a steady state, not a start-up
      probe.stop();  // the Monitor's stalls, not the feeder's shutdown
      qInfo("%lld records sent by 256 ranks", feeder.sent());
    }
    const int over = probe.gapsOverMs(stoker::test::stallBudgetMs());
    qInfo("256 ranks: longest event-loop gaps %s, %d over %lld ms (%lld ms by the wall clock)",
          qPrintable(probe.longestMs(4)), over, stoker::test::stallBudgetMs(), probe.rawWorstMs());
    // A steady 3 s of records: a stall of the Monitor's making recurs with its table refreshes
    // (4 a second, so 12 in the window) and its replots, while a VM's hiccup comes once or twice
    // (CI failed on gaps of 111 and 124 ms, and of 129 and 106 ms, under ASan, where the gaps run
    // 47-61 ms): more than two gaps past the budget is the Monitor's.
    QVERIFY2(over <= 2, qPrintable(QString("the event loop stalled %1 times past %2 ms: %3")
                                       .arg(over)
                                       .arg(stoker::test::stallBudgetMs())
                                       .arg(probe.longestMs(6))));
    QVERIFY(w.plots()->aggregated());
    const auto median = w.plots()->aggregatePoints(TelemetryPlots::Throughput, 0);
    const auto low = w.plots()->aggregatePoints(TelemetryPlots::Throughput, 1);
    const auto high = w.plots()->aggregatePoints(TelemetryPlots::Throughput, 2);
    QVERIFY(!median.isEmpty());
    // samples/s = 1000 (rank + 1): min 1000, max 256000, median of 256 ranks 128500.
    QCOMPARE(low.last().y(), 1000.0);
    QCOMPARE(high.last().y(), 256000.0);
    QCOMPARE(median.last().y(), 128500.0);
    QCOMPARE(w.heatMap()->rankCount(), 256);
    // The starved rank's row shows its share (0.6); a healthy rank's 0.02.
    QVERIFY(waitUntil([&] { return qAbs(w.heatMap()->shownValue(137, 1.7e9 + 1) - 0.6) < 1e-9; }, 2000));
    QVERIFY(qAbs(w.heatMap()->shownValue(10, 1.7e9 + 1) - 0.02) < 1e-9);

    QCOMPARE(w.views()->currentIndex(), 1);  // past 8 series the heat map comes forward
    QCOMPARE(w.verdict(137, "cuda:1"), QString("input-bound"));
    QCOMPARE(w.verdict(136, "cuda:0"), QString("fine"));
    QVERIFY2(w.stragglerText().contains("rank 137 (cuda:1): data wait 30.0 ms"), qPrintable(w.stragglerText()));
    QCOMPARE(w.cellText(137, "cuda:1", "straggler"), QString("◀ data wait"));
    QCOMPARE(w.cellText(136, "cuda:0", "straggler"), QString());
    saveScreenshot(&w, "monitor-256-ranks");
    w.views()->setCurrentIndex(0);
    QTest::qWait(300);
    saveScreenshot(&w, "monitor-256-ranks-band");
    w.stop();
  }

  // Two real ranks: PyTorch DDP (Gloo) on torchvision's FashionMNIST under `python3 -m
  // stoker_probe`, publishing to this Monitor; rank 1's dataset sleeps 4 ms per sample.
  void twoRealProbeRanks() {
    if (test::run(STOKER_PYTHON, {"-c", "import torch, torchvision"}).exitCode != 0)
      QSKIP("python3-torch / python3-torchvision are not installed (the set-up installs them)");
    QTemporaryDir data;
    QVERIFY(test::unpackFashionMnist(data.path()));
    MonitorWorkspace w;
    w.resize(1300, 850);
    w.show();
    QVERIFY(listenOnAnyPort(w));
    const int master = test::freePort();
    std::vector<std::unique_ptr<QProcess>> ranks;
    for (int r = 0; r < 2; ++r) {
      auto p = std::make_unique<QProcess>();
      QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
      env.insert("PYTHONPATH", STOKER_SOURCE_DIR "/python");
      env.insert("OMP_NUM_THREADS", "1");
      env.insert("RANK", QString::number(r));
      env.insert("LOCAL_RANK", QString::number(r));
      env.insert("WORLD_SIZE", "2");
      env.insert("MASTER_ADDR", "127.0.0.1");
      env.insert("MASTER_PORT", QString::number(master));
      p->setProcessEnvironment(env);
      p->start(STOKER_PYTHON, {"-m", "stoker_probe", "--publish", QString("127.0.0.1:%1").arg(w.port()),
                               "--interval-ms", "200", STOKER_SOURCE_DIR "/tests/probe/ddp_fashion_mnist.py",
                               "--data", data.path(), "--samples", "4096", "--epochs", "2", "--slow-rank", "1",
                               "--slow-ms", "4"});
      ranks.push_back(std::move(p));
    }
    for (auto& p : ranks) {
      QVERIFY(waitUntil([&] { return p->state() == QProcess::NotRunning; }, 240000));
      QVERIFY2(p->exitCode() == 0, p->readAllStandardError().constData());
    }
    QVERIFY(waitUntil([&] { return w.table()->rowCount() == 2 && !w.stragglerText().isEmpty(); }, 10000));
    QCOMPARE(w.cellText(0, "cpu", "source"), QString("python"));
    QCOMPARE(w.cellText(1, "cpu", "loader"), QString("ddp_fashion_mnist.py:75"));
    QCOMPARE(w.verdict(1, "cpu"), QString("input-bound"));
    qInfo("wait share: rank 0 %s, rank 1 %s", qPrintable(w.cellText(0, "cpu", "wait share")),
          qPrintable(w.cellText(1, "cpu", "wait share")));
    // Rank 0 waits 2-4 % of an iteration for its data on the idle 2-core VM; a CI machine busy with
    // another suite and an ASan Monitor starved its loader to "moderate" (5-20 %) once.
    QVERIFY2(w.verdict(0, "cpu") == "fine" || w.verdict(0, "cpu") == "moderate", qPrintable(w.verdict(0, "cpu")));
    QVERIFY2(w.stragglerText().contains("rank 1 (cpu): data wait"), qPrintable(w.stragglerText()));
    QCOMPARE(w.plots()->series().size(), 2);
    QVERIFY(!w.plots()->aggregated());
    QCOMPARE(w.views()->currentIndex(), 0);  // two ranks: their lines, not the heat map
    // The probe on CPU reports no device memory nor worker latency: the plots say so.
    QVERIFY(waitUntil([&] { return w.plots()->saysNotReported(TelemetryPlots::Latency); }, 2000));
    QVERIFY(w.plots()->saysNotReported(TelemetryPlots::Memory));
    QVERIFY(!w.plots()->saysNotReported(TelemetryPlots::Throughput));
    saveScreenshot(&w, "monitor-2-ranks");
    w.stop();
  }

  // Fewer pixel rows than ranks: a drawn row stands for several ranks and shows the worst of them,
  // so one starved rank among 256 stays visible (scaled down, its row vanished).
  // Issue 39: two jobs that both publish rank 0 on cpu (another pid, 17 s apart) are two rows and
  // two lines whose legend says which is which, never one series with a line across the
  // silence; a job that stopped publishing is shown as ended, greyed, not "fine"; a single rank
  // is drawn in the heat map.
  void jobsAreKeptApartAndEndedJobsSaySo() {
    QTemporaryDir dir;
    const QString path = dir.filePath("two-jobs.jsonl");
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    for (int i = 0; i < 20; ++i) {
      TelemetryRecord a = record(0, "cpu", 0.1, 10, 1.7e9 + 0.1 * i);
      a.pid = 4121;
      a.prefetch_depth = kUnknown;  // a probe: no prefetch figure
      a.stages_ms = {{"decode", 1.5}};
      f.write(QByteArray::fromStdString(telemetryToJson(a)) + '\n');
    }
    for (int i = 0; i < 20; ++i) {
      TelemetryRecord b = record(0, "cpu", 5, 10, 1.7e9 + 19 + 0.1 * i);
      b.pid = 5377;
      b.stages_ms = {{"decode", 4.0}};
      f.write(QByteArray::fromStdString(telemetryToJson(b)) + '\n');
    }
    f.close();
    MonitorWorkspace w;
    w.setEndedAfterMs(1500);
    w.resize(1200, 800);
    w.show();
    w.followFile(path);
    QVERIFY(waitUntil([&] { return w.recordCount() == 40; }, 10000));
    QVERIFY(waitUntil([&] { return w.table()->rowCount() == 2; }, 3000));
    const QStringList series = w.plots()->series();
    QCOMPARE(series.size(), 2);
    QVERIFY2(series.contains("rank 0 cpu · pid 4121") && series.contains("rank 0 cpu · pid 5377"), qPrintable(series.join(" | ")));
    QCOMPARE(w.stages()->series(), (QStringList{"rank 0 cpu · pid 4121", "rank 0 cpu · pid 5377"}));  // two bars
    QCOMPARE(w.stages()->stageMs("rank 0 cpu · pid 4121", "decode"), 1.5);
    // Job A's line ends where job A ended; nothing joins it to job B, and A has no prefetch line.
    const auto a = w.plots()->points("rank 0 cpu · pid 4121", TelemetryPlots::Throughput);
    QCOMPARE(a.size(), 20);
    QVERIFY(a.last().x() < 2.0);
    for (const QPointF& p : w.plots()->points("rank 0 cpu · pid 4121", TelemetryPlots::Prefetch)) QVERIFY(std::isnan(p.y()));
    // The (rank, device) reads give the newest job.
    QCOMPARE(w.cellText(0, "cpu", "pid"), QString("5377"));
    // Nothing more comes: both jobs end, greyed, with the time of their last record.
    QVERIFY(waitUntil([&] { return w.verdict(0, "cpu").startsWith("ended"); }, 10000));
    int endedRows = 0;
    for (int row = 0; row < 2; ++row) endedRows += w.table()->item(row, 2)->text().startsWith("ended ");
    QCOMPARE(endedRows, 2);
    QCOMPARE(w.table()->item(0, 2)->foreground().color(), w.palette().color(QPalette::Disabled, QPalette::Text));
    // One rank in the heat map is drawn, not an empty frame.
    w.views()->setCurrentIndex(1);
    QVERIFY(waitUntil([&] { return !qIsNaN(w.heatMap()->shownValue(0, 1.7e9 + 19.5)); }, 3000));
    const QImage shot = w.heatMap()->grab().toImage();
    int coloured = 0;
    for (int y = 0; y < shot.height(); y += 2)
      for (int x = 0; x < shot.width() * 6 / 10; x += 2) {  // left of the colour scale
        const QColor c = shot.pixelColor(x, y);
        coloured += c.saturation() > 120 && c.value() > 80;
      }
    QVERIFY2(coloured > 200, qPrintable(QString("%1 coloured pixels").arg(coloured)));
  }

  void heatMapKeepsAStarvedRankVisible() {
    RankHeatMap map;
    map.resize(500, 160);
    map.show();
    std::vector<TelemetryRecord> records;
    for (int rank = 0; rank < 256; ++rank)
      records.push_back(record(rank, "cuda:0", rank == 137 ? 30 : 0.4, rank == 137 ? 20 : 19.6, 1.7e9 + 0.5));
    map.addRecords(records);
    QVERIFY(waitUntil([&] { return map.ranksPerRow() > 1 && !qIsNaN(map.shownValue(137, 1.7e9)); }, 5000));
    QCOMPARE(map.shownValue(137, 1.7e9), 0.6);
    QCOMPARE(map.shownValue(136, 1.7e9), 0.6);  // its neighbours share the row: the worst shows
    QCOMPARE(map.shownValue(10, 1.7e9), 0.02);
    QVERIFY(qIsNaN(map.shownValue(10, 1.7e9 - 5)));  // no report that second: empty, not 0
    map.setFigure(RankHeatMap::SamplesPerSecond);  // the slowest rank of a row shows
    QCOMPARE(map.shownValue(255, 1.7e9), 1000.0 * (255 / map.ranksPerRow() * map.ranksPerRow() + 1));
    // Wide enough: a row per rank.
    map.resize(500, 700);
    QVERIFY(waitUntil([&] { return map.ranksPerRow() == 1; }, 5000));
    map.setFigure(RankHeatMap::WaitShare);
    QCOMPARE(map.shownValue(136, 1.7e9), 0.02);
  }

  // Hidden (another tab, another workspace, the heat map shown past 8 series), the plots and the
  // heat map still let go of what scrolled out of their window: they grew by every record for as
  // long as the Monitor listened (50-90 MB an hour), and the first redraw after froze the window.
  void hiddenViewsKeepOnlyTheirWindow() {
    TelemetryPlots plots, shown;  // `shown` holds what a plot on screen keeps
    RankHeatMap map;
    plots.setWindowSeconds(60);
    shown.setWindowSeconds(60);
    map.setWindowSeconds(60);
    shown.show();
    QVERIFY(QTest::qWaitForWindowExposed(&shown));
    for (int second = 0; second < 600; ++second) {
      std::vector<TelemetryRecord> records;
      for (int k = 0; k < 10; ++k) records.push_back(record(0, "cuda:0", 1, 19, 1.7e9 + second + 0.1 * k));
      plots.addRecords(records);
      shown.addRecords(records);
      map.addRecords(records);
      if (second % 100 == 99) QTest::qWait(300);  // the views' timers tick while they are hidden
    }
    QTest::qWait(300);
    QVERIFY(!plots.isVisible() && !map.isVisible());
    const int points = plots.pointCount(TelemetryPlots::Throughput);  // untrimmed: 6,000 a graph
    QVERIFY2(points > 0 && points == shown.pointCount(TelemetryPlots::Throughput),
             qPrintable(QString("%1 points hidden, %2 shown").arg(points).arg(shown.pointCount(TelemetryPlots::Throughput))));
    QVERIFY(qIsNaN(map.cell(0, 1.7e9 + 10)));  // out of the window: gone
    QVERIFY(!qIsNaN(map.cell(0, 1.7e9 + 599)));
  }

  // Sorting by a column orders rows by its number, not its text ("9.00" before "10.00").
  void tableSortsByNumbers() {
    MonitorWorkspace w;
    QVERIFY(listenOnAnyPort(w));
    TelemetryPublisher p({"127.0.0.1:" + std::to_string(w.port())});
    for (int i = 0; i < 50 && w.table()->rowCount() < 3; ++i) {
      p.onRecord(record(0, "cpu", 10, 10, 1.7e9));
      p.onRecord(record(1, "cpu", 9, 11, 1.7e9));
      p.onRecord(record(2, "cpu", 100, 1, 1.7e9));
      QTest::qWait(100);
    }
    QVERIFY(waitUntil([&] { return w.table()->rowCount() == 3; }));
    w.table()->sortByColumn(7, Qt::AscendingOrder);  // data wait ms
    QCOMPARE(w.table()->item(0, 0)->text(), QString("1"));
    QCOMPARE(w.table()->item(1, 0)->text(), QString("0"));
    QCOMPARE(w.table()->item(2, 0)->text(), QString("2"));
    QCOMPARE(w.verdict(2, "cpu"), QString("input-bound"));  // lookups follow the rows as they move
    w.stop();
  }

  // A Python probe's record has no bytes/s, latency, memory nor stage times: "—", never 0; a
  // record with stage times lists them, and one from a remote dataset's process what it asked the
  // network for.
  void absentFiguresShowAsDashes() {
    MonitorWorkspace w;
    const QString path = dir_.filePath("probe.jsonl");
    TelemetryRecord probe = record(0, "cuda:0", 1, 9, 1.7e9);
    probe.prefetch_depth = kUnknown;
    probe.mem_total = kUnknown;
    probe.source = "python";
    probe.loader = "train.py:42";
    TelemetryRecord staged = record(1, "cuda:1", 1, 9, 1.7e9);
    staged.bytes_per_s = 2e9;
    staged.stages_ms = {{"read", 0.5}, {"decode", 7.25}};
    staged.net_requests = 1200;  // a remote dataset: what its process asked the network for
    staged.net_bytes = 3LL << 30;
    staged.net_retries = 2;
    QVERIFY(test::writeFile(path, QByteArray::fromStdString(telemetryToJson(probe) + "\n" + telemetryToJson(staged) + "\n")));
    w.followFile(path);
    QVERIFY(waitUntil([&] { return w.table()->rowCount() == 2; }));
    QCOMPARE(w.cellText(0, "cuda:0", "bytes/s"), QString("—"));
    QCOMPARE(w.cellText(0, "cuda:0", "stages ms"), QString("—"));
    QCOMPARE(w.cellText(0, "cuda:0", "source"), QString("python"));
    QCOMPARE(w.cellText(0, "cuda:0", "loader"), QString("train.py:42"));
    QCOMPARE(w.cellText(1, "cuda:1", "stages ms"), QString("read 0.50 · decode 7.25"));
    QCOMPARE(w.cellText(1, "cuda:1", "bytes/s"), QString("1.9 GiB/s"));
    QCOMPARE(w.cellText(0, "cuda:0", "network"), QString("—"));  // local data
    QCOMPARE(w.cellText(1, "cuda:1", "network"), QString("%1 req · 3.0 GiB · 2 retried").arg(QLocale().toString(1200)));
    QVERIFY(qIsNaN(w.plots()->lastValue("rank 0 cuda:0", TelemetryPlots::Memory, 0)));  // a gap, not 0
    QVERIFY(qIsNaN(w.plots()->lastValue("rank 0 cuda:0", TelemetryPlots::Throughput, 1)));
    // The Stages tab: a bar for the rank that reports stages (not the probe), the verdict in words.
    QCOMPARE(w.stages()->series(), QStringList{"rank 1 cuda:1"});
    QCOMPARE(w.stages()->stageMs("rank 1 cuda:1", "decode"), 7.25);
    QVERIFY2(w.stages()->verdictText().contains("rank 1 cuda:1 decode-bound: 94 % of worker time in JPEG/PNG decode"),
             qPrintable(w.stages()->verdictText()));
    w.resize(1000, 600);
    w.views()->setCurrentWidget(w.stages());
    saveScreenshot(&w, "monitor-stages");
    w.stop();
  }

  // "Tune in Loader": a record that carries its dataset and options (stoker.Loader in Python) is
  // handed over with them; a probe's record, which cannot, says why in the status line.
  void handsALoaderBackToTune() {
    MonitorWorkspace w;
    const QString path = dir_.filePath("tunable.jsonl");
    TelemetryRecord script = record(0, "cpu", 1, 9, 1e6);
    script.source = "stoker";
    script.dataset = "fashion-mnist";
    script.options = R"({"batch_size":64,"num_workers":3})";
    TelemetryRecord probe = record(1, "cpu", 1, 9, 1e6);
    probe.source = "python";
    QVERIFY(test::writeFile(path, QByteArray::fromStdString(telemetryToJson(script) + "\n" + telemetryToJson(probe) + "\n")));
    QSignalSpy tune(&w, &MonitorWorkspace::tuneRequested);
    w.followFile(path);
    QVERIFY(waitUntil([&] { return w.table()->rowCount() == 2; }));
    QVERIFY(w.tuneLoader(0, "cpu"));
    QCOMPARE(tune.count(), 1);
    QCOMPARE(tune.at(0).at(0).toString(), QString("fashion-mnist"));
    QVERIFY(tune.at(0).at(1).toString().contains("\"num_workers\":3"));
    QVERIFY(!w.tuneLoader(1, "cpu"));
    QVERIFY2(w.statusText().contains("does not send its dataset and options"), qPrintable(w.statusText()));
    QVERIFY(!w.tuneLoader(7, "cpu"));
    QCOMPARE(tune.count(), 1);
    w.stop();
  }

  // Save session writes every record as JSON lines; reopening it replays the same rows and
  // counts; Export writes the plots and heat map as PNG and every record as CSV.
  void sessionsSaveReplayAndExport() {
    MonitorWorkspace w;
    w.resize(1100, 700);
    w.show();
    QVERIFY(listenOnAnyPort(w));
    {
      TelemetryPublisher p({"127.0.0.1:" + std::to_string(w.port())});
      for (int i = 0; i < 200 && w.recordCount() < 30; ++i) {
        for (int rank = 0; rank < 3; ++rank) p.onRecord(record(rank, "cpu", rank == 2 ? 8 : 0.1, 10, 1.7e9 + i * 0.1));
        QTest::qWait(20);
      }
      p.flush(2000);
    }
    QVERIFY(waitUntil([&] { return w.recordCount() >= 30 && w.table()->rowCount() == 3; }));
    QTest::qWait(200);
    const qint64 recorded = w.recordCount();
    const QString session = dir_.filePath("session.jsonl");
    QSignalSpy written(&w, &MonitorWorkspace::sessionWritten);
    QVERIFY(w.saveSession(session));  // off the GUI thread: a session of a big job is GBs
    QVERIFY(waitFor(written));
    QCOMPARE(written.last().at(1).toBool(), true);
    QVERIFY2(w.statusText().contains(QString("wrote %1 records").arg(recorded), Qt::CaseInsensitive), qPrintable(w.statusText()));
    QCOMPARE(test::readFile(session).count('\n'), recorded);
    QVERIFY(w.exportSession(dir_.filePath("export.png")));
    QVERIFY(waitForCount(written, 2));
    QCOMPARE(written.last().at(0).toString(), dir_.filePath("export.csv"));
    // A folder that cannot be written: said, and nothing half-written is left.
    QVERIFY(w.saveSession(dir_.filePath("no-such-folder/session.jsonl")));
    QVERIFY(waitForCount(written, 3));
    QCOMPARE(written.last().at(1).toBool(), false);
    QVERIFY2(w.statusText().contains("no-such-folder"), qPrintable(w.statusText()));  // kept in the status line
    QVERIFY(QImage(dir_.filePath("export.png")).width() > 100);
    QVERIFY(QImage(dir_.filePath("export-heatmap.png")).width() > 100);
    const QList<QByteArray> csv = test::readFile(dir_.filePath("export.csv")).trimmed().split('\n');
    QCOMPARE(csv.size(), recorded + 1);
    QVERIFY(csv[0].startsWith("time,host,pid,rank,"));
    w.stop();

    MonitorWorkspace replay;
    replay.followFile(session);
    QVERIFY(waitUntil([&] { return replay.recordCount() == recorded && replay.table()->rowCount() == 3; }));
    QCOMPARE(replay.verdict(2, "cpu"), w.verdict(2, "cpu"));
    QCOMPARE(replay.plots()->pointCount("rank 1 cpu", TelemetryPlots::Throughput),
             w.plots()->pointCount("rank 1 cpu", TelemetryPlots::Throughput));
    replay.stop();
  }

  // The workbench's Monitor serves what it receives on /metrics, like `stoker monitor --prometheus`.
  void servesPrometheusMetrics() {
    MonitorWorkspace w;
    w.setPrometheusAddress("127.0.0.1:0");
    QVERIFY(listenOnAnyPort(w));
    QVERIFY(w.prometheusPort() > 0);
    TelemetryPublisher p({"127.0.0.1:" + std::to_string(w.port())});
    std::string body;
    QVERIFY(waitUntil(
        [&] {
          p.onRecord(record(3, "cuda:3", 3, 7, 1.7e9));
          QTest::qWait(50);
          httplib::Client c("127.0.0.1", w.prometheusPort());
          const auto res = c.Get("/metrics");
          body = res ? res->body : std::string();
          return body.find("rank=\"3\"") != std::string::npos;
        },
        30000));
    QVERIFY2(body.find("stoker_data_wait_ratio{rank=\"3\",device=\"cuda:3\",host=\"node\",pid=\"103\"} 0.3") != std::string::npos,
             body.c_str());
    QVERIFY2(w.statusText().contains(QString("Prometheus metrics on port %1").arg(w.prometheusPort())),
             qPrintable(w.statusText()));
    w.stop();
    // A port that cannot be served is said, and the session goes on without it.
    MonitorWorkspace second;
    second.setPrometheusAddress("nonsense");
    QVERIFY(listenOnAnyPort(second));
    QCOMPARE(second.prometheusPort(), 0);
    QVERIFY2(second.statusText().contains("no Prometheus endpoint: address nonsense"), qPrintable(second.statusText()));
    second.stop();
  }

  // A job behind a firewall publishes with listen:PORT; the Monitor dials it (Connect).
  void dialsAPublisherThatListens() {
    TelemetryPublisher job({"listen:127.0.0.1:0"});
    const int port = job.listeningPort(0);
    QVERIFY(port > 0);
    MonitorWorkspace w;
    w.setAddress(QString("127.0.0.1:%1").arg(port));
    w.connectToPublisher();
    QVERIFY(waitUntil(
        [&] {
          job.onRecord(record(5, "cuda:5", 0.1, 10, 1.7e9));
          QTest::qWait(50);
          return w.table()->rowCount() == 1;
        },
        30000));
    QCOMPARE(w.verdict(5, "cuda:5"), QString("fine"));
    QVERIFY2(w.statusText().startsWith("Connecting to 127.0.0.1:"), qPrintable(w.statusText()));
    w.stop();
  }

  // The address is written off the GUI thread (background_settings); once the workspace is gone it
  // is in the settings file, and the next workspace starts from it.
  void theAddressOutlivesTheWorkspace() {
    {
      MonitorWorkspace w;
      w.setAddress("127.0.0.1:0");
      w.listen();
      w.setPrometheusAddress("127.0.0.1:0");
      w.stop();
    }
    QSettings file;  // read from the file, not from the queue
    QCOMPARE(file.value("monitor/address").toString(), QString("127.0.0.1:0"));
    QCOMPARE(file.value("monitor/prometheus").toString(), QString("127.0.0.1:0"));
    MonitorWorkspace next;
    QCOMPARE(next.findChild<QLineEdit*>("address")->text(), QString("127.0.0.1:0"));
  }

  void followsAFileAndSkipsBadLines() {
    const QString path = dir_.filePath("telemetry.jsonl");
    QByteArray text = QByteArray::fromStdString(telemetryToJson(record(0, "sim:0", 5, 5, 1.7e9))) + "\n";
    text += "this is not telemetry\n";
    QVERIFY(test::writeFile(path, text));
    MonitorWorkspace w;
    w.followFile(path);
    QVERIFY(waitUntil([&] { return w.table()->rowCount() == 1; }));
    QCOMPARE(w.verdict(0, "sim:0"), QString("input-bound"));
    QVERIFY(waitUntil([&] { return w.source()->badLines() == 1; }));
    // Appended records arrive, a line written in two parts included.
    QFile f(path);
    QVERIFY(f.open(QIODevice::Append));
    const QByteArray more = QByteArray::fromStdString(telemetryToJson(record(1, "sim:1", 0.1, 20, 1.7e9 + 1))) + "\n";
    f.write(more.left(20));
    f.flush();
    QTest::qWait(250);
    f.write(more.mid(20));
    f.close();
    QVERIFY(waitUntil([&] { return w.table()->rowCount() == 2; }));
    QCOMPARE(w.verdict(1, "sim:1"), QString("fine"));
    QCOMPARE(w.source()->badLines(), 1);
    w.stop();
  }

  void badAddressesAndFilesAreReadableErrors() {
    MonitorWorkspace w;
    QSignalSpy failed(&w, &MonitorWorkspace::failed);
    w.setAddress("no-port-here");
    w.listen();
    QVERIFY(waitUntil([&] { return !failed.isEmpty(); }));
    QVERIFY2(failed.last().at(0).toString().contains("no-port-here"), qPrintable(failed.last().at(0).toString()));
    QVERIFY(w.statusText().startsWith("Error:"));
    w.followFile(dir_.filePath("missing.jsonl"));
    QVERIFY(waitUntil([&] { return failed.size() == 2; }));
    QVERIFY(failed.last().at(0).toString().contains("missing.jsonl"));
  }

  void demoTrainerShowsUpEndToEnd() {
    if (!QFile::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz") &&
        !QFile::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte"))
      QSKIP("Debian's dataset-fashion-mnist is not installed");
    MonitorWorkspace w;
    QSignalSpy listening(&w, &MonitorWorkspace::listening);
    w.setAddress("127.0.0.1:0");
    w.listen();
    QVERIFY(waitUntil([&] { return !listening.isEmpty(); }));
    QProcess trainer;
    trainer.start(STOKER_TRAINER_PATH, {"--epochs", "1", "--max-steps", "60", "--publish",
                                         QString("127.0.0.1:%1").arg(w.port())});
    QVERIFY(trainer.waitForStarted());
    QVERIFY2(waitUntil([&] { return w.table()->rowCount() == 1; }, 60000), qPrintable(w.statusText()));
    QVERIFY(trainer.waitForFinished(120000));
    QCOMPARE(trainer.exitCode(), 0);
    const QByteArray out = trainer.readAllStandardOutput();
    QVERIFY2(out.contains("rank 0 epoch 0: loss"), out.constData());
    QCOMPARE(w.table()->item(0, 1)->text(), QString("cpu"));
    QVERIFY(!w.verdict(0, "cpu").isEmpty());
    w.stop();
  }
};

QTEST_MAIN(TestMonitorWorkspace)
#include "tst_monitor_workspace.moc"
