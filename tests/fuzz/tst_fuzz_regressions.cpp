// The fuzz targets (tests/fuzz/fuzz_*.cpp) run on every committed input: the seed corpus of each
// target (corpus/<target>/) and each input a fuzzer once failed on (regressions/<target>/). The
// same target code runs under libFuzzer in `packaging/stoker.sh fuzz`; here a refusal must be a
// clean Error(BadInput), and a crash, another exception or a broken invariant fails the row.
#include <QDir>
#include <QFile>
#include <QtTest>

#include "fuzz_target.h"

namespace {
QString fuzzDir() { return QStringLiteral(STOKER_FUZZ_DIR); }
QStringList inputsOf(const QString& kind, const QString& target) {
  QDir dir(fuzzDir() + "/" + kind + "/" + target);
  QStringList files;
  for (const QString& f : dir.entryList(QDir::Files, QDir::Name)) files << dir.filePath(f);
  return files;
}
}  // namespace

class TstFuzzRegressions : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  // Every target has seeds, and every corpus or regression folder belongs to a target (a renamed
  // target must not silently stop replaying its inputs).
  void everyTargetHasSeeds() {
    const auto names = stoker::fuzz::targetNames();
    QVERIFY2(names.size() >= 13, "the fuzz targets registered themselves");
    for (const auto& name : names)
      QVERIFY2(!inputsOf("corpus", QString::fromStdString(name)).isEmpty(),
               qPrintable("no seed corpus for fuzz target " + QString::fromStdString(name)));
    for (const QString& kind : {QStringLiteral("corpus"), QStringLiteral("regressions")})
      for (const QString& folder : QDir(fuzzDir() + "/" + kind).entryList(QDir::Dirs | QDir::NoDotAndDotDot))
        QVERIFY2(stoker::fuzz::findTarget(folder.toStdString()) != nullptr,
                 qPrintable(kind + "/" + folder + " names no fuzz target"));
  }

  void replay_data() {
    QTest::addColumn<QString>("target");
    QTest::addColumn<QString>("file");
    for (const auto& name : stoker::fuzz::targetNames()) {
      const QString target = QString::fromStdString(name);
      for (const QString& kind : {QStringLiteral("corpus"), QStringLiteral("regressions")})
        for (const QString& file : inputsOf(kind, target))
          QTest::newRow(qPrintable(target + ":" + kind + "/" + QFileInfo(file).fileName())) << target << file;
    }
  }

  void replay() {
    QFETCH(QString, target);
    QFETCH(QString, file);
    QFile f(file);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray bytes = f.readAll();
    const auto fn = stoker::fuzz::findTarget(target.toStdString());
    QVERIFY(fn);
    const std::string problem =
        stoker::fuzz::runTarget(fn, reinterpret_cast<const std::uint8_t*>(bytes.constData()), std::size_t(bytes.size()));
    QVERIFY2(problem.empty(), problem.c_str());
  }
};

QTEST_GUILESS_MAIN(TstFuzzRegressions)
#include "tst_fuzz_regressions.moc"
