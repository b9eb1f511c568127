// `stoker ckpt inspect` as users and scripts see it: exit status, the JSON
// contract, one-line errors naming the file, and speed whatever a file claims.
#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include "test_support.h"

using stoker::test::runStoker;
using stoker::test::safetensorsBytes;
using stoker::test::writeFile;

class TestCliInspect : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString tmp(const QString& n) const { return dir_.filePath(n); }

  // Runs inspect on bytes that must be refused: exit 2, one stderr line
  // "error: <file>: <reason containing expected>", nothing on stdout.
  void expectRefused(const QByteArray& bytes, const QString& expected) {
    const QString path = tmp("bad.safetensors");
    QVERIFY(writeFile(path, bytes));
    auto r = runStoker({"ckpt", "inspect", path, "--json"});
    QVERIFY(!r.crashed);
    QCOMPARE(r.exitCode, 2);
    QVERIFY(r.out.isEmpty());
    const QString err = QString::fromUtf8(r.err);
    QCOMPARE(err.count('\n'), 1);
    QVERIFY2(err.startsWith("error: " + path + ": ") && err.contains(expected), qPrintable(err));
    QVERIFY2(r.elapsedMs < 5000, qPrintable(QString("took %1 ms").arg(r.elapsedMs)));
  }

 private Q_SLOTS:
  void jsonForSafetensors() {
    auto r = runStoker({"ckpt", "inspect", stoker::test::samplesDir() + "/overall.safetensors", "--json"});
    QCOMPARE(r.exitCode, 0);
    QJsonParseError pe;
    QJsonObject doc = QJsonDocument::fromJson(r.out, &pe).object();
    QCOMPARE(pe.error, QJsonParseError::NoError);
    QCOMPARE(doc["format"].toString(), QString("safetensors"));
    QVERIFY(doc["world_size"].isNull());
    QCOMPARE(doc["metadata"].toObject()["test"].toString(), QString("a"));
    QJsonArray tensors = doc["tensors"].toArray();
    QCOMPARE(tensors.size(), 9);
    QJsonObject first = tensors[0].toObject();
    QCOMPARE(first["name"].toString(), QString("B"));
    QCOMPARE(first["dtype"].toString(), QString("U8"));
    QCOMPARE(first["shape"].toArray(), QJsonArray{6});
    QCOMPARE(first["nbytes"].toInt(), 6);
  }

  void jsonForPt() {
    QVERIFY2(stoker::test::pythonTorchAvailable(), "Debian's python3-torch is needed");
    auto py = stoker::test::runPython(
        "import sys, torch; torch.save(torch.nn.Linear(3, 2).state_dict(), sys.argv[1])", {tmp("m.pt")});
    QCOMPARE(py.exitCode, 0);
    auto r = runStoker({"ckpt", "inspect", tmp("m.pt"), "--json"});
    QCOMPARE(r.exitCode, 0);
    QJsonObject doc = QJsonDocument::fromJson(r.out).object();
    QCOMPARE(doc["format"].toString(), QString("pt"));
    QJsonArray tensors = doc["tensors"].toArray();
    QCOMPARE(tensors.size(), 2);
    QCOMPARE(tensors[0].toObject()["name"].toString(), QString("weight"));
    QCOMPARE(tensors[0].toObject()["shape"].toArray(), (QJsonArray{2, 3}));
  }

  void humanTable() {
    auto r = runStoker({"ckpt", "inspect", stoker::test::samplesDir() + "/f.safetensors"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY(r.out.contains("safetensors, 1 tensors"));
    QVERIFY(r.out.contains("F32"));
  }

  void refusesMalformedFiles() {
    expectRefused("abc", "shorter than the 8-byte");
    expectRefused(safetensorsBytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", QByteArray(4, 0)), "needs 8");
    expectRefused(safetensorsBytes(R"({"a":{"dtype":"X","shape":[2],"data_offsets":[0,8]}})", QByteArray(8, 0)), "unknown dtype");
    expectRefused(safetensorsBytes("{\"a\":" + QByteArray(200000, '[') + QByteArray(200000, ']') + "}", {}), "not an object");
  }

  void fastWhateverTheFileClaims() {
    // Claims a 99,999,999-byte header in a 16-byte file.
    QByteArray claim(8, 0);
    quint64 n = 99999999;
    for (int i = 0; i < 8; ++i) claim[i] = char((n >> (8 * i)) & 0xff);
    expectRefused(claim + "{}      ", "runs past the end of the file");
    // A tensor claiming exabytes of data.
    expectRefused(safetensorsBytes(R"({"a":{"dtype":"U8","shape":[1152921504606846976],"data_offsets":[0,1152921504606846976]}})", {}),
                  "runs past the end of the file");
  }

  void usageAndMissingFiles() {
    auto missing = runStoker({"ckpt", "inspect", tmp("absent.safetensors")});
    QCOMPARE(missing.exitCode, 2);
    QVERIFY(missing.err.startsWith("error: " + tmp("absent.safetensors").toUtf8() + ": "));
    auto noArgs = runStoker({});
    QCOMPARE(noArgs.exitCode, 2);
    QVERIFY(noArgs.err.startsWith("error: usage: "));
    auto badFlag = runStoker({"ckpt", "inspect", "--bogus"});
    QCOMPARE(badFlag.exitCode, 2);
    QCOMPARE(QString::fromUtf8(badFlag.err).count('\n'), 1);
    auto dir = runStoker({"ckpt", "inspect", dir_.path()});
    QCOMPARE(dir.exitCode, 2);
    QVERIFY(dir.err.contains("is not a checkpoint directory"));
    auto help = runStoker({"--help"});
    QCOMPARE(help.exitCode, 0);
    QVERIFY(help.out.contains("ckpt"));
  }

  void datasetInfoOnFashionMnist() {
    auto r = runStoker({"dataset", "info", "fashion-mnist", "--json"});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    QJsonObject doc = QJsonDocument::fromJson(r.out).object();
    QCOMPARE(doc["samples"].toInt(), 60000);
    QCOMPARE(doc["images"].toObject()["shape"].toArray(), (QJsonArray{60000, 1, 28, 28}));
    auto bad = runStoker({"dataset", "info", "imagenet"});
    QCOMPARE(bad.exitCode, 2);
    QVERIFY(bad.err.contains("unknown dataset"));
    // Other datasets have no splits: --split test summarised (or exported) the data given.
    for (const QString& command : {"info", "export"}) {
      QStringList args{"dataset", command, "synthetic:10,4"};
      if (command == "export") args << tmp("split.safetensors");
      const auto split = runStoker(args + QStringList{"--split", "test"});
      QCOMPARE(split.exitCode, 2);
      QVERIFY2(split.err.contains("--split: only fashion-mnist has splits"), split.err.constData());
    }
    QVERIFY(!QFile::exists(tmp("split.safetensors")));
  }

  void datasetExportThenInspect() {
    auto r = runStoker({"dataset", "export", "fashion-mnist", tmp("fm.safetensors"), "--split", "test"});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    auto inspect = runStoker({"ckpt", "inspect", tmp("fm.safetensors"), "--json"});
    QJsonObject doc = QJsonDocument::fromJson(inspect.out).object();
    QJsonArray tensors = doc["tensors"].toArray();
    QCOMPARE(tensors[0].toObject()["name"].toString(), QString("images"));
    QCOMPARE(tensors[0].toObject()["shape"].toArray(), (QJsonArray{10000, 1, 28, 28}));
    QCOMPARE(tensors[1].toObject()["dtype"].toString(), QString("I64"));
    QCOMPARE(doc["metadata"].toObject()["split"].toString(), QString("test"));
  }
};

QTEST_GUILESS_MAIN(TestCliInspect)
#include "tst_cli_inspect.moc"
