// The Planner workspace driven through its API: the plan it shows equals the
// core planner's, weights from measured throughput, readable errors for bad
// input, the resume preview, and a 10M x 1024 plan that never stalls the
// event loop (timer probe, < 50 ms).
#include <QtTest>

#include <QElapsedTimer>
#include <QLabel>
#include <QLocale>
#include <QSignalSpy>
#include <QTableView>
#include <QThread>
#include <QTimer>
#include <ctime>

#include "plan/shard_plan.h"
#include "plan_grid_view.h"
#include "event_loop_probe.h"
#include "planner_workspace.h"

using namespace stoker;

namespace {

// Waits for the next planReady or planFailed; true when ready.
bool waitForPlan(PlannerWorkspace& w, int ms = 30000) {
  QSignalSpy ready(&w, &PlannerWorkspace::planReady), failed(&w, &PlannerWorkspace::planFailed);
  QElapsedTimer t;
  t.start();
  while (ready.isEmpty() && failed.isEmpty() && t.elapsed() < ms) QTest::qWait(10);
  return !ready.isEmpty();
}

}  // namespace

class TestPlannerWorkspace : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // Figures are grouped by the locale ("10,000"): fix it, whatever the machine's.
  void initTestCase() { QLocale::setDefault(QLocale(QLocale::English, QLocale::UnitedStates)); }

  void showsTheCorePlan() {
    PlannerWorkspace w;
    auto* table = w.findChild<QTableView*>();
    QVERIFY(table);
    QCOMPARE(table->model()->rowCount(), 4);  // the default plan is there from the start
    PlannerInputs in;
    in.samples = 1003, in.worldSize = 3, in.batchSize = 16, in.seed = 9, in.epoch = 2;
    in.policy = "weighted", in.weights = "3,1,2", in.resumeFrom = 0;
    w.setInputs(in);
    QVERIFY(waitForPlan(w));
    PlanRequest r;
    r.samples = 1003, r.worldSize = 3, r.batchSize = 16, r.seed = 9, r.epoch = 2, r.weights = {3, 1, 2};
    const ShardPlan plan = makeShardPlan(r);
    QCOMPARE(table->model()->rowCount(), 3);
    for (int k = 0; k < 3; ++k) {
      QCOMPARE(table->model()->index(k, 1).data().toString().remove(QLocale().groupSeparator()).toLongLong(), static_cast<qint64>(plan.ranks[static_cast<std::size_t>(k)].indices.size()));
      QCOMPARE(table->model()->index(k, 3).data().toString().remove(QLocale().groupSeparator()).toLongLong(), static_cast<qint64>(plan.ranks[static_cast<std::size_t>(k)].stepSizes.size()));
    }
    auto* grid = w.findChild<PlanGridView*>("planGrid");
    QVERIFY(grid);
    QCOMPARE(grid->grid().stepSizes.size(), 3);
    QCOMPARE(grid->grid().stepSizes[0][0], qint64{24});  // 3/6 of 48
    QVERIFY(w.errorText().isEmpty());
  }

  void badInputShowsAReadableError() {
    PlannerWorkspace w;
    PlannerInputs in;
    in.worldSize = 4, in.policy = "weighted", in.weights = "1,0,1,1";
    QSignalSpy failed(&w, &PlannerWorkspace::planFailed);
    w.setInputs(in);
    QVERIFY(!waitForPlan(w));
    QCOMPARE(failed.size(), 1);
    QVERIFY2(w.errorText().contains("rank 1 has weight 0"), qPrintable(w.errorText()));
    in.weights = "1,x";
    w.setInputs(in);
    QVERIFY(!waitForPlan(w));
    QVERIFY2(w.errorText().contains("\"x\" is not a number"), qPrintable(w.errorText()));
    in.policy = "torch", in.dropLast = true, in.samples = 100, in.batchSize = 64;
    w.setInputs(in);
    QVERIFY(!waitForPlan(w));
    QVERIFY2(w.errorText().contains("drop_last"), qPrintable(w.errorText()));
    in.dropLast = false, in.resumeFrom = 101;
    w.setInputs(in);
    QVERIFY(!waitForPlan(w));
    QVERIFY2(w.errorText().contains("beyond the epoch"), qPrintable(w.errorText()));
    // The largest count the form takes (2e9 samples: 32 GB of indices) is refused at once, not
    // planned until the system kills the workbench (a plan under way cannot be stopped).
    in.samples = 2000000000;
    w.setInputs(in);
    QVERIFY(!waitForPlan(w));
    QVERIFY2(w.errorText().contains("2,000,000,000 samples") && w.errorText().contains("Plan fewer samples"),
             qPrintable(w.errorText()));
    in.samples = 100;
    in.resumeFrom = 0;
    w.setInputs(in);
    QVERIFY(waitForPlan(w));
    QVERIFY(w.errorText().isEmpty());  // fixed input clears the message
  }

  void weightsFromMeasuredThroughput() {
    PlannerWorkspace w;
    QVERIFY(!w.setWeightsFromThroughput("fast, slow"));
    QVERIFY(w.errorText().contains("not a number"));
    QVERIFY(!w.setWeightsFromThroughput("100,0"));
    QVERIFY(w.errorText().contains("positive"));
    QVERIFY(w.setWeightsFromThroughput("1200,600,600"));
    QVERIFY(waitForPlan(w));
    const PlannerInputs in = w.inputs();
    QCOMPARE(in.worldSize, 3);
    QCOMPARE(in.policy, QString("weighted"));
    QCOMPARE(in.weights, QString("2,1,1"));
    QCOMPARE(w.findChild<QTableView*>()->model()->index(0, 1).data().toString().remove(QLocale().groupSeparator()).toLongLong(), qint64{30000});
  }

  void resumePreviewOnAnotherWorldSize() {
    PlannerWorkspace w;
    PlannerInputs in;
    in.samples = 1000, in.worldSize = 4, in.batchSize = 10, in.resumeFrom = 400, in.resumeWorldSize = 3;
    w.setInputs(in);
    QVERIFY(waitForPlan(w));
    const PlanGrid& after = w.findChild<PlanGridView*>("resumeGrid")->grid();
    QCOMPARE(after.stepSizes.size(), 3);
    QVERIFY2(after.caption.contains("resumed after 400 samples on 3 ranks: 600 remain"), qPrintable(after.caption));
    QCOMPARE(w.findChild<PlanGridView*>("planGrid")->grid().markStep, 10);  // 400 = 10 steps of 4 x 10
  }

  // Issue 39: the plan on screen always matches the form. The defaults are valid for any sample
  // count (no resume preview); an invalid field greys the last plan and the header says it is
  // not re-planned; fixing it brings a live plan back.
  void anInvalidFieldGreysTheOldPlan() {
    PlannerWorkspace w;
    QCOMPARE(PlannerInputs{}.resumeFrom, qint64{0});
    PlannerInputs in;
    in.samples = 10000;  // once made the default "Resume after 24,576" invalid
    w.setInputs(in);
    QVERIFY(waitForPlan(w));
    QVERIFY(!w.planIsStale());
    QVERIFY2(w.summaryText().contains("10,000 samples"), qPrintable(w.summaryText()));
    auto* grid = w.findChild<PlanGridView*>("planGrid");
    auto* table = w.findChild<QTableView*>();
    QVERIFY(grid->isEnabled() && table->isEnabled());

    in.resumeFrom = 24576;
    w.setInputs(in);
    QVERIFY(!waitForPlan(w));
    QVERIFY(w.planIsStale());
    QVERIFY(!grid->isEnabled() && !table->isEnabled());
    QVERIFY2(w.summaryText().contains("Not re-planned") && w.summaryText().contains("beyond the epoch") &&
                 w.summaryText().contains("10,000 samples"),
             qPrintable(w.summaryText()));
    in.resumeFrom = 0;
    w.setInputs(in);
    QVERIFY(waitForPlan(w));
    QVERIFY(!w.planIsStale() && grid->isEnabled() && table->isEnabled());
    QVERIFY(!w.summaryText().contains("Not re-planned"));
  }

  // An intended 1 : 2 split is "as asked", not an alarming imbalance; equal GPUs keep the
  // imbalance figure (there it means padding).
  void weightedSplitsSayAsAsked() {
    PlannerWorkspace w;
    PlannerInputs in;
    in.samples = 6000, in.worldSize = 2, in.batchSize = 30, in.policy = "weighted", in.weights = "1,2";
    w.setInputs(in);
    QVERIFY(waitForPlan(w));
    QVERIFY2(w.summaryText().contains("split 1 : 2 as asked") && !w.summaryText().contains("imbalance"),
             qPrintable(w.summaryText()));
    in.policy = "torch";
    w.setInputs(in);
    QVERIFY(waitForPlan(w));
    QVERIFY2(w.summaryText().contains("imbalance 0.0 %"), qPrintable(w.summaryText()));
  }

  // The grid has a step axis and says, per cell, which rank and step it is and which samples it
  // holds -- the core plan's own indices.
  void gridCellsSayWhatTheyHold() {
    PlannerWorkspace w;
    PlannerInputs in;
    in.samples = 1000, in.worldSize = 4, in.batchSize = 10, in.seed = 3;
    w.setInputs(in);
    QVERIFY(waitForPlan(w));
    auto* grid = w.findChild<PlanGridView*>("planGrid");
    grid->resize(600, 200);
    PlanRequest r;
    r.samples = 1000, r.worldSize = 4, r.batchSize = 10, r.seed = 3;
    const ShardPlan plan = makeShardPlan(r);
    // Rank 2's row, step 7's column (25 steps over the cells).
    const QRect probe = grid->rect();
    QString text;
    for (int x = 0; x < probe.width() && !text.contains("step 7:"); ++x)
      for (int y = 0; y < probe.height() && !text.startsWith("rank 2, step 7:"); ++y) text = grid->cellText({x, y});
    QVERIFY2(text.startsWith("rank 2, step 7: 10 samples"), qPrintable(text));
    QVERIFY2(text.contains("positions 70–79"), qPrintable(text));
    const auto& idx = plan.ranks[2].indices;
    QVERIFY2(text.contains(QString("sample indices (step 7): %1, %2, %3, %4, …").arg(idx[70]).arg(idx[71]).arg(idx[72]).arg(idx[73])),
             qPrintable(text));
    QVERIFY(grid->cellText({1, 1}).isEmpty());  // the caption, not a cell
  }

  void bigPlansNeverStallTheEventLoop() {
    PlannerWorkspace w;
    w.resize(1000, 700);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTest::qWait(100);  // the first paint (fonts, styles) is not what this measures
    QSignalSpy ready(&w, &PlannerWorkspace::planReady);
    const qint64 worst = stoker::test::worstGapOfOneOffAction([&](int attempt) {
      PlannerInputs in;  // a second try asks for another plan, so it is computed again
      in.samples = 10000000, in.worldSize = 1024, in.batchSize = 32, in.resumeFrom = 5000000 + attempt, in.resumeWorldSize = 768;
      w.setInputs(in);
      QElapsedTimer t;
      t.start();
      while (ready.size() <= attempt && t.elapsed() < 60000) QTest::qWait(5);
      QTest::qWait(50);  // the repaint after the result
    });
    QVERIFY(!ready.isEmpty());
    QCOMPARE(w.findChild<QTableView*>()->model()->rowCount(), 1024);
    QVERIFY2(worst < stoker::test::stallBudgetMs(), qPrintable(QString("the event loop stalled %1 ms").arg(worst)));
    stoker::test::saveScreenshot(&w, "planner-workspace");
  }

  // The probe leaves out only the time the GUI thread waited for a CPU: a stall of the thread's
  // own making, working or asleep on a lock, still counts in full.
  void theProbeCountsStallsOfTheGuiThread() {
    for (const bool busy : {true, false}) {
      stoker::test::EventLoopProbe probe;
      probe.start();
      QTest::qWait(20);
      QTimer::singleShot(0, [busy] {
        // 120 ms of the thread's own CPU time (not of the wall clock, which a loaded machine
        // stretches with waits for a CPU that the probe rightly leaves out), or asleep.
        auto cpuMs = [] {
          timespec ts{};
          clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
          return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
        };
        const double start = cpuMs();
        if (busy)
          while (cpuMs() - start < 120) {
          }
        else
          QThread::msleep(120);
      });
      // Events run until the probe has ticked after the stall (a fixed wait shorter than a
      // stretched stall could end first), at most 10 s.
      QElapsedTimer waited;
      waited.start();
      while (probe.worstMs() < 100 && waited.elapsed() < 10000) QTest::qWait(10);
      probe.stop();
      QVERIFY2(probe.worstMs() >= 100, qPrintable(QString("%1 stall measured as %2 ms")
                                                      .arg(busy ? "a busy" : "a sleeping")
                                                      .arg(probe.worstMs())));
    }
  }
};

QTEST_MAIN(TestPlannerWorkspace)
#include "tst_planner_workspace.moc"
