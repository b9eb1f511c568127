// The Loader workspace driven through its API: a run reports progress, fills
// the live plots and the mode badge and finishes; Stop cancels; the form shows
// the core's validation messages; bad datasets and option files fail
// readably; JSON import/export and snippets; the auto-tune sweep ranks
// combinations and applies the best; the event loop never stalls >= 50 ms.
#include <QtTest>

#include <algorithm>
#include <cmath>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <QWheelEvent>
#include <QLineEdit>
#include <QPlainTextEdit>

#include "data/dataset.h"
#include "data/loader.h"
#include "dataset_picker.h"
#include "remote_dataset_dialog.h"
#include "event_loop_probe.h"
#include "wait_for.h"
#include "loader_options_form.h"
#include "loader_runner.h"
#include "loader_workspace.h"
#include "stage_breakdown_view.h"
#include "util/error.h"
#include "telemetry_plots.h"
#include "test_support.h"

using namespace stoker;
using stoker::test::saveScreenshot;
using stoker::test::waitFor;
using stoker::test::waitForCount;
using stoker::test::waitUntil;

namespace {

// Sweeps and the auto-tuner measure each setting to +-3 % or 1 s here (5 s by default).
MeasureSpec quickMeasure() {
  MeasureSpec m;
  m.warmupSeconds = 0.2;
  m.minSeconds = 0.3;
  m.maxSeconds = 1;
  return m;
}

// 101 records of device "cpu", 0.1 s apart from t = 1000, at rate(i) samples/s.
template <class Rate>
std::vector<TelemetryRecord> cpuRecords(Rate rate) {
  std::vector<TelemetryRecord> records;
  for (int i = 0; i <= 100; ++i) {
    TelemetryRecord r;
    r.time = 1000 + 0.1 * i;
    r.device = "cpu";
    r.samples_per_s = rate(i);
    records.push_back(r);
  }
  return records;
}

LoaderOptions smallOptions() {
  LoaderOptions o;
  o.batch_size = 64;
  o.num_workers = 1;
  o.prefetch = 4;
  o.telemetry_interval_ms = 20;
  return o;
}


}  // namespace

