// IDX (MNIST family, gzip or plain) and .npy readers: hand-built files for
// every layout rule, NumPy-written files for interop, the real Fashion-MNIST
// from Debian's package, and each malformed input with its message.
#include <QtTest>

#include <zlib.h>

#include <cstring>

#include "data/dataset.h"
#include "data/fashion_mnist.h"
#include "io/idx_reader.h"
#include "io/npy_reader.h"
#include "test_support.h"
#include "util/error.h"

using namespace stoker;

namespace {

QByteArray be32(quint32 v) {
  QByteArray b(4, 0);
  for (int i = 0; i < 4; ++i) b[i] = char((v >> (8 * (3 - i))) & 0xff);
  return b;
}

QByteArray idx(char type, const QList<quint32>& dims, const QByteArray& data) {
  QByteArray b;
  b.append('\0').append('\0').append(type).append(char(dims.size()));
  for (auto d : dims) b += be32(d);
  return b + data;
}

bool writeGzip(const QString& path, const QByteArray& bytes) {
  gzFile f = gzopen(path.toLocal8Bit().constData(), "wb");
  if (!f) return false;
  bool ok = gzwrite(f, bytes.constData(), unsigned(bytes.size())) == bytes.size();
  return gzclose(f) == Z_OK && ok;
}

QByteArray npy(const QByteArray& dict, const QByteArray& data, int major = 1) {
  QByteArray header = dict;
  const int pre = major == 1 ? 10 : 12;
  while ((pre + header.size() + 1) % 64) header.append(' ');
  header.append('\n');
  QByteArray b("\x93NUMPY", 6);
  b.append(char(major)).append('\0');
  const int n = int(header.size());
  b.append(char(n & 0xff)).append(char((n >> 8) & 0xff));
  if (major != 1) b.append(char((n >> 16) & 0xff)).append(char((n >> 24) & 0xff));
  return b + header + data;
}

template <typename T>
std::vector<T> values(const HostTensor& h) {
  std::vector<T> v(h.nbytes / sizeof(T));
  std::memcpy(v.data(), h.data, h.nbytes);
  return v;
}

}  // namespace

