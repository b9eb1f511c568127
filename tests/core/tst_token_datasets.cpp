// tokens:FILE.bin (nanoGPT) and megatron:PREFIX (Megatron-LM's MMIDIDX indexed dataset): windows
// of ctx + 1 tokens, input/target shifted by one, Megatron documents packed across boundaries --
// checked against references computed here -- and every malformed file named.
#include <QtTest>

#include <ATen/ATen.h>

#include <cstring>
#include <fstream>
#include <numeric>

#include "data/dataset.h"
#include "data/datasets/token_datasets.h"
#include "expect_error.h"
#include "test_support.h"

using namespace stoker;
using namespace stoker::test;

namespace {

template <typename T>
QByteArray bytesOf(const std::vector<T>& v) {
  return QByteArray(reinterpret_cast<const char*>(v.data()), static_cast<int>(v.size() * sizeof(T)));
}

// One sample's fields.
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> sample(const Dataset& ds, std::int64_t i) {
  const auto ctx = static_cast<std::size_t>(ds.fields()[0].sampleShape[0]);
  std::vector<std::int64_t> input(ctx), target(ctx);
  std::uint8_t* dst[2] = {reinterpret_cast<std::uint8_t*>(input.data()), reinterpret_cast<std::uint8_t*>(target.data())};
  ds.readItem(i, dst);
  return {input, target};
}

// A Megatron .idx as megatron/core/datasets/indexed_dataset.py writes it.
QByteArray megatronIndex(std::uint8_t dtypeCode, const std::vector<std::int32_t>& sizes, const std::vector<std::int64_t>& pointers,
                         const std::vector<std::int64_t>& docIdx) {
  QByteArray out("MMIDIDX\0\0", 9);
  const std::uint64_t version = 1, n = sizes.size(), d = docIdx.size();
  out += QByteArray(reinterpret_cast<const char*>(&version), 8);
  out += static_cast<char>(dtypeCode);
  out += QByteArray(reinterpret_cast<const char*>(&n), 8);
  out += QByteArray(reinterpret_cast<const char*>(&d), 8);
  return out + bytesOf(sizes) + bytesOf(pointers) + bytesOf(docIdx);
}

}  // namespace