class TestLoaderWorkspace : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private Q_SLOTS:
  void initTestCase() {
    QCoreApplication::setOrganizationName("StokerTest");
    QStandardPaths::setTestModeEnabled(true);
  }
  // A wheel over a combo box or spin box the user has not clicked scrolls the form; once it has
  // focus, the wheel changes its value as usual.
  // Seeds are uint64: torch.initial_seed() is at or above 2^63 half the time. Through a double
  // the form rounded 1234567890123456789 to ...768 (another order, no warning), and one above
  // 2^63 became int64's minimum, which the core refused, so Run stayed off.
  void seedsKeepAllTheirDigits() {
    LoaderOptionsForm form;
    for (const std::uint64_t seed : {std::uint64_t(1234567890123456789ULL), std::uint64_t(18446744073709551557ULL), std::uint64_t(7)}) {
      LoaderOptions o;
      o.seed = seed;
      o.generator_seed = seed - 1;
      form.setOptions(o);
      QCOMPARE(qobject_cast<QLineEdit*>(form.editor("seed"))->text(), QString::number(seed));
      QCOMPARE(form.options().seed, seed);
      QCOMPARE(form.options().generator_seed, seed - 1);
    }
    qobject_cast<QLineEdit*>(form.editor("seed"))->setText("18446744073709551615");  // typed
    QCOMPARE(form.options().seed, std::uint64_t(18446744073709551615ULL));
    qobject_cast<QLineEdit*>(form.editor("seed"))->setText("18446744073709551616");  // past uint64: the core names it
    try {
      form.options();
      QFAIL("a seed past uint64 was taken");
    } catch (const Error& e) {
      QVERIFY2(QString::fromStdString(e.what()).contains("seed"), e.what());
    }
  }

  void theWheelScrollsTheFormUnlessAnEditorHasFocus() {
    LoaderOptionsForm form;
    form.show();
    QVERIFY(QTest::qWaitForWindowExposed(&form));
    auto* combo = qobject_cast<QComboBox*>(form.editor("reader_mode"));
    auto* spin = qobject_cast<QSpinBox*>(form.editor("batch_size"));
    QVERIFY(combo && spin);
    auto wheel = [](QWidget* target) {
      QWheelEvent e(QPointF(5, 5), target->mapToGlobal(QPointF(5, 5)), {}, QPoint(0, -120), Qt::NoButton, Qt::NoModifier,
                    Qt::NoScrollPhase, false);
      QCoreApplication::sendEvent(target, &e);
    };
    if (QWidget* focused = QApplication::focusWidget()) focused->clearFocus();  // showing gave the first editor focus
    QVERIFY(!combo->hasFocus() && !spin->hasFocus());
    const int index = combo->currentIndex(), value = spin->value();
    wheel(combo);
    wheel(spin);
    QCOMPARE(combo->currentIndex(), index);
    QCOMPARE(spin->value(), value);
    form.activateWindow();
    combo->setFocus();
    QTRY_VERIFY(combo->hasFocus());
    wheel(combo);
    QVERIFY(combo->currentIndex() != index);
  }


  void runShowsProgressPlotsAndBadgeWithoutStalling() {
    LoaderWorkspace w;
    w.resize(1200, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTest::qWait(100);
    w.setDataset("synthetic:6000,3x32x32,f32");
    w.setDevices("sim:0,sim:1");
    w.setEpochs(3);
    w.setStepMicros(1500);  // ~0.2 s per epoch: several telemetry reports per device
    w.form()->setOptions(smallOptions());
    QSignalSpy started(&w, &LoaderWorkspace::runStarted), finished(&w, &LoaderWorkspace::runFinished);
    QSignalSpy progress(w.runner(), &LoaderRunner::progress);
    const qint64 worst = stoker::test::worstGapOfOneOffAction([&](int attempt) {
      w.run();
      QCOMPARE(started.size(), attempt + 1);
      QVERIFY(!w.findChild<QPushButton*>("run")->isEnabled());
      QVERIFY(w.findChild<QPushButton*>("stop")->isEnabled());
      QVERIFY2(waitForCount(finished, attempt + 1), qPrintable(w.statusText()));
      QTest::qWait(60);  // the last redraw
    });
    QVERIFY(!QTest::currentTestFailed());
    QVERIFY(finished.last().at(0).toDouble() > 0);
    QVERIFY(!progress.isEmpty());
    QCOMPARE(w.findChild<QProgressBar*>()->value(), 1000);
    QVERIFY2(w.statusText().startsWith("steady state:"), qPrintable(w.statusText()));
    // One series per device, with points in every plot, and the badge names both.
    QStringList series = w.plots()->series();  // in the order the devices first reported
    series.sort();
    QVERIFY2(series == (QStringList{"sim:0", "sim:1"}), qPrintable(series.join(", ")));
    for (int p = 0; p < TelemetryPlots::PlotCount; ++p)
      QVERIFY(w.plots()->pointCount("sim:0", static_cast<TelemetryPlots::Plot>(p)) > 0);
    QVERIFY(w.plots()->replots() > 0);
    QVERIFY2(w.badgeText().contains("sim:0 resident") && w.badgeText().contains("sim:1 resident"), qPrintable(w.badgeText()));
    QVERIFY(w.findChild<QPushButton*>("run")->isEnabled());
    QVERIFY2(worst < stoker::test::stallBudgetMs(), qPrintable(QString("the event loop stalled %1 ms").arg(worst)));
    saveScreenshot(&w, "loader-workspace");
  }

  // An image folder of real photos through torchvision-named transforms: the Stages tab draws the
  // worker time per stage for the device and names the dominant stage in words.
  void imageFolderRunShowsTheStageBreakdown() {
    QTemporaryDir dir;
    const QString photos = dir.filePath("photos");
    const auto made = stoker::test::runPythonArgs({QStringLiteral(STOKER_SOURCE_DIR "/tests/datasets/make_photo_folder.py"), photos,
                                                   "--classes", "3", "--per-class", "40"});
    QVERIFY2(made.exitCode == 0, made.err.constData());
    LoaderWorkspace w;
    w.resize(1200, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.setDevices("cpu");
    w.setEpochs(2);
    LoaderOptions o = smallOptions();
    o.batch_size = 16;
    w.form()->setOptions(o);
    w.setImageDataset("imagefolder:" + photos);  // no transforms set: torchvision's train pipeline is offered
    QCOMPARE(QString::fromStdString(w.form()->options().transforms),
             QString("RandomResizedCrop(224),RandomHorizontalFlip(0.5),Normalize(imagenet)"));
    QSignalSpy finished(&w, &LoaderWorkspace::runFinished);
    w.run();
    QVERIFY2(waitFor(finished), qPrintable(w.statusText()));
    QTest::qWait(60);
    QVERIFY2(w.statusText().startsWith("steady state:"), qPrintable(w.statusText()));
    QCOMPARE(w.stages()->series(), QStringList{"cpu"});
    QVERIFY(w.stages()->stageMs("cpu", "decode") > 0);
    QVERIFY(w.stages()->stageMs("cpu", "transform") > 0);
    const QString verdict = w.stages()->verdictText();
    QVERIFY2(verdict.startsWith("cpu ") && verdict.contains("-bound: ") && verdict.contains("% of worker time in"),
             qPrintable(verdict));
    saveScreenshot(&w, "loader-stages");
  }

  // The instrument users come for: the default run goes until Stop, a change in the form takes
  // effect while it runs, the plots mark the moment ("num_workers 0 → 4"), the measured rate moves
  // the expected way (four readers on a dataset whose samples each wait on "storage"), and the
  // bottleneck panel names the knob. Stop then ends the run with its summary.
  void liveChangeShowsItsMarkerAndMovesTheRate() {
    LoaderWorkspace w;
    w.resize(1200, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    // 150 µs of storage latency per sample (a sleep: the gain does not depend on free cores, so it
    // holds on 2 cores and under sanitizers): 4.8 ms per batch of 32 read in turn, ~1.2 ms by 4 readers.
    w.setDataset("synthetic:1000000,16,f32,0,150");
    w.setDevices("cpu");
    w.setEpochs(0);
    w.setStepMicros(500);
    LoaderOptions o = smallOptions();
    o.batch_size = 32;
    o.num_workers = 0;
    o.loading_mode = LoadingMode::Streaming;  // pay the per-sample cost every batch
    w.form()->setOptions(o);
    QSignalSpy retuned(w.runner(), &LoaderRunner::retuned);
    QSignalSpy finished(&w, &LoaderWorkspace::runFinished), stopped(&w, &LoaderWorkspace::runStopped);
    w.run();
    const QString series = "cpu";
    QVERIFY(waitUntil([&] { return w.plots()->points(series, TelemetryPlots::Throughput).size() >= 8; }));
    QVERIFY2(w.bottleneckText().contains("num_workers (0 \u2192 1"), qPrintable(w.bottleneckText()));
    qobject_cast<QSpinBox*>(w.form()->editor("num_workers"))->setValue(4);
    QVERIFY(waitFor(retuned, 10000));
    QCOMPARE(retuned.first().at(1).toString(), QString("num_workers 0 \u2192 4"));
    QCOMPARE(retuned.first().at(3).toBool(), false);  // at the next batch, not the epoch's end
    QVERIFY(waitUntil([&] { return !w.plots()->markers().isEmpty(); }));
    const double at = w.plots()->markers().first().x;
    QCOMPARE(w.plots()->markers().first().label, QString("num_workers 0 \u2192 4"));
    // The status line keeps the rate current and the change readable while the run goes on.
    QVERIFY2(waitUntil([&] {
               return w.statusText().startsWith("Running until Stop: ") &&
                      w.statusText().endsWith("/s \u2014 applied: num_workers 0 \u2192 4");
             }),
             qPrintable(w.statusText()));
    auto after = [&] {
      int n = 0;
      for (const QPointF& p : w.plots()->points(series, TelemetryPlots::Throughput))
        n += p.x() > at + 0.15 ? 1 : 0;
      return n;
    };
    QVERIFY(waitUntil([&] { return after() >= 8; }));
    std::vector<double> before, later;
    for (const QPointF& p : w.plots()->points(series, TelemetryPlots::Throughput)) {
      if (p.x() < at) before.push_back(p.y());
      else if (p.x() > at + 0.15) later.push_back(p.y());  // past the report that straddles the change
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    qInfo("samples/s before %.0f, after %.0f (%zu and %zu reports)", median(before), median(later), before.size(), later.size());
    QVERIFY2(median(later) > 2 * median(before),
             qPrintable(QString("before %1, after %2").arg(median(before)).arg(median(later))));
    saveScreenshot(&w, "loader-live");
    w.stop();
    QVERIFY(waitFor(finished, 20000));  // until Stop: Stop is the normal end
    QVERIFY(stopped.isEmpty());
    QVERIFY2(w.statusText().startsWith("steady state:"), qPrintable(w.statusText()));
  }

  void stopCancelsARun() {
    LoaderWorkspace w;
    w.setDataset("synthetic:200000,3x32x32,f32");
    w.setDevices("cpu");
    w.setEpochs(50);
    w.setStepMicros(2000);
    w.form()->setOptions(smallOptions());
    QSignalSpy stopped(&w, &LoaderWorkspace::runStopped), finished(&w, &LoaderWorkspace::runFinished);
    QSignalSpy progress(w.runner(), &LoaderRunner::progress);
    w.run();
    QVERIFY(waitFor(progress));
    w.stop();
    QVERIFY(waitFor(stopped, 10000));
    QVERIFY(finished.isEmpty());
    QCOMPARE(w.statusText(), QString("Stopped."));
    QVERIFY(!w.runner()->busy());
  }

  // A resident dataset that takes a while to decode: a change made meanwhile is kept and
  // applied when the run starts (with its marker), and Stop ends the opening at once.
  void changesAndStopWhileTheDatasetOpens() {
    LoaderOptions o = smallOptions();
    o.num_workers = 0;
    o.loading_mode = LoadingMode::Resident;
    {
      LoaderWorkspace w;
      w.setDataset("synthetic:4000,8,f32,0,1000");  // 4 s of "storage" waits, shared by the decoding threads
      w.setDevices("cpu");
      w.setEpochs(0);
      w.form()->setOptions(o);
      QSignalSpy retuned(w.runner(), &LoaderRunner::retuned), started(w.runner(), &LoaderRunner::started);
      QSignalSpy finished(&w, &LoaderWorkspace::runFinished);
      w.run();
      QTest::qWait(200);
      qobject_cast<QSpinBox*>(w.form()->editor("num_workers"))->setValue(1);
      QVERIFY2(waitUntil([&] { return w.statusText().startsWith("Applying num_workers 0 \u2192 1"); }),
               qPrintable(w.statusText()));
      QVERIFY(started.isEmpty());  // still decoding when the change was taken
      QVERIFY(waitFor(retuned, 30000));
      QCOMPARE(retuned.first().at(1).toString(), QString("num_workers 0 \u2192 1"));
      QCOMPARE(started.size(), 1);
      QVERIFY(waitUntil([&] { return !w.plots()->markers().isEmpty(); }));
      w.stop();
      QVERIFY(waitFor(finished, 20000));
    }
    LoaderWorkspace w;
    w.setDataset("synthetic:1000000,8,f32,0,1000");  // would decode for minutes
    w.setDevices("cpu");
    w.setEpochs(0);
    w.form()->setOptions(o);
    QSignalSpy stopped(&w, &LoaderWorkspace::runStopped), started(w.runner(), &LoaderRunner::started);
    w.run();
    QTest::qWait(300);
    QElapsedTimer clock;
    clock.start();
    w.stop();
    QVERIFY(waitFor(stopped, 10000));
    qInfo("stopped %lld ms after Stop, while the dataset decoded", static_cast<long long>(clock.elapsed()));
    QVERIFY(clock.elapsed() < 3000);
    QVERIFY(started.isEmpty());
    QCOMPARE(w.statusText(), QString("Stopped."));
    QVERIFY(!w.runner()->busy());
  }

  void formShowsTheCoresValidationMessages() {
    LoaderWorkspace w;
    LoaderOptionsForm* form = w.form();
    QSignalSpy validity(form, &LoaderOptionsForm::validityChanged);
    qobject_cast<QSpinBox*>(form->editor("batch_size"))->setValue(0);
    QVERIFY(!form->isValid());
    QCOMPARE(form->invalidKnob(), QString("batch_size"));
    QVERIFY2(form->validationMessage().contains("batch_size: must be at least 1"), qPrintable(form->validationMessage()));
    QVERIFY(!validity.isEmpty() && !validity.last().at(0).toBool());
    QVERIFY(!w.findChild<QPushButton*>("run")->isEnabled());
    QVERIFY(w.findChild<QLabel*>("validationMessage")->text().contains("batch_size"));
    qobject_cast<QSpinBox*>(form->editor("batch_size"))->setValue(32);
    QVERIFY(form->isValid());
    QVERIFY(w.findChild<QPushButton*>("run")->isEnabled());
    // Another knob, another message; run() refuses while invalid.
    qobject_cast<QDoubleSpinBox*>(form->editor("vram_max_usage"))->setValue(0.2);
    QCOMPARE(form->invalidKnob(), QString("vram_max_usage"));
    QSignalSpy started(&w, &LoaderWorkspace::runStarted);
    w.run();
    QVERIFY(started.isEmpty());
    QVERIFY(w.statusText().startsWith("Fix the options first: vram_max_usage"));
    qobject_cast<QSpinBox*>(form->editor("shard_rank"))->setValue(3);  // the first error stays reported
    qobject_cast<QDoubleSpinBox*>(form->editor("vram_max_usage"))->setValue(0.9);
    QCOMPARE(form->invalidKnob(), QString("shard_rank"));
    QVERIFY(form->validationMessage().contains("shard_world_size 1"));
  }

  void badDatasetsFailReadably() {
    LoaderWorkspace w;
    w.form()->setOptions(smallOptions());
    QSignalSpy failed(&w, &LoaderWorkspace::runFailed);
    w.setDataset(dir_.filePath("missing.npy"));
    w.run();
    QVERIFY(waitFor(failed));
    QVERIFY2(failed.last().at(0).toString().contains("missing.npy"), qPrintable(failed.last().at(0).toString()));
    QVERIFY(w.statusText().startsWith("Failed:"));
    w.setDataset("synthetic:10,abc");
    w.run();
    QVERIFY(waitForCount(failed, 2));
    QVERIFY2(failed.last().at(0).toString().contains("synthetic"), qPrintable(failed.last().at(0).toString()));
    w.setDataset("synthetic:1000,4");
    w.setDevices("tpu:0");
    w.run();
    QVERIFY(waitForCount(failed, 3));
    QVERIFY2(failed.last().at(0).toString().contains("tpu:0"), qPrintable(failed.last().at(0).toString()));
  }

  // A dataset URL's password is never shown: not in "Opening …", the log's "run:" line or the
  // error (the Checkpoints workspace hid it; this one showed the spec as typed).
  void datasetUrlSecretsAreNotShown() {
    qputenv("STOKER_HTTP_ATTEMPTS", "1");
    LoaderWorkspace w;
    w.form()->setOptions(smallOptions());
    QSignalSpy failed(&w, &LoaderWorkspace::runFailed);
    w.setDataset("tokens:https://alice:hunter2@127.0.0.1:1/t.bin,ctx=8");
    w.run();
    const QString opening = w.statusText();
    QVERIFY(waitFor(failed));
    qunsetenv("STOKER_HTTP_ATTEMPTS");
    QVERIFY2(opening.contains("127.0.0.1") && !opening.contains("hunter2"), qPrintable(opening));
    QVERIFY2(!w.statusText().contains("hunter2"), qPrintable(w.statusText()));
    QVERIFY2(!failed.last().at(0).toString().contains("hunter2"), qPrintable(failed.last().at(0).toString()));
    for (const QPlainTextEdit* log : w.findChildren<QPlainTextEdit*>())
      QVERIFY2(!log->toPlainText().contains("hunter2"), qPrintable(log->toPlainText()));
  }

  void importExportAndSnippets() {
    LoaderWorkspace w;
    LoaderOptions o = smallOptions();
    o.batch_size = 48;
    w.form()->setOptions(o);
    const QString path = dir_.filePath("opts.json");
    QVERIFY(w.exportOptions(path));
    w.form()->setOptions(LoaderOptions{});
    QVERIFY(w.importOptions(path));
    QCOMPARE(w.form()->options().batch_size, 48);
    QVERIFY(test::writeFile(dir_.filePath("bad.json"), R"({"batch_size": "many"})"));
    QVERIFY(!w.importOptions(dir_.filePath("bad.json")));
    QVERIFY2(w.statusText().contains("batch_size"), qPrintable(w.statusText()));
    QCOMPARE(w.form()->options().batch_size, 48);  // a failed import leaves the form alone
    QVERIFY(test::writeFile(dir_.filePath("notjson.json"), "{"));
    QVERIFY(!w.importOptions(dir_.filePath("notjson.json")));
    QVERIFY(w.pytorchSnippet().contains("DataLoader(") && w.pytorchSnippet().contains("batch_size=48"));
    QVERIFY(w.cppSnippet().contains("batchSize(48)"));
    QVERIFY2(w.stokerSnippet().contains("stoker.Loader(") && w.stokerSnippet().contains("batch_size=48"),
             qPrintable(w.stokerSnippet()));
    // Saved with a weighted sampler, the snippet comes with the weights file it loads.
    LoaderOptions weighted = smallOptions();
    weighted.sampler_type = SamplerType::Weighted;
    weighted.weights = {1, 2, 3};
    w.form()->setOptions(weighted);
    const QString py = dir_.filePath("train_loader.py"), cpp = dir_.filePath("train_loader.cpp");
    QVERIFY2(w.saveSnippet(py, LoaderWorkspace::Snippet::PyTorch), qPrintable(w.statusText()));
    const QString weightsFile = dir_.filePath("train_loader.weights.json");
    QVERIFY(stoker::test::readFile(py).contains(("with open(\"" + weightsFile + "\")").toUtf8()));
    QCOMPARE(stoker::test::readFile(weightsFile).trimmed(), QByteArray("[1.0,2.0,3.0]"));
    QVERIFY(w.statusText().contains("and the weights it loads"));
    QVERIFY(w.saveSnippet(cpp, LoaderWorkspace::Snippet::Cpp));
    QVERIFY(stoker::test::readFile(cpp).contains(("loadWeightsFile(\"" + weightsFile + "\")").toUtf8()));
    const QString stokerPy = dir_.filePath("stoker_loader.py");
    QVERIFY(w.saveSnippet(stokerPy, LoaderWorkspace::Snippet::Stoker));
    QVERIFY(stoker::test::readFile(stokerPy).contains("weights=weights"));
    QVERIFY(!w.saveSnippet(dir_.filePath("missing/dir/x.py"), LoaderWorkspace::Snippet::PyTorch));
    QVERIFY2(w.statusText().startsWith("Cannot save the snippet:"), qPrintable(w.statusText()));
    w.applyPreset("debug_mode");
    QCOMPARE(w.form()->options().num_workers, 0);
  }

  void sweepRanksCombinationsAndAppliesTheBest() {
    LoaderWorkspace w;
    w.setDataset("synthetic:3000,3x16x16,f32,5");
    w.setDevices("cpu");
    w.setEpochs(2);
    w.form()->setOptions(smallOptions());
    w.setMeasurePrecision(quickMeasure());
    w.setSweep("num_workers", "0,2", "loading_mode", "resident,streaming");
    QSignalSpy done(&w, &LoaderWorkspace::sweepFinished);
    w.runSweep();
    QVERIFY(waitFor(done, 120000));
    QTableWidget* t = w.sweepTable();
    QCOMPARE(t->rowCount(), 4);
    QCOMPARE(t->horizontalHeaderItem(0)->text(), QString("num_workers"));
    QCOMPARE(t->horizontalHeaderItem(3)->text(), QString("± 95 %"));
    QCOMPARE(t->horizontalHeaderItem(4)->text(), QString("verdict"));
    QCOMPARE(t->columnCount(), 9);  // 2 knobs, samples/s, ±, verdict, p10–p90, MB/s, mode, error: no unnamed column
    QCOMPARE(t->horizontalHeaderItem(8)->text(), QString("error"));
    for (int r = 0; r < 4; ++r) {
      QVERIFY2(t->item(r, 3) && t->item(r, 3)->text().startsWith("± "), qPrintable(QString::number(r)));
      QVERIFY(t->item(r, 5) && t->item(r, 5)->text().contains("–"));  // p10–p90
    }
    // The fastest row says so; rows whose interval overlaps it say "no clear difference".
    QCOMPARE(t->item(done.first().at(0).toInt(), 4)->text(), QString("fastest"));
    for (int r : w.similarSweepRows()) QCOMPARE(t->item(r, 4)->text(), QString("no clear difference"));
    const int best = done.first().at(0).toInt();
    QVERIFY(best >= 0);
    QCOMPARE(w.bestSweepRow(), best);
    double bestRate = 0;
    for (int r = 0; r < 4; ++r) bestRate = std::max(bestRate, t->item(r, 2)->data(Qt::UserRole).toDouble());
    QCOMPARE(t->item(best, 2)->data(Qt::UserRole).toDouble(), bestRate);
    QCOMPARE(t->item(best, 2)->text(), QLocale().toString(bestRate, 'f', 0));  // grouped, as everywhere
    QVERIFY(t->item(best, 0)->font().bold());
    QCOMPARE(w.plots()->trialPoints().size(), 4);  // every point on the plots as it was measured
    QVERIFY2(w.plots()->markers().first().label.startsWith("num_workers "), qPrintable(w.plots()->markers().first().label));
    QVERIFY(w.findChild<QPushButton*>("applyBest")->isEnabled());
    w.setDevices("sim:0");  // another target: the sweep's best is not offered
    QVERIFY(!w.findChild<QPushButton*>("applyBest")->isEnabled());
    w.setDevices("cpu");
    QVERIFY(w.findChild<QPushButton*>("applyBest")->isEnabled());
    LoaderOptions seeded = w.form()->options();
    seeded.seed = 18446744073709551557ULL;  // uint64, past what a QJsonValue holds: kept whole by Apply best
    w.form()->setOptions(seeded);
    w.applyBestSweepRow();
    QCOMPARE(w.form()->options().seed, std::uint64_t(18446744073709551557ULL));
    QCOMPARE(w.form()->options().num_workers, t->item(best, 0)->text().toInt());
    QCOMPARE(QString::fromStdString(loadingModeName(w.form()->options().loading_mode)), t->item(best, 1)->text());
    saveScreenshot(&w, "loader-sweep");

    // A value of the wrong type is refused, naming the knob.
    QSignalSpy failed(&w, &LoaderWorkspace::runFailed);
    w.setSweep("prefetch", "two,4");
    w.runSweep();
    QVERIFY(waitFor(failed));
    QVERIFY2(failed.last().at(0).toString().startsWith("prefetch:"), qPrintable(failed.last().at(0).toString()));
  }

  // A sweep over reader_mode measured one dataset on every row; the dataset is now opened
  // again for each reader setting, and the log says so.
  void sweepOverReaderModeReopensTheDataset() {
    LoaderWorkspace w;
    w.setDataset("synthetic:2000,16");
    w.setDevices("cpu");
    w.setEpochs(2);
    w.form()->setOptions(smallOptions());
    w.setMeasurePrecision(quickMeasure());
    w.setSweep("reader_mode", "mmap,read");
    QSignalSpy notes(w.runner(), &LoaderRunner::note);
    QSignalSpy done(&w, &LoaderWorkspace::sweepFinished);
    w.runSweep();
    QVERIFY(waitFor(done, 120000));
    QCOMPARE(w.sweepTable()->rowCount(), 2);
    QCOMPARE(notes.size(), 1);
    QVERIFY2(notes.first().at(0).toString().contains("sweep row 2: dataset opened again"),
             qPrintable(notes.first().at(0).toString()));
  }

  // Knobs that do nothing with the other settings are greyed out with the reason in their
  // tooltip, instead of being accepted silently.
  void formGreysOutKnobsThatDoNothing() {
    LoaderWorkspace w;
    w.setDevices("cpu");
    LoaderOptions o = smallOptions();
    o.num_workers = 0;
    w.form()->setOptions(o);
    LoaderOptionsForm* f = w.form();
    auto greyed = [f](const char* knob) { return !f->editor(knob)->isEnabled() && !f->inactiveReason(knob).isEmpty(); };
    QVERIFY(greyed("prefetch"));
    QVERIFY(f->inactiveReason("prefetch").contains("num_workers = 0"));
    QVERIFY(f->editor("prefetch")->toolTip().contains("Greyed out"));
    QVERIFY(greyed("pin_memory"));
    QVERIFY(f->inactiveReason("pin_memory").contains("cpu"));
    QVERIFY(greyed("shard_rank") && greyed("shard_world_size"));  // sampler_type random
    QVERIFY(greyed("part_size"));                                // reader_mode mmap
    // Change what made them moot: they come back.
    qobject_cast<QSpinBox*>(f->editor("num_workers"))->setValue(2);
    QVERIFY(f->editor("prefetch")->isEnabled());
    QVERIFY(f->inactiveReason("prefetch").isEmpty());
    QVERIFY(!f->editor("prefetch")->toolTip().contains("Greyed out"));
    w.setDevices("sim:0");
    QVERIFY(f->editor("pin_memory")->isEnabled());
    w.setDevices("cpu, cpu");
    QVERIFY(!f->editor("pin_memory")->isEnabled());
    qobject_cast<QComboBox*>(f->editor("sampler_type"))->setCurrentText("distributed");
    QVERIFY(f->editor("shard_rank")->isEnabled() && f->editor("shard_world_size")->isEnabled());
    // enable_transforms says what it does, and gives way to transforms (which decide what runs).
    bool labelled = false;
    for (auto* l : f->findChildren<QLabel*>()) labelled |= l->text() == "flip (enable_transforms)";
    QVERIFY(labelled);
    QVERIFY(f->editor("enable_transforms")->isEnabled());
    qobject_cast<QComboBox*>(f->editor("transforms"))->setCurrentText("Resize(256),CenterCrop(224),Normalize(imagenet)");
    QVERIFY(!f->editor("enable_transforms")->isEnabled());
    QVERIFY2(f->inactiveReason("enable_transforms").contains("transforms decide"), qPrintable(f->inactiveReason("enable_transforms")));
    QVERIFY(f->isValid());
  }

  // Several devices each run one distributed shard: a weighted sampler cannot be split that way
  // and is refused naming the knob (it used to be replaced silently).
  void severalDevicesRefuseAWeightedSampler() {
    LoaderWorkspace w;
    w.setDataset("synthetic:100,4");
    w.setDevices("sim:0,sim:1");
    LoaderOptions o = smallOptions();
    o.sampler_type = SamplerType::Weighted;
    o.weights.assign(100, 1.0);
    w.form()->setOptions(o);
    QVERIFY2(w.form()->isValid(), qPrintable(w.form()->validationMessage()));
    QSignalSpy failed(&w, &LoaderWorkspace::runFailed);
    w.run();
    QVERIFY(waitFor(failed));
    QVERIFY2(failed.first().at(0).toString().startsWith("sampler_type: weighted sampling cannot be split across 2 devices"),
             qPrintable(failed.first().at(0).toString()));
  }

  // On cpu the device's total is host RAM (24 GiB here): drawn beside used/reserved it
  // flattened them to zero. The total is now a percentage on the right axis.
  void memoryPlotKeepsUsedReadable() {
    TelemetryPlots plots;
    plots.resize(800, 500);
    plots.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plots));
    std::vector<TelemetryRecord> records;
    for (int i = 0; i < 10; ++i) {
      TelemetryRecord r;
      r.time = 1000 + 0.1 * i;
      r.device = "cpu";
      r.mem_used = (300LL + i) << 20;
      r.mem_reserved = 400LL << 20;
      r.mem_total = 24LL << 30;
      records.push_back(r);
    }
    plots.addRecords(records);
    const int before = plots.replots();
    QVERIFY(waitUntil([&] { return plots.replots() > before; }));
    const auto memory = TelemetryPlots::Memory;
    const double top = plots.axisUpper(memory, false);  // MiB
    QVERIFY2(top >= 400 && top < 1000, qPrintable(QString::number(top)));
    QVERIFY(plots.onRightAxis(memory, 2) && !plots.onRightAxis(memory, 0) && !plots.onRightAxis(memory, 1));
    QCOMPARE(plots.axisLabel(memory, true), QString("% of total"));
    QVERIFY(qAbs(plots.lastValue("cpu", memory, 2) - 100.0 * 309 / (24 * 1024)) < 1e-9);
    QCOMPARE(plots.lastValue("cpu", memory, 0), 309.0);
  }

  // Issue 39: one 250,000 samples/s record in a steady ~3,000 must not flatten the line. The axis
  // scales to the steady values, the spike is clipped and marked on the edge, and a change
  // marker placed in the same frame keeps its label on every plot (it went missing there). A
  // 17 s silence is a gap, not a line across it.
  void plotsScaleToWhatMattersAndShowGaps() {
    TelemetryPlots plots;
    plots.resize(900, 520);
    plots.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plots));
    const auto records = cpuRecords([](int i) { return i == 50 ? 250000.0 : 3000.0 + (i % 7) * 10; });
    plots.addRecords(records);
    plots.addMarker(1000 + 8, "num_workers 1 \u2192 2");
    const int before = plots.replots();
    QVERIFY(waitUntil([&] { return plots.replots() > before; }));
    const auto tp = TelemetryPlots::Throughput;
    const double top = plots.axisUpper(tp, false);
    QVERIFY2(top >= 3060 && top < 4000, qPrintable(QString::number(top)));  // not 275,000
    QCOMPARE(plots.clippedPoints(tp), 1);
    QCOMPARE(plots.clippedPoints(TelemetryPlots::Latency), 0);
    for (int p = 0; p < TelemetryPlots::PlotCount; ++p) {
      const auto labels = plots.markerLabels(static_cast<TelemetryPlots::Plot>(p));
      QVERIFY2(labels.size() == 1 && labels[0].first.contains("num_workers 1"), qPrintable(QString("plot %1").arg(p)));
      QVERIFY(plots.plotArea(static_cast<TelemetryPlots::Plot>(p)).adjusted(-1, -1, 1, 1).contains(labels[0].second));
    }
    // A steady level change is not an outlier: once the new rate fills the window it is the scale.
    std::vector<TelemetryRecord> later;
    for (int i = 1; i <= 20; ++i) {
      TelemetryRecord r = records.back();
      r.time = 1010 + 17 + 0.1 * i;  // after 17 s of silence
      r.samples_per_s = 3000;
      later.push_back(r);
    }
    plots.addRecords(later);
    const auto pts = plots.points("cpu", tp);
    int gaps = 0;
    for (int i = 1; i < pts.size(); ++i)
      if (std::isnan(pts[i].y())) {
        ++gaps;
        QVERIFY(pts[i].x() > 1009.9 - 1000 && pts[i].x() < 1027 - 1000);
      }
    QCOMPARE(gaps, 1);

    // A real jump shows at once (the last 3 s are never clipped), and a measured setting far
    // above the rest (a sweep's best) is a diamond inside the axis, not a clipped triangle.
    TelemetryRecord jump = later.back();
    jump.time += 0.1;
    jump.samples_per_s = 30000;
    plots.addRecords({jump});
    plots.addTrial(jump.time, "num_workers 8: 45,000/s", 45000);
    const int again = plots.replots();
    QVERIFY(waitUntil([&] { return plots.replots() > again; }));
    QVERIFY2(plots.axisUpper(tp, false) >= 45000, qPrintable(QString::number(plots.axisUpper(tp, false))));
  }

  // Markers close together and at the right edge: every visible label lies inside its plot and
  // none overlaps another; the newest is always shown (crowded older ones may hide, lines stay).
  void markerLabelsNeverOverlapNorLeaveThePlot() {
    TelemetryPlots plots;
    plots.resize(700, 420);
    plots.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plots));
    const auto records = cpuRecords([](int i) { return 1000.0 + i; });
    plots.addRecords(records);
    for (double at : {1.0, 1.4, 1.8, 5.0, 9.6, 9.9})
      plots.addMarker(1000 + at, QString("num_workers %1 \u2192 %2").arg(at).arg(at + 1));
    for (int round = 0; round < 2; ++round) {  // the second lays out with the plots' final geometry
      const int before = plots.replots();
      plots.addRecords({records.back()});
      QVERIFY(waitUntil([&] { return plots.replots() > before; }));
    }
    QCOMPARE(plots.markers().size(), 6);
    for (int p = 0; p < TelemetryPlots::PlotCount; ++p) {
      const auto plot = static_cast<TelemetryPlots::Plot>(p);
      const QRectF area = plots.plotArea(plot);
      std::vector<QRectF> shown;
      QString newest;
      for (const auto& [text, box] : plots.markerLabels(plot)) {
        QVERIFY2(area.adjusted(-1, -1, 1, 1).contains(box), qPrintable(text));
        for (const QRectF& other : shown) QVERIFY2(!other.intersects(box.adjusted(1, 1, -1, -1)), qPrintable(text));
        shown.push_back(box);
        if (text.contains("9.9")) newest = text;
      }
      QVERIFY2(!newest.isEmpty(), qPrintable(QString("plot %1: the newest label is hidden").arg(p)));
      QVERIFY(shown.size() >= 3);
    }
  }

  // The Auto-tune tab on a dataset whose optimum is designed in (storage latency per sample, no
  // CPU: more workers with a deep enough ring win): it searches within its budget, lists every
  // trial, says how sure it is, and Apply puts the best into the form.
  void autoTuneFindsAndAppliesAFasterSetting() {
    LoaderWorkspace w;
    w.setDataset("synthetic:1000000,8,f32,0,400");
    w.setDevices("cpu");
    LoaderOptions o = smallOptions();
    o.num_workers = 0;
    o.prefetch = 1;
    o.batch_size = 32;
    o.loading_mode = LoadingMode::Streaming;
    w.form()->setOptions(o);
    w.setMeasurePrecision(quickMeasure());
    w.resize(1200, 800);
    w.setTuneBudget(20);
    QSignalSpy done(&w, &LoaderWorkspace::tuneFinished);
    QSignalSpy result(w.runner(), &LoaderRunner::tuneFinished);
    w.runAutoTune();
    QVERIFY(waitFor(done, 90000));
    QVERIFY(done.first().at(0).toBool());
    const double best = result.first().at(2).toDouble(), start = result.first().at(4).toDouble();
    QVERIFY2(best > 2 * start, qPrintable(QString("best %1, start %2").arg(best).arg(start)));
    QVERIFY(w.tuneTable()->rowCount() >= 2);
    QCOMPARE(w.tuneTable()->item(0, 3)->text(), QString("(start)"));
    QVERIFY2(w.tuneSummary().startsWith("Best: ") && w.tuneSummary().contains("num_workers 0 \u2192") &&
                 w.tuneSummary().contains("Clearly faster than the start"),
             qPrintable(w.tuneSummary()));
    // The plots showed the search as it went; the bottleneck panel stays out of it.
    QVERIFY2(w.plots()->pointCount("cpu", TelemetryPlots::Throughput) > 10,
             qPrintable(QString::number(w.plots()->pointCount("cpu", TelemetryPlots::Throughput))));
    QVERIFY(w.bottleneckText().isEmpty());
    // Each measured setting is on the plots: a diamond at its rate and a labelled marker.
    QCOMPARE(w.plots()->trialPoints().size(), w.tuneTable()->rowCount());
    QCOMPARE(w.plots()->markers().size(), w.tuneTable()->rowCount());
    QVERIFY2(w.plots()->markers().first().label.startsWith("start: "), qPrintable(w.plots()->markers().first().label));
    QVERIFY(w.findChild<QPushButton*>("applyTuned")->isEnabled());
    QVERIFY2(w.statusText().contains("Apply copies"), qPrintable(w.statusText()));
    // Results of another dataset are not offered; back on the tuned one, they are again.
    w.setDataset("synthetic:1000,8");
    QVERIFY(!w.findChild<QPushButton*>("applyTuned")->isEnabled());
    QVERIFY(w.findChild<QPushButton*>("applyTuned")->toolTip().contains("run it again for synthetic:1000,8"));
    w.applyTuned();
    QCOMPARE(w.form()->options().num_workers, 0);  // nothing applied
    w.setDataset("synthetic:1000000,8,f32,0,400");
    QVERIFY(w.findChild<QPushButton*>("applyTuned")->isEnabled());
    w.applyTuned();
    QVERIFY(w.form()->options().num_workers >= 1);
    QVERIFY(w.form()->options().prefetch >= 2);
    saveScreenshot(&w, "loader-autotune");
  }

  void settingsPersist() {
    {
      LoaderWorkspace w;
      w.setDataset("synthetic:777,4");
      w.setDevices("sim:0");
      LoaderOptions o = smallOptions();
      o.batch_size = 77;
      w.form()->setOptions(o);
    }  // saved when the workspace goes
    LoaderWorkspace again;
    QCOMPARE(again.dataset(), QString("synthetic:777,4"));
    QCOMPARE(again.form()->options().batch_size, 77);
  }

  // Issue 40: no secret in a saved session. A dataset URL with a password or a presigned
  // signature is neither saved as the workspace's dataset nor kept among the recent ones (a
  // plain URL is); the field keeps it for this session.
  void aUrlWithASecretIsNotSaved() {
    QSettings().remove("loader/recentDatasets");
    const QString secret = "tokens:https://ann:pw-in-url@data.example/t.bin?X-Amz-Signature=sig-in-url,ctx=8";
    const QString plain = "tokens:https://data.example/t.bin,ctx=8";
    {
      LoaderWorkspace w;
      w.setDataset("synthetic:555,4");
    }  // saved when the workspace goes
    {
      LoaderWorkspace w;
      auto* picker = w.findChild<DatasetPicker*>("dataset");
      QVERIFY(picker);
      picker->remember(plain);
      picker->remember(secret);
      w.setDataset(secret);
      QCOMPARE(w.dataset(), secret);
    }  // saved when the workspace goes
    QSettings s;
    QCOMPARE(s.value("loader/dataset").toString(), QString("synthetic:555,4"));
    const QStringList recent = s.value("loader/recentDatasets").toStringList();
    QVERIFY2(recent.contains(plain), qPrintable(recent.join(" | ")));
    for (const QString& key : s.allKeys())
      QVERIFY2(!s.value(key).toString().contains("pw-in-url") && !s.value(key).toStringList().join(" ").contains("sig-in-url"),
               qPrintable(key));
  }

  // Issue 39: the PyTorch export runs as pasted. On cpu it pins nothing; Fashion-MNIST is read
  // from Debian's files as Stoker reads them, and the script's first batches are Stoker's
  // samples (the same tensors). A token file, which PyTorch cannot read, stops with a message
  // naming the stoker export.
  void pytorchExportRunsAsPasted() {
    QVERIFY2(stoker::test::pythonTorchAvailable(), "Debian's python3-torch is needed");
    if (!QFile::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
      QSKIP("Debian's dataset-fashion-mnist is not installed");
    LoaderWorkspace w;
    w.setDataset("fashion-mnist");
    w.setDevices("cpu");
    LoaderOptions o = smallOptions();
    o.pin_memory = true;
    o.non_blocking = true;
    o.shuffle = true;
    o.seed = 11;
    w.form()->setOptions(o);
    const QString script = w.pytorchSnippet();
    QVERIFY2(script.contains("pin_memory=False") && !script.contains("pin_memory=True"), qPrintable(script));
    const QString path = dir_.filePath("as_pasted.py");
    QVERIFY(w.saveSnippet(path, LoaderWorkspace::Snippet::PyTorch));
    // Run the saved file as it is, then print the first batch's sums for comparison.
    QFile f(path);
    QVERIFY(f.open(QIODevice::Append));
    f.write("\nset_epoch(0)\nimages, labels = next(iter(loader))\n"
            "print(images.shape[0], '%.1f' % float(images.double().sum()), ','.join(map(str, labels.tolist())))\n");
    f.close();
    const auto r = stoker::test::runPythonArgs({path});
    QVERIFY2(r.exitCode == 0, qPrintable(QString::fromUtf8(r.err)));
    Loader loader(openDataset("fashion-mnist", o), o, DeviceSpec::parse("cpu"));
    auto epoch = loader.epoch(0);
    auto it = epoch.begin();  // the iterator holds the batch
    const Batch& first = *it;
    QStringList labels;
    const at::Tensor l = first.tensors.at(1).contiguous();
    for (std::int64_t i = 0; i < l.size(0); ++i) labels << QString::number(l.data_ptr<std::int64_t>()[i]);
    const QString expected = QString("%1 %2 %3")
                                 .arg(first.size())
                                 .arg(QString::number(first.tensors.at(0).to(at::kDouble).sum().item<double>(), 'f', 1))
                                 .arg(labels.join(','));
    QCOMPARE(QString::fromUtf8(r.out).trimmed(), expected);

    // A synthetic spec runs too: the same count, shape, dtype and labels; a spec that is not one
    // is refused in Python, never pasted into the code.
    w.setDataset("synthetic:50,3x4x4,u8");
    QVERIFY(w.saveSnippet(path, LoaderWorkspace::Snippet::PyTorch));
    QVERIFY(f.open(QIODevice::Append));
    f.write("\nx, y = dataset[13]\nprint(len(dataset), tuple(x.shape), x.dtype, y)\n");
    f.close();
    const auto synthetic = stoker::test::runPythonArgs({path});
    QVERIFY2(synthetic.exitCode == 0, synthetic.err.constData());
    QCOMPARE(QString::fromUtf8(synthetic.out).trimmed(), QString("50 (3, 4, 4) torch.uint8 3"));
    w.setDataset("synthetic:__import__('os').system('touch pwned'),1");
    QVERIFY2(!w.pytorchSnippet().contains("__import__('os')") || w.pytorchSnippet().contains("raise ValueError("),
             qPrintable(w.pytorchSnippet()));
    QVERIFY(!w.pytorchSnippet().contains("torch.rand((__import__"));

    w.setDataset("tokens:/data/owt/train.bin,ctx=64");
    QVERIFY(w.saveSnippet(path, LoaderWorkspace::Snippet::PyTorch));
    const auto tokens = stoker::test::runPythonArgs({path});
    QCOMPARE(tokens.exitCode, 1);
    QVERIFY2(tokens.err.contains("NotImplementedError: PyTorch has no built-in reader for tokens") &&
                 tokens.err.contains("stoker.Loader"),
             tokens.err.constData());
  }

  // Issue 39: a newcomer finds their data from the list, never by typing a spec. Each browse
  // entry opens its dialog and writes the spec; an image folder brings the train transforms;
  // cancelling puts back what was there; a run puts its dataset under "Recent".
  // "Remote (s3://, https://)…": the dialog composes the spec and its check says what it found, or
  // the core's error, off the GUI thread; the picker writes the spec and offers image transforms.
  void remoteEntryChecksAccess() {
    RemoteDatasetDialog dialog;
    auto* kind = dialog.findChild<QComboBox*>("remoteKind");
    auto* url = dialog.findChild<QLineEdit*>("remoteUrl");
    QVERIFY(kind && url);
    kind->setCurrentIndex(2);  // token file
    const QString tokens = dir_.filePath("remote-tokens.bin");
    QVERIFY(test::writeFile(tokens, QByteArray(2 * 4097, '\1')));
    url->setText(tokens + ",ctx=64");
    QCOMPARE(dialog.spec(), "tokens:" + tokens + ",ctx=64");
    dialog.check();
    QTRY_VERIFY_WITH_TIMEOUT(!dialog.checking(), 20000);
    QVERIFY2(dialog.resultText().startsWith("64 samples, 4,097 tokens"), qPrintable(dialog.resultText()));
    qputenv("STOKER_HTTP_ATTEMPTS", "1");
    url->setText("http://127.0.0.1:" + QString::number(test::freePort()) + "/t.bin");
    dialog.check();
    QTRY_VERIFY_WITH_TIMEOUT(!dialog.checking(), 20000);
    qunsetenv("STOKER_HTTP_ATTEMPTS");
    QVERIFY2(dialog.resultText().contains("Couldn't connect"), qPrintable(dialog.resultText()));
    {
      // A server that takes the connection and never answers: closing the dialog stops the check
      // and joins its thread at once (its HTTP wait is cancelled), no work left behind.
      const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof a;
      QVERIFY(silent >= 0 && ::bind(silent, reinterpret_cast<sockaddr*>(&a), len) == 0 && ::listen(silent, 4) == 0 &&
              ::getsockname(silent, reinterpret_cast<sockaddr*>(&a), &len) == 0);
      auto* hung = new RemoteDatasetDialog;
      hung->findChild<QComboBox*>("remoteKind")->setCurrentIndex(2);
      hung->findChild<QLineEdit*>("remoteUrl")->setText("http://127.0.0.1:" + QString::number(ntohs(a.sin_port)) + "/t.bin");
      hung->check();
      QTest::qWait(300);
      QVERIFY(hung->checking());
      QElapsedTimer closing;
      closing.start();
      delete hung;
      QVERIFY2(closing.elapsed() < 3000, qPrintable(QString::number(closing.elapsed())));
      ::close(silent);
    }

    LoaderWorkspace w;
    auto* picker = w.findChild<DatasetPicker*>("dataset");
    picker->setChooser([](DatasetPicker::Browse b) {
      return b == DatasetPicker::Browse::Remote ? QString("wds:s3://bucket/train-{000..009}.tar") : QString();
    });
    const int i = picker->findText(DatasetPicker::browseLabel(DatasetPicker::Browse::Remote));
    QVERIFY(i >= 0);
    picker->setCurrentIndex(i);
    Q_EMIT picker->activated(i);
    QCOMPARE(w.dataset(), QString("wds:s3://bucket/train-{000..009}.tar"));
    QVERIFY(!w.form()->options().transforms.empty());  // an image dataset: transforms offered
    QVERIFY(w.findChild<QWidget*>("max_inflight_parts")->isEnabled());  // live for a remote dataset
    QVERIFY(w.findChild<QWidget*>("cache_dir")->isEnabled());
    // The Stages tab names the read stage for what it is with a remote dataset.
    QCOMPARE(w.stages()->stageLegend(0), QString("read (network)"));
    stagesLegendLeavesTheBarsTheirHeight(w.stages());
    w.setDataset("synthetic:64,3x8x8");
    QCOMPARE(w.stages()->stageLegend(0), QString("read"));
    QVERIFY(!w.findChild<QWidget*>("cache_dir")->isEnabled());
  }

  // The Stages legend beside the bars, whole, at the size the tab has at 1280 x 800 (590 x 165).
  // In one row under them it was clipped ("read (networ"); in two rows under them it left the
  // bars 39 px of that height.
  static void stagesLegendLeavesTheBarsTheirHeight(StageBreakdownView* stages) {
    QWidget* parent = stages->parentWidget();
    stages->setParent(nullptr);
    stages->resize(590, 165);
    stages->show();
    QVERIFY(QTest::qWaitForWindowExposed(stages));
    QTest::qWait(100);  // the plot lays itself out on its (queued) replot
    const QRect bars = stages->barsArea(), legend = stages->legendArea();
    QVERIFY2(bars.height() >= 70 && legend.left() >= bars.right() && stages->rect().contains(legend) &&
                 stages->legendEntriesWhole(),
             qPrintable(QString("bars %1 px high, %2..%3 wide; legend at x %4, %5 x %6, in a plot of %7 x %8; entries whole: %9")
                            .arg(bars.height()).arg(bars.left()).arg(bars.right()).arg(legend.left())
                            .arg(legend.width()).arg(legend.height()).arg(stages->width())
                            .arg(stages->height()).arg(stages->legendEntriesWhole())));
    stages->hide();
    stages->setParent(parent);
  }

  // A long open's progress in the status line, in the three forms the core reports: bytes
  // downloaded, pieces counted against their total, and a count whose total is not known.
  void openingProgressShowsInTheStatusLine() {
    LoaderWorkspace w;
    Q_EMIT w.runner()->opening(3 << 20, 10 << 20, QString());
    QVERIFY2(w.statusText().startsWith("Opening: 3.0 MiB of about 10.0 MiB downloaded"), qPrintable(w.statusText()));
    Q_EMIT w.runner()->opening(12, 80, "shards opened");
    QVERIFY2(w.statusText().startsWith("Opening: 12 of 80 shards opened"), qPrintable(w.statusText()));
    Q_EMIT w.runner()->opening(4000, 0, "objects listed");
    QVERIFY2(w.statusText().startsWith("Opening: 4000 objects listed"), qPrintable(w.statusText()));
  }

  void datasetPickerOffersTheWaysToFindData() {
    QSettings().remove("loader/recentDatasets");
    LoaderWorkspace w;
    auto* picker = w.findChild<DatasetPicker*>("dataset");
    QVERIFY(picker);
    QStringList items;
    for (int i = 0; i < picker->count(); ++i) items << picker->itemText(i);
    for (const char* entry : {"Image folder…", "WebDataset shards…", "Token file…", "Megatron dataset…", "Tensor file…",
                              "fashion-mnist"})
      QVERIFY2(items.contains(QString::fromUtf8(entry)), qPrintable(items.join(" | ")));

    QString answer;
    int asked = 0;
    picker->setChooser([&](DatasetPicker::Browse) {
      ++asked;
      return answer;
    });
    // The wheel over the field (scrolling the form) never steps onto an entry nor opens a dialog.
    w.setDataset("synthetic:100,4");
    for (int i = 0; i < 12; ++i) {
      QWheelEvent wheel(QPointF(5, 5), picker->mapToGlobal(QPointF(5, 5)), {}, QPoint(0, -120), Qt::NoButton,
                        Qt::NoModifier, Qt::NoScrollPhase, false);
      QCoreApplication::sendEvent(picker, &wheel);
    }
    QCOMPARE(w.dataset(), QString("synthetic:100,4"));
    QCOMPARE(asked, 0);
    auto pick = [&](const QString& label) {
      const int i = picker->findText(label);
      QVERIFY(i >= 0);
      picker->setCurrentIndex(i);
      Q_EMIT picker->activated(i);
    };
    w.setDataset("synthetic:100,4");
    LoaderOptions o = smallOptions();
    o.transforms.clear();
    w.form()->setOptions(o);
    answer = dir_.filePath("photos");
    pick("Image folder…");
    QCOMPARE(w.dataset(), "imagefolder:" + dir_.filePath("photos"));
    QVERIFY2(QString::fromStdString(w.form()->options().transforms).startsWith("RandomResizedCrop(224)"),
             w.form()->options().transforms.c_str());
    answer.clear();  // cancelled: the field keeps the last spec, not the entry's label
    pick("Token file…");
    QCOMPARE(w.dataset(), "imagefolder:" + dir_.filePath("photos"));
    answer = "/data/owt/train.bin";
    pick("Token file…");
    QCOMPARE(w.dataset(), QString("tokens:/data/owt/train.bin"));
    answer = "/data/gpt/corpus_text_document.idx";
    pick("Megatron dataset…");
    QCOMPARE(w.dataset(), QString("megatron:/data/gpt/corpus_text_document"));
    answer = dir_.path();  // a folder of shards
    pick("WebDataset shards…");
    QCOMPARE(w.dataset(), "wds:" + dir_.path() + "/*.tar");

    // A run remembers its dataset: it comes first under "Recent", here and in a new window.
    w.setDataset("synthetic:300,4");
    w.form()->setOptions(smallOptions());
    w.setEpochs(1);
    QSignalSpy finished(&w, &LoaderWorkspace::runFinished);
    w.run();
    QVERIFY(waitForCount(finished, 1, 30000));
    QCOMPARE(picker->recent().value(0), QString("synthetic:300,4"));
    LoaderWorkspace again;
    auto* picker2 = again.findChild<DatasetPicker*>("dataset");
    QVERIFY(picker2->findText("Recent") >= 0);
    QVERIFY(picker2->findText("synthetic:300,4") > picker2->findText("Recent"));
  }
};

QTEST_MAIN(TestLoaderWorkspace)
#include "tst_loader_workspace.moc"
