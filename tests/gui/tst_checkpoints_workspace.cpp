// The Checkpoints workspace driven through its API: open (and drop) a
// checkpoint, the tensor tree and the shard layout view, a dry run, a
// conversion end to end on a small checkpoint with progress and a verify
// verdict, cancel then resume, and bad inputs shown as readable errors. The
// event loop never stalls >= 50 ms during a conversion.
#include <QtTest>

#include <QCheckBox>
#include <QLineEdit>
#include <QPushButton>

#include <QMessageBox>
#include <QMimeData>
#include <QTimer>
#include <QSettings>
#include <QSignalSpy>
#include <QTreeWidget>

#include "checkpoint_jobs.h"
#include "ckpt/inspect.h"
#include "checkpoints_workspace.h"
#include "main_window.h"
#include "core/ckpt_fixtures.h"
#include "event_loop_probe.h"
#include "wait_for.h"
#include "shard_layout_view.h"
#include "test_support.h"

#include <ATen/ATen.h>

using namespace stoker;

// Drags `url` over the workspace and drops it there; whether the drag was accepted.
bool drop(CheckpointsWorkspace& w, const QUrl& url) {
  QMimeData mime;
  mime.setUrls({url});
  QDragEnterEvent enter(QPoint(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(&w, &enter);
  if (!enter.isAccepted()) return false;
  QDropEvent dropped(QPointF(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(&w, &dropped);
  return true;
}

using stoker::test::saveScreenshot;
using stoker::test::waitFor;
using stoker::test::waitForCount;
using stoker::test::waitUntil;

class TestCheckpointsWorkspace : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString ranks3_;  // a sample model saved on 3 ranks
  QString big_;     // 2 ranks, 96 MiB: slow enough to cancel

  // Opens big_ and starts converting it to f16 HF shards into `destination`, one job at a time on
  // a small budget: slow enough to cancel, or to close the window on.
  bool startSlowConversion(CheckpointsWorkspace& w, QSignalSpy& opened, const QString& destination) {
    w.openPath(big_);
    if (!waitForCount(opened, opened.count() + 1)) return false;
    w.setTarget("hf:20MB", "f16");
    w.setDestination(destination);
    w.setMemoryBudget("8MiB");
    w.setJobs(1);
    w.convert();
    return true;
  }

 private Q_SLOTS:
  void initTestCase() {
    QCoreApplication::setOrganizationName("StokerTest");
    QStandardPaths::setTestModeEnabled(true);
    ranks3_ = dir_.filePath("ranks3");
    test::writeRanks(ranks3_.toStdString(), test::sampleModel(1), 3);
    big_ = dir_.filePath("big");
    test::TensorMap big;
    for (int i = 0; i < 6; ++i) big["layer" + std::to_string(i) + ".weight"] = at::rand({2048, 2048});
    test::writeRanks(big_.toStdString(), big, 2);
  }

  // The settings are written off the GUI thread (background_settings): once the workspace is
  // gone they are in the settings file, and the next workspace starts from them.
  void settingsAndRecentFilesOutliveTheWorkspace() {
    {
      CheckpointsWorkspace w;
      QSignalSpy opened(&w, &CheckpointsWorkspace::checkpointOpened);
      w.openPath(ranks3_);
      QVERIFY(waitFor(opened));
      w.setTarget("ranks:5", "bf16");
    }
    QSettings file;  // read from the file, not from the queue
    QVERIFY2(file.value("checkpoints/recent").toStringList().contains(ranks3_),
             qPrintable(file.value("checkpoints/recent").toStringList().join(", ")));
    QCOMPARE(file.value("checkpoints/ranks").toInt(), 5);
    QCOMPARE(file.value("checkpoints/dtype").toString(), QString("bf16"));
    CheckpointsWorkspace next;
    QVERIFY(next.recentFiles().contains(ranks3_));
  }

  void openShowsTreeAndSourceShards() {
    CheckpointsWorkspace w;
    QSignalSpy opened(&w, &CheckpointsWorkspace::checkpointOpened);
    w.openPath(ranks3_);
    QVERIFY(waitFor(opened));
    QVERIFY2(opened.first().at(0).toString().contains("3 ranks"), qPrintable(opened.first().at(0).toString()));
    int leaves = 0;
    for (QTreeWidgetItemIterator it(w.tree(), QTreeWidgetItemIterator::NoChildren); *it; ++it) ++leaves;
    QCOMPARE(leaves, static_cast<int>(test::sampleModel(1).size()));
    QVERIFY(w.recentFiles().contains(ranks3_));
    // The first tensor split across ranks shows one source segment per rank.
    auto src = w.jobs()->source();
    const LogicalTensor* split = nullptr;
    for (const auto& t : src->tensors)
      if (t.shardDim && t.pieces.size() == 3) split = &t;
    QVERIFY(split);
    w.selectTensor(QString::fromStdString(split->name));
    const ShardLayout& layout = w.layoutView()->shardLayout();
    QCOMPARE(layout.tensor, QString::fromStdString(split->name));
    QCOMPARE(layout.source.size(), 3);
    QCOMPARE(layout.source[0].label, QString("rank_0.safetensors"));
    QVERIFY(layout.target.isEmpty());
  }

  // A DCP checkpoint from a real 2-process Gloo job: a tensor saved as a 2x2 grid of boxes is
  // drawn as a grid, and a dry run to dcp:3 shows the target's dim-0 chunks across it.
  void dcpChunkBoxesShowAsAGrid() {
    if (!test::pythonTorchAvailable()) QSKIP("Debian's python3-torch is not installed");
    const QString dcp = dir_.filePath("dcp-sharded");
    auto made = test::run(QStringLiteral(STOKER_PYTHON),
                          {STOKER_SOURCE_DIR "/tests/ckpt/dcp_fixtures.py", "sharded", dcp, "1"});
    QVERIFY2(made.exitCode == 0, made.err.constData());
    CheckpointsWorkspace w;
    w.resize(1100, 750);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QSignalSpy opened(&w, &CheckpointsWorkspace::checkpointOpened), planned(&w, &CheckpointsWorkspace::planReady);
    w.openPath(dcp);
    QVERIFY(waitFor(opened));
    QVERIFY2(opened.first().at(0).toString().contains("dcp"), qPrintable(opened.first().at(0).toString()));
    w.setTarget("dcp:3", "keep");
    w.setDestination(dir_.filePath("dcp-3"));
    w.setMemoryBudget("256MiB");  // not what a later test saved in the settings (8 MiB holds no DCP chunk here)
    w.dryRun();
    QVERIFY(waitFor(planned));
    w.selectTensor("model.grid");
    const ShardLayout& layout = w.layoutView()->shardLayout();
    QCOMPARE(layout.extent, 6);
    QCOMPARE(layout.extent2, 10);
    QVERIFY2(layout.dimLabel.contains("dims 0 (down) and 1 (across)"), qPrintable(layout.dimLabel));
    QSet<QString> boxes;
    for (const auto& b : layout.source) boxes << QString("%1+%2,%3+%4").arg(b.start).arg(b.length).arg(b.start2).arg(b.length2);
    QCOMPARE(boxes, (QSet<QString>{"0+3,0+6", "0+3,6+4", "3+3,0+6", "3+3,6+4"}));
    QCOMPARE(layout.target.size(), 3);  // dcp:3 splits dim 0: rows 2 + 2 + 2, whole columns
    QCOMPARE(layout.target[1].start, 2);
    QCOMPARE(layout.target[1].length2, 10);
    QCOMPARE(layout.targetTitle, QString("dcp:3"));
    saveScreenshot(&w, "checkpoints-dcp-grid");
  }

  void convertEndToEndThenVerify() {
    CheckpointsWorkspace w;
    w.resize(1100, 750);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QSignalSpy opened(&w, &CheckpointsWorkspace::checkpointOpened), planned(&w, &CheckpointsWorkspace::planReady);
    QSignalSpy finished(&w, &CheckpointsWorkspace::conversionFinished), verified(&w, &CheckpointsWorkspace::verifyFinished);
    QSignalSpy progress(w.jobs(), &CheckpointJobs::progress);
    w.openPath(big_);
    QVERIFY(waitFor(opened));
    w.setTarget("ranks:3", "keep");
    w.setDestination(dir_.filePath("big-3"));
    w.setMemoryBudget("16MiB");
    w.setJobs(2);
    w.dryRun();
    QVERIFY(waitFor(planned));
    QVERIFY2(w.logText().contains("dry run: ranks:3 -> 3 file(s)"), qPrintable(w.logText()));
    w.selectTensor("layer0.weight");
    QCOMPARE(w.layoutView()->shardLayout().source.size(), 2);
    QCOMPARE(w.layoutView()->shardLayout().target.size(), 3);
    QCOMPARE(w.layoutView()->shardLayout().target[2].label, QString("rank_2.safetensors"));
    QTest::qWait(50);
    const qint64 worst = stoker::test::worstGapOfOneOffAction([&](int attempt) {
      if (attempt > 0) w.setDestination(dir_.filePath("big-3-again"));  // a second try converts anew
      w.convert();
      QVERIFY2(waitForCount(finished, attempt + 1), qPrintable(w.statusText()));
    });
    QVERIFY(!QTest::currentTestFailed());
    QVERIFY(finished.last().at(0).toBool());
    QVERIFY(!progress.isEmpty());
    QCOMPARE(progress.last().at(0).toLongLong(), progress.last().at(1).toLongLong());
    QVERIFY2(worst < stoker::test::stallBudgetMs(), qPrintable(QString("the event loop stalled %1 ms").arg(worst)));
    QVERIFY(QFile::exists(dir_.filePath("big-3/metadata.json")));
    if (finished.size() > 1) w.setDestination(dir_.filePath("big-3"));  // what the rest checks
    const int minimumBefore = w.minimumSizeHint().height();
    w.verify();
    QVERIFY(waitFor(verified));
    // The verdict banner has its room from the start: a window at its smallest does not grow (issue 39).
    QCOMPARE(w.minimumSizeHint().height(), minimumBefore);
    QVERIFY(verified.first().at(0).toBool());
    QVERIFY2(w.verdictText().startsWith("Same model: 6 tensors"), qPrintable(w.verdictText()));
    saveScreenshot(&w, "checkpoints-workspace");

    // A different model is a clear "Different" verdict.
    const QString other = dir_.filePath("other");
    test::writeSingle(other.toStdString(), test::sampleModel(2));
    w.setDestination(other + "/model.safetensors");
    w.verify();
    QVERIFY(waitForCount(verified, 2));
    QVERIFY(!verified.last().at(0).toBool());
    QVERIFY2(w.verdictText().startsWith("Different:"), qPrintable(w.verdictText()));
  }

  void cancelThenResume() {
    CheckpointsWorkspace w;
    QSignalSpy opened(&w, &CheckpointsWorkspace::checkpointOpened), stopped(&w, &CheckpointsWorkspace::jobStopped);
    QSignalSpy finished(&w, &CheckpointsWorkspace::conversionFinished), verified(&w, &CheckpointsWorkspace::verifyFinished);
    QVERIFY(startSlowConversion(w, opened, dir_.filePath("big-hf")));
    // Another checkpoint opened while the conversion runs: refused, saying why; the open one stays.
    w.openPath(dir_.filePath("another"));
    QVERIFY2(w.statusText().startsWith("A job is running"), qPrintable(w.statusText()));
    w.cancel();  // at once: the first safe point stops it
    QVERIFY(waitFor(stopped));
    QVERIFY(finished.isEmpty());
    QVERIFY2(w.statusText().startsWith("Cancelled."), qPrintable(w.statusText()));
    QVERIFY(!QFile::exists(dir_.filePath("big-hf/model.safetensors.index.json")));
    w.resume();
    QVERIFY(waitFor(finished));
    QVERIFY(finished.first().at(0).toBool());
    QVERIFY(QFile::exists(dir_.filePath("big-hf/model.safetensors.index.json")));
    w.verify();  // f16 changes the bytes: verify says so, naming a tensor
    QVERIFY(waitFor(verified));
    QVERIFY(!verified.first().at(0).toBool());
    QVERIFY2(w.verdictText().contains("layer"), qPrintable(w.verdictText()));
  }

  void badInputsAreReadableErrors() {
    CheckpointsWorkspace w;
    QSignalSpy failed(&w, &CheckpointsWorkspace::jobFailed), opened(&w, &CheckpointsWorkspace::checkpointOpened);
    w.convert();  // nothing open
    QVERIFY(waitFor(failed));
    QVERIFY2(failed.last().at(0).toString().contains("open a checkpoint first"), qPrintable(failed.last().at(0).toString()));
    w.openPath(dir_.filePath("nope.safetensors"));
    QVERIFY(waitForCount(failed, 2));
    QVERIFY(failed.last().at(0).toString().contains("nope.safetensors"));
    const QString junk = dir_.filePath("junk.safetensors");
    QVERIFY(test::writeFile(junk, QByteArray("\xff\xff\xff\xff\xff\xff\xff\x7f{not json", 17)));
    w.openPath(junk);
    QVERIFY(waitForCount(failed, 3));
    QVERIFY2(failed.last().at(0).toString().contains("junk.safetensors"), qPrintable(failed.last().at(0).toString()));
    QVERIFY(w.statusText().startsWith("Error:"));
    w.openPath(ranks3_);
    QVERIFY(waitFor(opened));
    w.setTarget("ranks:2");
    w.setMemoryBudget("lots");
    w.setDestination(dir_.filePath("x"));
    w.dryRun();
    QVERIFY(waitForCount(failed, 4));
    QVERIFY2(failed.last().at(0).toString().contains("memory budget"), qPrintable(failed.last().at(0).toString()));
    w.setMemoryBudget("64MiB");
    w.setDestination(ranks3_ + "/inside");  // inside the source
    w.convert();
    QVERIFY(waitForCount(failed, 5));
    QVERIFY2(failed.last().at(0).toString().contains("inside"), qPrintable(failed.last().at(0).toString()));

    // Converting into a folder that holds a checkpoint names the check box, not the CLI's --force
    // (issue 39); ticked, the conversion replaces it.
    QSignalSpy finished(&w, &CheckpointsWorkspace::conversionFinished);
    w.setDestination(dir_.filePath("existing"));
    w.convert();
    QVERIFY(waitFor(finished));
    w.convert();
    QVERIFY(waitForCount(failed, 6));
    const QString message = failed.last().at(0).toString();
    QVERIFY2(message.contains("tick “Replace existing files” to replace") && !message.contains("--force"), qPrintable(message));
    auto* force = w.findChild<QCheckBox*>("force");
    QVERIFY(force);
    w.setForce(true);
    QVERIFY(force->isChecked());
    w.convert();
    QVERIFY(waitForCount(finished, 2));
  }

  // An open that fails (or is cancelled) closes the checkpoint open before: Convert, Dry run and
  // Verify are off, and Convert refuses rather than write the earlier checkpoint under the new
  // one's name. The destination this workspace filled in follows the open checkpoint; one the
  // user typed stays. A cancelled open does not speak of resuming a conversion.
  void aFailedOpenLeavesNothingToConvert() {
    CheckpointsWorkspace w;
    auto* convertButton = w.findChild<QPushButton*>("convert");
    auto* destination = w.findChild<QLineEdit*>("destination");
    QVERIFY(convertButton && destination);
    QVERIFY(!convertButton->isEnabled());  // nothing open yet
    QSignalSpy failed(&w, &CheckpointsWorkspace::jobFailed), opened(&w, &CheckpointsWorkspace::checkpointOpened),
        stopped(&w, &CheckpointsWorkspace::jobStopped);
    w.openPath(ranks3_);
    QVERIFY(waitFor(opened));
    QVERIFY(convertButton->isEnabled());
    QCOMPARE(destination->text(), ranks3_ + "-converted");
    const QString other = dir_.filePath("other3");
    test::writeRanks(other.toStdString(), test::sampleModel(2), 3);
    w.openPath(other);
    QVERIFY(waitForCount(opened, 2));
    QCOMPARE(destination->text(), other + "-converted");  // not ranks3-converted: B went over A's output
    w.setDestination(dir_.filePath("mine"));
    w.openPath(dir_.filePath("gone.safetensors"));
    QVERIFY(waitFor(failed));
    QVERIFY(!convertButton->isEnabled());
    QCOMPARE(destination->text(), dir_.filePath("mine"));
    w.convert();
    QVERIFY(waitForCount(failed, 2));
    QVERIFY2(failed.last().at(0).toString().contains("open a checkpoint first"), qPrintable(failed.last().at(0).toString()));
    QVERIFY(!QFileInfo::exists(dir_.filePath("mine")));
    w.openPath(big_);
    w.cancel();
    QTRY_VERIFY_WITH_TIMEOUT(!stopped.isEmpty() || opened.count() == 3, 60000);  // the cancel may come after the open
    if (!stopped.isEmpty()) {
      QVERIFY2(!w.statusText().contains("Resume"), qPrintable(w.statusText()));
      QVERIFY(!convertButton->isEnabled());
    }
  }

  // Closing the window while a conversion runs asks first: No keeps the window and the
  // conversion, Yes stops it (resumable) and closes.
  void closingDuringAConversionAsks() {
    MainWindow window;
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    CheckpointsWorkspace& w = *window.checkpoints();
    QSignalSpy opened(&w, &CheckpointsWorkspace::checkpointOpened), stopped(&w, &CheckpointsWorkspace::jobStopped),
        finished(&w, &CheckpointsWorkspace::conversionFinished);
    QVERIFY(startSlowConversion(w, opened, dir_.filePath("big-closing")));
    QString asked;
    const auto answer = [&](QMessageBox::StandardButton button) {
      QTimer::singleShot(100, [&asked, button] {
        if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget())) {
          asked = box->text();
          box->button(button)->click();
        }
      });
    };
    if (!w.converting()) QSKIP("the conversion ended before the window could be closed");
    answer(QMessageBox::No);
    QVERIFY(!window.close());
    QVERIFY2(asked.contains("Stop the conversion and quit?"), qPrintable(asked));
    QVERIFY(window.isVisible());
    if (!w.converting()) QSKIP("the conversion ended while the question was open");
    asked.clear();
    answer(QMessageBox::Yes);
    QVERIFY(window.close());
    QVERIFY(!asked.isEmpty());
    // Stopped at its next safe point (or it had just finished). The signal, not converting(): the
    // job is idle just before its queued signal reaches this thread (under ASan the check came between).
    QTRY_VERIFY_WITH_TIMEOUT(!stopped.isEmpty() || finished.size() == 1, 60000);
    QVERIFY(!w.converting());
  }

  void droppingAFolderOpensIt() {
    CheckpointsWorkspace w;
    QSignalSpy opened(&w, &CheckpointsWorkspace::checkpointOpened);
    QVERIFY(drop(w, QUrl::fromLocalFile(ranks3_)));
    QVERIFY(waitFor(opened));
  }

  // A link dragged from a browser opens as a URL; one with a password in it is never shown or
  // kept in the recent list, and a conversion of a URL goes to a local folder.
  void droppingALinkOpensTheUrl() {
    qputenv("STOKER_HTTP_ATTEMPTS", "1");
    CheckpointsWorkspace w;
    QSignalSpy failed(&w, &CheckpointsWorkspace::jobFailed);
    QVERIFY(drop(w, QUrl("https://alice:hunter2@127.0.0.1:1/models/model.pt")));
    QVERIFY(waitFor(failed));
    qunsetenv("STOKER_HTTP_ATTEMPTS");
    const QString message = failed.first().first().toString();
    QVERIFY2(message.contains("127.0.0.1") && !message.contains("hunter2"), qPrintable(message));
    QVERIFY2(!w.logText().contains("hunter2") && !w.statusText().contains("hunter2"), qPrintable(w.logText()));
    QVERIFY(!w.recentFiles().join(' ').contains("hunter2"));
    QCOMPARE(CheckpointsWorkspace::defaultDestination("s3://bucket/llama/"), QDir::current().filePath("llama-converted"));
    QCOMPARE(CheckpointsWorkspace::defaultDestination("/data/ckpt"), QString("/data/ckpt-converted"));
  }
};

QTEST_MAIN(TestCheckpointsWorkspace)
#include "tst_checkpoints_workspace.moc"
