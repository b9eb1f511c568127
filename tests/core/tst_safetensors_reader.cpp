// Reader conformance: the official sample files, every malformed-input rule
// (one input each, checked by its message), zero-size/scalar tensors, padded
// headers, zero-copy views and dtypes libtorch 1.13 lacks.
#include <QtTest>

#include <ATen/ATen.h>

#include "io/host_tensor_torch.h"
#include "io/safetensors_file.h"
#include "io/safetensors_writer.h"
#include "test_support.h"
#include "util/error.h"

using namespace stoker;
using stoker::test::safetensorsBytes;
using stoker::test::writeFile;

class TestSafetensorsReader : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

  QString tmp(const QString& name) const { return dir_.filePath(name); }

  // Opens `bytes` as a file; returns the error message, or "" when valid.
  QString openError(const QByteArray& bytes) {
    const QString path = tmp("case.safetensors");
    if (!writeFile(path, bytes)) return "cannot write test file";
    try {
      SafetensorsFile::open(path.toStdString());
      return {};
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::BadInput) return "wrong error kind: " + QString::fromStdString(e.what());
      if (e.subject() != path.toStdString()) return "error does not name the file: " + QString::fromStdString(e.what());
      return QString::fromStdString(e.reason());
    }
  }

 private Q_SLOTS:
  void officialSamples_data() {
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("dtype");
    QTest::addColumn<QList<double>>("values");
    const QList<double> signedValues{-3, -2, -1, 0, 1, 2};
    QTest::newRow("U8") << "B" << "U8" << QList<double>{253, 254, 255, 0, 1, 2};
    QTest::newRow("I8") << "b" << "I8" << signedValues;
    QTest::newRow("U16") << "H" << "U16" << QList<double>{65533, 65534, 65535, 0, 1, 2};
    QTest::newRow("I16") << "h" << "I16" << signedValues;
    QTest::newRow("U32") << "I" << "U32" << QList<double>{4294967293., 4294967294., 4294967295., 0, 1, 2};
    QTest::newRow("I32") << "i" << "I32" << signedValues;
    QTest::newRow("F16") << "e" << "F16" << signedValues;
    QTest::newRow("F32") << "f" << "F32" << signedValues;
    QTest::newRow("F64") << "d" << "F64" << signedValues;
  }
  void officialSamples() {
    QFETCH(QString, file);
    QFETCH(QString, dtype);
    QFETCH(QList<double>, values);
    for (const QString& path : {test::samplesDir() + "/" + file + ".safetensors",
                                test::samplesDir() + "/overall.safetensors"}) {
      auto f = SafetensorsFile::open(path.toStdString());
      QCOMPARE(f.metadata().at("test"), std::string("a"));
      HostTensor h = f.host(file.toStdString());
      QCOMPARE(QString::fromStdString(std::string(dtypeName(h.dtype))), dtype);
      QCOMPARE(h.shape, std::vector<std::int64_t>{6});
      QList<double> got;
      const unsigned width = dtypeBits(h.dtype) / 8;
      for (int i = 0; i < 6; ++i) {
        const std::uint8_t* p = h.data + i * width;
        std::uint64_t raw = 0;
        for (int b = static_cast<int>(width) - 1; b >= 0; --b) raw = (raw << 8) | p[b];
        double v = 0;
        switch (h.dtype) {
          case Dtype::U8: case Dtype::U16: case Dtype::U32: v = static_cast<double>(raw); break;
          case Dtype::I8: v = static_cast<std::int8_t>(raw); break;
          case Dtype::I16: v = static_cast<std::int16_t>(raw); break;
          case Dtype::I32: v = static_cast<std::int32_t>(raw); break;
          default: v = h.toTorch().to(at::kDouble)[i].item<double>();
        }
        got << v;
      }
      QCOMPARE(got, values);
    }
  }

  void overallSampleListsAllNine() {
    auto f = SafetensorsFile::open((test::samplesDir() + "/overall.safetensors").toStdString());
    QCOMPARE(f.tensors().size(), std::size_t(9));
    QCOMPARE(f.header().headerBytes, std::uint64_t(526));  // unpadded: older writer
  }

  void malformed_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("expected");
    auto st = [](const QByteArray& h, const QByteArray& d = {}) { return safetensorsBytes(h, d); };
    const QByteArray f32x2 = QByteArray(8, '\1');
    QTest::newRow("shorter than 8 bytes") << QByteArray("abc") << "shorter than the 8-byte";
    {
      QByteArray b = st("{}");
      b[0] = char(0xE8); b[1] = char(0x03);  // claims 1000 bytes
      QTest::newRow("header length past end") << b << "runs past the end of the file";
    }
    {
      QByteArray b(8, '\0');
      quint64 n = 100000001;
      for (int i = 0; i < 8; ++i) b[i] = char((n >> (8 * i)) & 0xff);
      QTest::newRow("header over 100,000,000") << b + QByteArray(16, ' ') << "exceeds the limit";
    }
    QTest::newRow("not UTF-8") << st("{\"a\xff\":{}}") << "not valid UTF-8";
    QTest::newRow("overlong UTF-8") << st("{\"\xc0\xaf\":{}}") << "not valid UTF-8";
    QTest::newRow("not an object") << st("[1,2]") << "not a JSON object";
    QTest::newRow("truncated JSON") << st("{\"a\":") << "not valid JSON";
    QTest::newRow("trailing garbage") << st("{} x") << "not valid JSON";
    QTest::newRow("unknown dtype") << st(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", f32x2) << "unknown dtype \"F33\"";
    QTest::newRow("dtype not a string") << st(R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", f32x2) << "dtype is a number";
    QTest::newRow("shape missing") << st(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", f32x2) << "missing shape";
    QTest::newRow("offsets missing") << st(R"({"a":{"dtype":"F32","shape":[2]}})", f32x2) << "missing data_offsets";
    QTest::newRow("dtype missing") << st(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", f32x2) << "missing dtype";
    QTest::newRow("shape negative") << st(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f32x2) << "negative number (-2)";
    QTest::newRow("shape fractional") << st(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", f32x2) << "holds 2.5, not a non-negative integer";
    QTest::newRow("shape not an array") << st(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", f32x2) << "shape is a string, not an array";
    QTest::newRow("shape of arrays") << st(R"({"a":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})", f32x2) << "shape holds an array";
    QTest::newRow("offsets arity 3") << st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})", f32x2) << "data_offsets has more than 2 entries";
    QTest::newRow("offsets arity 1") << st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", f32x2) << "has 1 entries, expected 2";
    QTest::newRow("offsets negative") << st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", f32x2) << "data_offsets holds a negative number";
    QTest::newRow("offsets fractional") << st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", f32x2) << "not a non-negative integer";
    QTest::newRow("offsets end before start") << st(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", f32x2) << "end before they start";
    QTest::newRow("shape x dtype overflow") << st(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", f32x2) << "overflows";
    QTest::newRow("dimension past int64") << st(R"({"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,8]}})", f32x2) << "dimension too large";
    QTest::newRow("sub-byte not whole bytes") << st(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", QByteArray(2, 0)) << "does not end on a byte";
    QTest::newRow("byte count mismatch") << st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", QByteArray(4, 0)) << "span 4 bytes but shape [2] x F32 needs 8";
    QTest::newRow("hole between tensors") << st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", QByteArray(12, 0)) << "hole of 4 bytes between tensors \"a\" and \"b\"";
    QTest::newRow("hole at start") << st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", QByteArray(8, 0)) << "hole of 4 bytes before tensor \"a\"";
    QTest::newRow("overlap") << st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", QByteArray(12, 0)) << "\"a\" and \"b\" overlap";
    QTest::newRow("data past end of file") << st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", QByteArray(4, 0)) << "runs past the end of the file";
    QTest::newRow("data short of end of file") << st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", QByteArray(12, 0)) << "4 bytes after the last tensor";
    QTest::newRow("duplicate names") << st(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", QByteArray(2, 0)) << "duplicate entry \"a\"";
    QTest::newRow("duplicate field") << st(R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", QByteArray(1, 0)) << "duplicate field \"dtype\"";
    QTest::newRow("metadata value not a string") << st(R"({"__metadata__":{"epoch":3}})") << "value for \"epoch\" is a number, not a string";
    QTest::newRow("metadata value an object") << st(R"({"__metadata__":{"cfg":{"a":"b"}}})") << "value for \"cfg\" is an object, not a string";
    QTest::newRow("metadata not an object") << st(R"({"__metadata__":"x"})") << "__metadata__ is a string, not an object of strings";
    QTest::newRow("metadata an array") << st(R"({"__metadata__":["x"]})") << "__metadata__ is an array, not an object of strings";
    QTest::newRow("tensor entry not an object") << st(R"({"a":[1]})") << "entry is an array, not an object";
    QTest::newRow("200,000 nested brackets") << st("{\"a\":" + QByteArray(200000, '[') + QByteArray(200000, ']') + "}") << "entry is an array";
    QTest::newRow("200,000 nested in unknown field") << st("{\"a\":{\"x\":" + QByteArray(200000, '[') + QByteArray(200000, ']') + "}}") << "nests deeper than 128 levels";
    QTest::newRow("200,000 nested objects") << st("{\"a\":{\"x\":" + QByteArray(200000, '{').replace("{", "{\"k\":") + "1" + QByteArray(200000, '}') + "}}") << "nests deeper than 128 levels";
  }
  void malformed() {
    QFETCH(QByteArray, bytes);
    QFETCH(QString, expected);
    const QString error = openError(bytes);
    QVERIFY2(!error.isEmpty(), "malformed input was accepted");
    QVERIFY2(error.contains(expected), qPrintable("got: " + error));
  }

  void acceptsPaddingAndUnknownFields() {
    // Official writers pad with spaces; unknown fields are ignored like upstream.
    QByteArray header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"note":{"x":[1,2]}}})";
    header.append(QByteArray((8 - header.size() % 8) % 8, ' '));
    QVERIFY2(openError(safetensorsBytes(header, "xy")).isEmpty(), "padded header rejected");
    QVERIFY(openError(safetensorsBytes("{}", {})).isEmpty());
    QVERIFY(openError(safetensorsBytes(R"({"__metadata__":null})", {})).isEmpty());
  }

  void zeroSizeAndScalarTensors() {
    const auto path = tmp("zs.safetensors").toStdString();
    float scalar = 2.5f;
    SafetensorsWriter w(path, {{"scalar", Dtype::F32, {}}, {"empty", Dtype::F32, {0, 3}}, {"alsoEmpty", Dtype::I64, {4, 0}}});
    for (const auto& t : w.writeOrder())
      if (t.name == "scalar") w.write("scalar", &scalar, 4);
      else w.write(t.name, nullptr, 0);
    w.finish();
    auto f = SafetensorsFile::open(path);
    at::Tensor s = f.tensor("scalar");
    QCOMPARE(s.dim(), int64_t(0));
    QCOMPARE(s.item<float>(), 2.5f);
    at::Tensor e = f.tensor("empty");
    QCOMPARE(e.sizes().vec(), (std::vector<int64_t>{0, 3}));
    QCOMPARE(e.numel(), int64_t(0));
    QCOMPARE(f.entry("alsoEmpty").nbytes(), std::uint64_t(0));
  }

  void tensorsAreZeroCopyViews() {
    const auto path = tmp("zc.safetensors").toStdString();
    at::Tensor src = at::arange(1000, at::kFloat);
    writeSafetensors(path, {{"x", hostTensorFromTorch(src)}});
    auto f = SafetensorsFile::open(path);
    HostTensor h = f.host("x");
    at::Tensor t = h.toTorch();
    QCOMPARE(static_cast<const void*>(t.data_ptr()), static_cast<const void*>(h.data));
    QVERIFY(t.equal(src));
    // The mapping is private: writing through the tensor never touches the file.
    t.fill_(7);
    auto again = SafetensorsFile::open(path);
    QVERIFY(again.tensor("x").equal(src));
  }

  void misalignedDataIsCopiedForTorch() {
    // overall.safetensors has an unpadded 526-byte header: F32 data at an odd address.
    auto f = SafetensorsFile::open((test::samplesDir() + "/f.safetensors").toStdString());
    HostTensor h = f.host("f");
    at::Tensor t = h.toTorch();
    QCOMPARE(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 4, std::uintptr_t(0));
    QCOMPARE(t[0].item<float>(), -3.0f);
  }

  void dtypesLibtorchLacksAreBytesOnly() {
    auto f = SafetensorsFile::open((test::samplesDir() + "/H.safetensors").toStdString());
    HostTensor h = f.host("H");
    QCOMPARE(h.nbytes, std::uint64_t(12));
    QCOMPARE(int(h.data[0]), 0xfd);
    if (torchSupports(Dtype::U16)) QSKIP("this libtorch has uint16");
    try {
      h.toTorch();
      QFAIL("U16 converted on a libtorch without uint16");
    } catch (const Error& e) {
      QVERIFY(QString(e.what()).contains("bytes only"));
    }
  }

  void missingFileIsAnIoError() {
    try {
      SafetensorsFile::open(tmp("nope.safetensors").toStdString());
      QFAIL("opened a missing file");
    } catch (const Error& e) {
      QCOMPARE(int(e.kind()), int(ErrorKind::Io));
    }
  }
};

QTEST_GUILESS_MAIN(TestSafetensorsReader)
#include "tst_safetensors_reader.moc"