class TestIdxNpy : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString tmp(const QString& n) const { return dir_.filePath(n); }

  template <typename Fn>
  QString errorOf(Fn fn) {
    try {
      fn();
      return {};
    } catch (const Error& e) {
      return QString::fromStdString(e.what());
    }
  }

 private Q_SLOTS:
  void idxPlainAndGzip() {
    QByteArray data = be32(1) + be32(0xFFFFFFFE) + be32(70000);  // int32 big-endian
    QByteArray file = idx(0x0C, {3}, data);
    QVERIFY(test::writeFile(tmp("a.idx"), file));
    QVERIFY(writeGzip(tmp("a.idx.gz"), file));
    for (const QString& p : {tmp("a.idx"), tmp("a.idx.gz")}) {
      HostTensor h = readIdx(p.toStdString());
      QCOMPARE(h.dtype, Dtype::I32);
      QCOMPARE(h.shape, std::vector<std::int64_t>{3});
      QCOMPARE(values<std::int32_t>(h), (std::vector<std::int32_t>{1, -2, 70000}));
    }
    QByteArray images = idx(0x08, {2, 2, 3}, QByteArray("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\xff", 12));
    QVERIFY(writeGzip(tmp("img.gz"), images));
    HostTensor img = readIdx(tmp("img.gz").toStdString());
    QCOMPARE(img.shape, (std::vector<std::int64_t>{2, 2, 3}));
    QCOMPARE(int(img.data[11]), 255);
    float f = 1.5f;
    quint32 bits;
    std::memcpy(&bits, &f, 4);
    HostTensor ft = (test::writeFile(tmp("f.idx"), idx(0x0D, {1}, be32(bits))), readIdx(tmp("f.idx").toStdString()));
    QCOMPARE(values<float>(ft)[0], 1.5f);
  }

  void idxMalformed_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("expected");
    QTest::newRow("too short") << QByteArray("\0\0", 2) << "shorter than the 4-byte IDX magic";
    QTest::newRow("bad magic") << QByteArray("\1\0\x08\x01", 4) + be32(1) + "x" << "bad magic";
    QTest::newRow("unknown type") << idx(0x0A, {1}, "x") << "unknown IDX type code 10";
    QTest::newRow("zero dims") << idx(0x08, {}, "") << "zero dimensions";
    QTest::newRow("truncated dims") << QByteArray("\0\0\x08\x02", 4) + be32(2) << "truncated IDX dimension list";
    QTest::newRow("truncated data") << idx(0x08, {10}, "abc") << "truncated: 3 data bytes, header declares 10";
    QTest::newRow("lying size") << idx(0x08, {0xFFFFFFFF, 0xFFFFFFFF}, "abc") << "truncated";
    QTest::newRow("trailing data") << idx(0x08, {2}, "abc") << "more data than the IDX header declares";
    // 2^62 elements of 8 bytes: the element count fits 64 bits, the byte count does not.
    QTest::newRow("byte count overflows") << idx(0x0E, {0x80000000u, 0x80000000u}, "abc") << "IDX dimensions overflow";
  }
  void idxMalformed() {
    QFETCH(QByteArray, bytes);
    QFETCH(QString, expected);
    QVERIFY(writeGzip(tmp("bad.gz"), bytes));
    const QString error = errorOf([&] { readIdx(tmp("bad.gz").toStdString()); });
    QVERIFY2(error.startsWith(tmp("bad.gz") + ": ") && error.contains(expected), qPrintable(error));
  }

  void fashionMnistFromDebianPackage() {
    if (!QFile::exists(QString(kFashionMnistDefaultDir) + "/train-images-idx3-ubyte.gz"))
      QFAIL("dataset-fashion-mnist is not installed (bash packaging/stoker.sh test installs it)");
    LabeledImages train = loadFashionMnist(kFashionMnistDefaultDir, Split::Train);
    QCOMPARE(train.images.shape, (std::vector<std::int64_t>{60000, 1, 28, 28}));
    QCOMPARE(train.images.dtype, Dtype::F32);
    QCOMPARE(train.labels.dtype, Dtype::I64);
    auto labels = values<std::int64_t>(train.labels);
    std::vector<int> counts(10, 0);
    for (auto l : labels) ++counts[std::size_t(l)];
    QCOMPARE(counts, std::vector<int>(10, 6000));
    auto pixels = values<float>(train.images);
    auto [lo, hi] = std::minmax_element(pixels.begin(), pixels.end());
    QCOMPARE(*lo, 0.0f);
    QCOMPARE(*hi, 1.0f);
    LabeledImages test = loadFashionMnist(kFashionMnistDefaultDir, Split::Test);
    QCOMPARE(test.labels.shape, std::vector<std::int64_t>{10000});
    QVERIFY(errorOf([&] { loadFashionMnist(dir_.path().toStdString(), Split::Train); }).contains("dataset-fashion-mnist"));
  }

  void npyLayouts() {
    // C order little-endian float32, served from the mapping.
    QByteArray f4(24, 0);
    for (int i = 0; i < 6; ++i) { float v = float(i) - 2.5f; std::memcpy(f4.data() + 4 * i, &v, 4); }
    QVERIFY(test::writeFile(tmp("c.npy"), npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f4)));
    HostTensor c = readNpy(tmp("c.npy").toStdString());
    QCOMPARE(c.shape, (std::vector<std::int64_t>{2, 3}));
    QCOMPARE(values<float>(c), (std::vector<float>{-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f}));

    // Fortran order int32 [2,3]: memory holds columns 0 3 1 4 2 5.
    std::int32_t col[] = {0, 3, 1, 4, 2, 5};
    QVERIFY(test::writeFile(tmp("f.npy"), npy("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
                                              QByteArray(reinterpret_cast<const char*>(col), 24))));
    QCOMPARE(values<std::int32_t>(readNpy(tmp("f.npy").toStdString())), (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}));

    // Big-endian float64, format version 2.0.
    double d = -7.25;
    std::uint64_t bits;
    std::memcpy(&bits, &d, 8);
    QByteArray beBytes(8, 0);
    for (int i = 0; i < 8; ++i) beBytes[i] = char((bits >> (8 * (7 - i))) & 0xff);
    QVERIFY(test::writeFile(tmp("be.npy"), npy("{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }", beBytes, 2)));
    HostTensor be = readNpy(tmp("be.npy").toStdString());
    QCOMPARE(be.dtype, Dtype::F64);
    QCOMPARE(values<double>(be)[0], -7.25);

    // Scalar bool.
    QVERIFY(test::writeFile(tmp("b.npy"), npy("{'descr': '|b1', 'fortran_order': False, 'shape': (), }", QByteArray(1, 1))));
    HostTensor b = readNpy(tmp("b.npy").toStdString());
    QCOMPARE(b.dtype, Dtype::BOOL);
    QVERIFY(b.shape.empty());
  }

  void npyFromNumpy() {
    QVERIFY2(test::pythonTorchAvailable(), "Debian's python3-numpy is needed");
    auto r = test::runPython(R"(
import sys, numpy as np
d = sys.argv[1]
np.save(d + '/np_f.npy', np.asfortranarray(np.arange(24, dtype='<i8').reshape(2, 3, 4)))
np.save(d + '/np_be.npy', np.arange(6, dtype='>f4').reshape(3, 2))
np.save(d + '/np_c.npy', (np.arange(4) + 1j * np.arange(4)).astype('>c8'))
np.save(d + '/np_u16.npy', np.array([1, 65535], dtype='<u2'))
)", {dir_.path()});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    HostTensor f = readNpy(tmp("np_f.npy").toStdString());
    QCOMPARE(f.shape, (std::vector<std::int64_t>{2, 3, 4}));
    auto fv = values<std::int64_t>(f);
    for (int i = 0; i < 24; ++i) QCOMPARE(fv[std::size_t(i)], std::int64_t(i));
    auto bev = values<float>(readNpy(tmp("np_be.npy").toStdString()));
    QCOMPARE(bev, (std::vector<float>{0, 1, 2, 3, 4, 5}));
    auto cv = values<float>(readNpy(tmp("np_c.npy").toStdString()));  // (re, im) pairs
    QCOMPARE(cv, (std::vector<float>{0, 0, 1, 1, 2, 2, 3, 3}));
    HostTensor u16 = readNpy(tmp("np_u16.npy").toStdString());
    QCOMPARE(u16.dtype, Dtype::U16);
    QCOMPARE(values<std::uint16_t>(u16), (std::vector<std::uint16_t>{1, 65535}));
  }

  // Found by fuzz_npy: an empty big-endian array passed a null pointer to memcpy (UBSan).
  void emptyBigEndianArray() {
    QVERIFY(test::writeFile(tmp("empty.npy"), npy("{'descr': '>f8', 'fortran_order': False, 'shape': (0, 4), }", "")));
    const HostTensor t = readNpy(tmp("empty.npy").toStdString());
    QCOMPARE(t.nbytes, std::uint64_t(0));
    QCOMPARE(t.shape, (std::vector<std::int64_t>{0, 4}));
    // As a dataset it has no samples, said naming the file (not libtorch's "select(): index 0 out of
    // range" from sizing a sample of it).
    const QString error = errorOf([&] { openDataset(tmp("empty.npy").toStdString()); });
    QVERIFY2(error.contains("empty.npy") && error.contains("the dataset has no samples"), qPrintable(error));
  }

  void npyMalformed_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("expected");
    QTest::newRow("bad magic") << QByteArray("\x93NUMPX\x01\x00\x00\x00", 10) << "bad magic";
    QTest::newRow("version 9") << npy("{}", "").replace(6, 1, "\x09") << "format version 9";
    QTest::newRow("structured dtype") << npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", QByteArray(4, 0)) << "structured";
    QTest::newRow("unicode dtype") << npy("{'descr': '<U10', 'fortran_order': False, 'shape': (1,), }", QByteArray(40, 0)) << "unsupported .npy dtype '<U10'";
    QTest::newRow("complex128") << npy("{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }", QByteArray(16, 0)) << "unsupported .npy dtype '<c16'";
    QTest::newRow("data too short") << npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", QByteArray(8, 0)) << "data is 8 bytes, shape and dtype need 16";
    QTest::newRow("missing key") << npy("{'descr': '<f4', 'shape': (4,), }", QByteArray(16, 0)) << "lacks one of";
    QTest::newRow("bad shape") << npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", "") << "non-integer";
    QTest::newRow("shape without commas") << npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2 2), }", QByteArray(16, 0)) << "not separated by ','";
    QTest::newRow("byte count overflows") << npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,), }", "") << "shape overflows";
    QTest::newRow("header past end") << QByteArray("\x93NUMPY\x01\x00\xff\x00{", 11) << "runs past the end";
  }
  void npyMalformed() {
    QFETCH(QByteArray, bytes);
    QFETCH(QString, expected);
    QVERIFY(test::writeFile(tmp("bad.npy"), bytes));
    const QString error = errorOf([&] { readNpy(tmp("bad.npy").toStdString()); });
    QVERIFY2(error.startsWith(tmp("bad.npy") + ": ") && error.contains(expected), qPrintable(error));
  }
};

QTEST_GUILESS_MAIN(TestIdxNpy)
#include "tst_idx_npy.moc"