class TestTokenDatasets : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private Q_SLOTS:
  void nanoGptWindows_data() {
    QTest::addColumn<QString>("dtype");
    QTest::newRow("u16") << "u16";
    QTest::newRow("u32") << "u32";
  }
  void nanoGptWindows() {
    QFETCH(QString, dtype);
    const QString path = tmp_.filePath("train-" + dtype + ".bin");
    std::vector<std::uint32_t> tokens(1000);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint32_t>((i * 7919) % 60000);
    if (dtype == "u16") {
      std::vector<std::uint16_t> narrow(tokens.begin(), tokens.end());
      QVERIFY(writeFile(path, bytesOf(narrow)));
    } else {
      QVERIFY(writeFile(path, bytesOf(tokens)));
    }
    auto ds = openDataset("tokens:" + path.toStdString() + ",dtype=" + dtype.toStdString() + ",ctx=64");
    QCOMPARE(ds->size(), std::int64_t((1000 - 1) / 64));  // windows of 65 tokens overlapping by one
    QCOMPARE(ds->fields()[0].name, std::string("input"));
    QCOMPARE(ds->fields()[1].name, std::string("target"));
    QCOMPARE(ds->fields()[0].dtype, c10::ScalarType::Long);
    for (std::int64_t i : {std::int64_t(0), std::int64_t(7), ds->size() - 1}) {
      const auto [input, target] = sample(*ds, i);
      for (std::size_t k = 0; k < 64; ++k) {
        QCOMPARE(input[k], static_cast<std::int64_t>(tokens[static_cast<std::size_t>(i) * 64 + k]));
        QCOMPARE(target[k], static_cast<std::int64_t>(tokens[static_cast<std::size_t>(i) * 64 + k + 1]));
      }
    }
    // Defaults: u16, ctx 1024 -> too few tokens here, said so.
    if (dtype == "u16") QVERIFY(expectBadInput([&] { openDataset("tokens:" + path.toStdString()); }, {"too few", "ctx"}).isEmpty());
  }

  // Megatron: documents concatenated in order, windows cross document boundaries; the reference
  // is the concatenation computed here.
  void megatronPacking() {
    std::vector<std::vector<std::uint16_t>> docs = {{1, 2, 3}, {10, 11, 12, 13, 14, 15, 16}, {}, {20}, {30, 31, 32, 33, 34, 35, 36, 37, 38}};
    std::vector<std::uint16_t> bin;
    std::vector<std::int32_t> sizes;
    std::vector<std::int64_t> pointers;
    for (const auto& d : docs) {
      pointers.push_back(static_cast<std::int64_t>(bin.size() * 2));
      sizes.push_back(static_cast<std::int32_t>(d.size()));
      bin.insert(bin.end(), d.begin(), d.end());
    }
    std::vector<std::int64_t> docIdx(docs.size() + 1);
    std::iota(docIdx.begin(), docIdx.end(), 0);
    const QString prefix = tmp_.filePath("corpus");
    QVERIFY(writeFile(prefix + ".bin", bytesOf(bin)));
    QVERIFY(writeFile(prefix + ".idx", megatronIndex(8, sizes, pointers, docIdx)));
    auto ds = openDataset("megatron:" + prefix.toStdString() + ",ctx=4");
    const std::vector<std::uint16_t>& stream = bin;  // pointers are contiguous here: the concatenation
    QCOMPARE(ds->size(), static_cast<std::int64_t>((stream.size() - 1) / 4));
    for (std::int64_t i = 0; i < ds->size(); ++i) {
      const auto [input, target] = sample(*ds, i);
      for (std::size_t k = 0; k < 4; ++k) {
        QCOMPARE(input[k], static_cast<std::int64_t>(stream[static_cast<std::size_t>(i) * 4 + k]));
        QCOMPARE(target[k], static_cast<std::int64_t>(stream[static_cast<std::size_t>(i) * 4 + k + 1]));
      }
    }
    // Pointers need not be in file order: documents are packed in index order.
    std::vector<std::int64_t> shuffled = {pointers[4], pointers[1], pointers[2], pointers[3], pointers[0]};
    std::vector<std::int32_t> shuffledSizes = {sizes[4], sizes[1], sizes[2], sizes[3], sizes[0]};
    QVERIFY(writeFile(prefix + "-r.bin", bytesOf(bin)));
    QVERIFY(writeFile(prefix + "-r.idx", megatronIndex(8, shuffledSizes, shuffled, docIdx)));
    auto r = openDataset("megatron:" + prefix.toStdString() + "-r,ctx=4");
    std::vector<std::int64_t> expect;
    for (int d : {4, 1, 2, 3, 0})
      for (auto t : docs[static_cast<std::size_t>(d)]) expect.push_back(t);
    const auto [in0, t0] = sample(*r, 0);
    for (std::size_t k = 0; k < 4; ++k) QCOMPARE(in0[k], expect[k]);
  }

  // The corpus writer the benchmarks use (tests/datasets/make_token_files.py) writes files this
  // reader accepts, and its tokens are the corpus' bytes.
  void corpusScriptOutputReads() {
    const QString out = tmp_.filePath("corpus-script");
    const auto r = runPythonArgs({QStringLiteral(STOKER_SOURCE_DIR "/tests/datasets/make_token_files.py"), out, "--tokens-bytes", "1MiB", "--max-docs", "40"});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    auto tokens = openDataset("tokens:" + (out + "/tokens.bin").toStdString() + ",ctx=256");
    QCOMPARE(tokens->size(), std::int64_t((512 * 1024 - 1) / 256));
    auto mega = openDataset("megatron:" + (out + "/corpus").toStdString() + ",ctx=256");
    const auto [input, target] = sample(*mega, 0);
    const QByteArray bin = readFile(out + "/corpus.bin");
    for (std::size_t k = 0; k < 256; ++k) {
      std::uint16_t t;
      std::memcpy(&t, bin.constData() + k * 2, 2);
      QCOMPARE(input[k], static_cast<std::int64_t>(t));
      QVERIFY(t < 256);  // byte-level tokens
    }
  }

  void badTokenFilesAreNamed() {
    const QString odd = tmp_.filePath("odd.bin");
    QVERIFY(writeFile(odd, QByteArray(2001, 'x')));
    QVERIFY(expectBadInput([&] { openDataset("tokens:" + odd.toStdString() + ",ctx=8"); },
                           {"odd.bin", "not a multiple of 2"}).isEmpty());
    QVERIFY(expectBadInput([&] { openDataset("tokens:" + odd.toStdString() + ",dtype=f32"); }, {"dtype must be u16 or u32"}).isEmpty());
    QVERIFY(expectBadInput([&] { openDataset("tokens:" + odd.toStdString() + ",ctx=0"); }, {"ctx must be"}).isEmpty());
    QVERIFY(expectBadInput([&] { openDataset("tokens:" + odd.toStdString() + ",window=3"); }, {"unknown option \"window\""}).isEmpty());
    QVERIFY(expectError([&] { openDataset("tokens:" + tmp_.filePath("nope.bin").toStdString()); }, ErrorKind::Io, {"nope.bin"}).isEmpty());
    // An index of empty documents: said so, not "lower ctx=".
    const QString empty = tmp_.filePath("no-tokens");
    QVERIFY(writeFile(empty + ".bin", QByteArray(8, '\1')));
    QVERIFY(writeFile(empty + ".idx", megatronIndex(8, {0, 0}, {0, 0}, {0, 2})));
    QVERIFY(expectBadInput([&] { openDataset("megatron:" + empty.toStdString() + ",ctx=2"); }, {"no-tokens", "holds no tokens"}).isEmpty());
  }

  // --transforms shapes image samples only: for a token file the CLI refuses it instead of handing
  // out untransformed windows without a word (the image kinds take it, see tst_image_datasets).
  void transformsAreRefusedForTokenSpecs() {
    const QString path = tmp_.filePath("for-transforms.bin");
    QVERIFY(writeFile(path, bytesOf(std::vector<std::uint16_t>(200, 7))));
    const QString spec = "tokens:" + path + ",ctx=8";
    QVERIFY(!datasetTakesTransforms(spec.toStdString()));
    QVERIFY(datasetTakesTransforms("imagefolder:" + tmp_.path().toStdString()));
    QVERIFY(datasetTakesTransforms("wds:" + tmp_.path().toStdString() + "/x-{0..1}.tar"));
    const QString out = tmp_.filePath("never.safetensors");
    for (const QStringList& args : {QStringList{"dataset", "info", spec, "--transforms", "CenterCrop(8)"},
                                    QStringList{"dataset", "export", spec, out, "--transforms", "CenterCrop(8)"},
                                    QStringList{"bench", "--dataset", spec, "--transforms", "CenterCrop(8)", "--epochs", "1"}}) {
      const auto r = runStoker(args);
      QVERIFY2(r.exitCode == 2 && r.err.contains("--transforms") && r.err.contains("is read as stored"),
               qPrintable(args.join(' ') + " -> " + QString::number(r.exitCode) + ": " + r.err));
    }
    QVERIFY(!QFileInfo::exists(out));
    const auto plain = runStoker({"dataset", "info", spec});  // without it the same spec opens
    QVERIFY2(plain.exitCode == 0 && plain.out.contains("24 samples"), plain.out.constData());
  }

  void badMegatronIndexesAreNamed_data() {
    QTest::addColumn<QByteArray>("idx");
    QTest::addColumn<QString>("error");
    const std::vector<std::int64_t> docs = {0, 2};
    QTest::newRow("magic") << QByteArray("NOTANIDX\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 34) << "no MMIDIDX header";
    QTest::newRow("truncated header") << QByteArray("MMIDIDX\0\0\1\0\0\0", 13) << "truncated header";
    QTest::newRow("float tokens") << megatronIndex(6, {2, 2}, {0, 4}, docs) << "is a float";
    QTest::newRow("past bin") << megatronIndex(8, {2, 200}, {0, 4}, docs) << "runs past the end of";
    QTest::newRow("negative pointer") << megatronIndex(8, {2, 2}, {0, -4}, docs) << "sequence 1 has a negative pointer (-4)";
    QTest::newRow("negative length") << megatronIndex(8, {2, -2}, {0, 4}, docs) << "sequence 1 has a negative length (-2)";
    QTest::newRow("counts past file") << megatronIndex(8, {2, 2}, {0, 4}, docs).left(60) << "do not fit";
    QTest::newRow("document order") << megatronIndex(8, {2, 2}, {0, 4}, {0, 3}) << "document index 1";
    QTest::newRow("last document") << megatronIndex(8, {2, 2}, {0, 4}, {0, 1}) << "the last document index";
  }
  void badMegatronIndexesAreNamed() {
    QFETCH(QByteArray, idx);
    QFETCH(QString, error);
    const QString prefix = tmp_.filePath(QString("bad-%1").arg(QTest::currentDataTag()).replace(' ', '-'));
    QVERIFY(writeFile(prefix + ".bin", QByteArray(8, '\1')));
    QVERIFY(writeFile(prefix + ".idx", idx));
    const QString msg = expectBadInput([&] { openDataset("megatron:" + prefix.toStdString() + ",ctx=2"); }, {".idx", error});
    QVERIFY2(msg.isEmpty(), qPrintable(msg));
  }
};

QTEST_GUILESS_MAIN(TestTokenDatasets)
#include "tst_token_datasets.moc"
