// Writer: byte-exact output of the official serializer, its ordering and
// 8-byte padding, round trips of every dtype, chunked streaming, and the
// atomic-write guarantee (nothing under the final name until finish()).
#include <QtTest>

#include <ATen/ATen.h>

#include <csignal>
#include <random>
#include <sys/resource.h>

#include "io/host_tensor_torch.h"
#include "io/safetensors_file.h"
#include "io/safetensors_writer.h"
#include "test_support.h"
#include "util/error.h"

using namespace stoker;

namespace {
std::vector<std::uint8_t> readAll(const std::string& path) {
  QByteArray b = test::readFile(QString::fromStdString(path));
  return std::vector<std::uint8_t>(b.begin(), b.end());
}
}  // namespace

class TestSafetensorsWriter : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  std::string tmp(const char* name) const { return dir_.filePath(name).toStdString(); }

 private Q_SLOTS:
  void matchesOfficialSerializerBytes() {
    // huggingface/safetensors tensor.rs test_serialization: "attn.0" F32 [1,2,3].
    const float values[] = {0, 1, 2, 3, 4, 5};
    SafetensorsWriter w(tmp("attn.safetensors"), {{"attn.0", Dtype::F32, {1, 2, 3}}});
    w.write("attn.0", values, sizeof values);
    w.finish();
    const std::vector<std::uint8_t> expected = {
        64, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 46, 48, 34, 58, 123, 34, 100,
        116, 121, 112, 101, 34, 58, 34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34,
        58, 91, 49, 44, 50, 44, 51, 93, 44, 34, 100, 97, 116, 97, 95, 111, 102, 102, 115,
        101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 0, 0, 0, 0, 0, 0, 128, 63,
        0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64};
    QCOMPARE(readAll(tmp("attn.safetensors")), expected);
  }

  void matchesOfficialEmptyFileWithMetadata() {
    // tensor.rs test_empty: no tensors, metadata {"framework": "pt"}, padded with spaces.
    SafetensorsWriter w(tmp("empty.safetensors"), {}, {{"framework", "pt"}});
    w.finish();
    const std::vector<std::uint8_t> expected = {
        40, 0, 0, 0, 0, 0, 0, 0, 123, 34, 95, 95, 109, 101, 116, 97, 100, 97, 116, 97, 95,
        95, 34, 58, 123, 34, 102, 114, 97, 109, 101, 119, 111, 114, 107, 34, 58, 34, 112,
        116, 34, 125, 125, 32, 32, 32, 32, 32};
    QCOMPARE(readAll(tmp("empty.safetensors")), expected);
    SafetensorsWriter w2(tmp("bare.safetensors"), {});
    w2.finish();
    QCOMPARE(readAll(tmp("bare.safetensors")),
             (std::vector<std::uint8_t>{8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32}));
  }

  void ordersByDescendingDtypeThenName() {
    SafetensorsWriter w(tmp("order.safetensors"),
                        {{"b", Dtype::U8, {1}}, {"a", Dtype::U8, {1}}, {"z", Dtype::F64, {1}},
                         {"m", Dtype::F16, {1}}, {"c", Dtype::I64, {1}}});
    QStringList names;
    for (const auto& t : w.writeOrder()) names << QString::fromStdString(t.name);
    QCOMPARE(names, (QStringList{"c", "z", "m", "a", "b"}));  // I64 > F64 > F16 > U8
    QCOMPARE(w.layout().header.size() % 8, std::size_t(0));
  }

  void roundTripsEveryDtype() {
    std::mt19937 rng(42);
    std::vector<std::pair<std::string, HostTensor>> tensors;
    std::vector<std::shared_ptr<std::vector<std::uint8_t>>> buffers;
    for (int i = 0; i < kDtypeCount; ++i) {
      auto d = static_cast<Dtype>(i);
      std::vector<std::int64_t> shape = {3, 4};  // 12 elements: whole bytes even for F4/F6
      auto bytes = dtypeBytesFor(d, 12);
      QVERIFY(bytes.has_value());
      auto buf = std::make_shared<std::vector<std::uint8_t>>(*bytes);
      for (auto& b : *buf) b = static_cast<std::uint8_t>(rng());
      if (d == Dtype::BOOL)
        for (auto& b : *buf) b &= 1;
      HostTensor h{d, shape, buf->data(), *bytes, buf};
      tensors.emplace_back("t_" + std::string(dtypeName(d)), h);
      buffers.push_back(buf);
    }
    writeSafetensors(tmp("all.safetensors"), tensors, {{"k", "v"}});
    auto f = SafetensorsFile::open(tmp("all.safetensors"));
    QCOMPARE(f.tensors().size(), tensors.size());
    for (const auto& [name, h] : tensors) {
      HostTensor back = f.host(name);
      QCOMPARE(back.dtype, h.dtype);
      QCOMPARE(back.shape, h.shape);
      QCOMPARE(back.nbytes, h.nbytes);
      QVERIFY2(std::memcmp(back.data, h.data, h.nbytes) == 0, name.c_str());
      if (torchSupports(h.dtype)) QCOMPARE(back.toTorch().numel(), int64_t(12));
    }
    QCOMPARE(f.metadata().at("k"), std::string("v"));
    QCOMPARE((8 + f.header().headerBytes) % 8, std::uint64_t(0));
  }

  void torchValuesRoundTrip() {
    at::Tensor bf = at::randn({5, 7}).to(at::kBFloat16);
    at::Tensor i64 = at::arange(-5, 5, at::kLong);
    writeSafetensors(tmp("torch.safetensors"), {{"bf", hostTensorFromTorch(bf)}, {"i", hostTensorFromTorch(i64)}});
    auto f = SafetensorsFile::open(tmp("torch.safetensors"));
    QVERIFY(f.tensor("bf").equal(bf));
    QVERIFY(f.tensor("i").equal(i64));
  }

  void streamsInChunksAcrossTensors() {
    std::vector<std::uint8_t> a(1000), b(333);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint8_t>(i * 7);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i * 13);
    SafetensorsWriter w(tmp("chunks.safetensors"), {{"a", Dtype::U8, {1000}}, {"b", Dtype::U8, {333}}});
    std::vector<std::uint8_t> all(a);
    all.insert(all.end(), b.begin(), b.end());
    for (std::size_t off = 0; off < all.size(); off += 97) w.append(all.data() + off, std::min<std::size_t>(97, all.size() - off));
    w.finish();
    auto f = SafetensorsFile::open(tmp("chunks.safetensors"));
    QVERIFY(std::memcmp(f.host("a").data, a.data(), a.size()) == 0);
    QVERIFY(std::memcmp(f.host("b").data, b.data(), b.size()) == 0);
  }

  void unfinishedWriteLeavesNothing() {
    const std::string path = tmp("partial.safetensors");
    {
      SafetensorsWriter w(path, {{"a", Dtype::F32, {1000}}});
      std::vector<float> half(500, 1.f);
      w.append(half.data(), half.size() * 4);
      try {
        w.finish();
        QFAIL("finish() accepted a short tensor");
      } catch (const Error& e) {
        QVERIFY(QString(e.what()).contains("2000 of 4000"));
      }
    }
    QVERIFY(!QFile::exists(QString::fromStdString(path)));
    QCOMPARE(QDir(dir_.path()).entryList(QStringList{"*stoker-tmp*"}, QDir::Files | QDir::Hidden).size(), 0);
  }

  void rejectsBadSpecs() {
    QVERIFY_THROWS_EXCEPTION(Error, SafetensorsWriter(tmp("dup.safetensors"), {{"a", Dtype::U8, {1}}, {"a", Dtype::U8, {1}}}));
    QVERIFY_THROWS_EXCEPTION(Error, SafetensorsWriter(tmp("meta.safetensors"), {{"__metadata__", Dtype::U8, {1}}}));
    QVERIFY_THROWS_EXCEPTION(Error, SafetensorsWriter(tmp("utf.safetensors"), {{"bad\xff", Dtype::U8, {1}}}));
    QVERIFY_THROWS_EXCEPTION(Error, SafetensorsWriter(tmp("neg.safetensors"), {{"n", Dtype::U8, {-1}}}));
    QVERIFY(!QFile::exists(dir_.filePath("dup.safetensors")));
  }

  void failedWriteMidFileLeavesNothing() {
    // A file-size limit makes write() fail part-way (EFBIG), as a full disk
    // does (ENOSPC): the error must surface and no file may remain.
    const std::string path = tmp("full.safetensors");
    struct rlimit old {};
    getrlimit(RLIMIT_FSIZE, &old);
    auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old;
    small.rlim_cur = 64 * 1024;
    QCOMPARE(setrlimit(RLIMIT_FSIZE, &small), 0);
    bool threw = false;
    try {
      std::vector<std::uint8_t> big(16 << 20, 1);
      SafetensorsWriter w(path, {{"big", Dtype::U8, {static_cast<std::int64_t>(big.size())}}});
      w.write("big", big.data(), big.size());
      w.finish();
    } catch (const Error& e) {
      threw = e.kind() == ErrorKind::Io && QString(e.what()).contains("write failed");
    }
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, oldHandler);
    QVERIFY2(threw, "a failing write did not raise an Io error");
    QVERIFY(!QFile::exists(QString::fromStdString(path)));
    QCOMPARE(QDir(dir_.path()).entryList(QStringList{"*stoker-tmp*"}, QDir::Files | QDir::Hidden).size(), 0);
  }

  void unwritableDirectoryIsAnIoError() {
    try {
      SafetensorsWriter w(tmp("no-such-dir/x.safetensors"), {{"a", Dtype::U8, {1}}});
      QFAIL("created a file in a missing directory");
    } catch (const Error& e) {
      QCOMPARE(int(e.kind()), int(ErrorKind::Io));
    }
  }
};

QTEST_GUILESS_MAIN(TestSafetensorsWriter)
#include "tst_safetensors_writer.moc"
