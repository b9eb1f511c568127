// The JPEG scan index (image/jpeg_scan_index, image/jpeg_resume): a crop decoded from a recorded
// index gives exactly the pixels a plain libjpeg decode gives, on real photos in every chroma
// layout, at every DCT scale, whichever crop recorded the index; it really skips entropy decoding
// (MCUs counted); a changed file never uses a stale index; the budget holds; images it cannot index
// (progressive, CMYK) decode as before; bad files are refused as before.
#include <QDir>
#include <QTemporaryDir>
#include <QtTest>

#include <cstdlib>
#include <random>

#include "data/dataset.h"
#include "data/datasets/image_folder_dataset.h"
#include "image/image_decoder.h"
#include "image/jpeg_resume.h"
#include "image/jpeg_scan_index.h"
#include "expect_error.h"
#include "test_support.h"

using namespace stoker;
using namespace stoker::test;

namespace {

const QString kScripts = QStringLiteral(STOKER_SOURCE_DIR "/tests/datasets/");

// The pixels of `want` (in the 1/denom image) as a decode returned them, row after row.
QByteArray pixelsOf(const RgbRegion& r, const PixelRect& want) {
  QByteArray out;
  for (int y = want.y; y < want.y + want.height; ++y)
    out.append(reinterpret_cast<const char*>(r.pixels + (y - r.rect.y) * r.stride + (want.x - r.rect.x) * 3), want.width * 3);
  return out;
}

struct Totals {
  std::int64_t asked = 0, decoded = 0, crops = 0;
};

// Decodes random crops of `bytes` at every DCT scale the image allows, through `slot` (whose cache
// grows as the crops go) and plainly; "" when every crop agrees byte for byte.
QString compareCrops(const QByteArray& bytes, const QString& name, JpegIndexSlot slot, int crops, std::mt19937& rng,
                     Totals* totals) {
  const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.constData());
  const auto size = static_cast<std::size_t>(bytes.size());
  ImageDecoder indexed, plain;
  for (int i = 0; i < crops; ++i) {
    indexed.open(data, size, name.toStdString());
    plain.open(data, size, name.toStdString());
    const int denom = std::array<int, 5>{1, 1, 2, 4, 8}[rng() % 5];
    const ImageSize s = indexed.scaledSize(denom);
    PixelRect want;
    want.width = 1 + static_cast<int>(rng() % static_cast<unsigned>(s.width));
    want.height = 1 + static_cast<int>(rng() % static_cast<unsigned>(s.height));
    want.x = static_cast<int>(rng() % static_cast<unsigned>(s.width - want.width + 1));
    want.y = static_cast<int>(rng() % static_cast<unsigned>(s.height - want.height + 1));
    const QByteArray a = pixelsOf(indexed.decode(want, denom, slot), want);
    const ImageDecoder::EntropyMcus m = indexed.lastEntropyMcus();
    const QByteArray b = pixelsOf(plain.decode(want, denom), want);
    if (a != b)
      return QString("%1: crop %2 (%3,%4 %5x%6 at 1/%7) differs from a plain decode")
          .arg(name).arg(i).arg(want.x).arg(want.y).arg(want.width).arg(want.height).arg(denom);
    if (totals && m.hooked) {
      totals->asked += m.asked;
      totals->decoded += m.decoded;
      ++totals->crops;
    }
  }
  return {};
}

}  // namespace

class TestJpegScanIndex : public QObject {
  Q_OBJECT

  QTemporaryDir tmp_;
  QString photos_;    // real photos, 4:2:0 at q90 (make_photo_folder.py)
  QString variants_;  // the same photos in other layouts

  QStringList files(const QString& dir, const QString& pattern) const {
    QStringList out;
    for (const QString& f : QDir(dir).entryList({pattern}, QDir::Files, QDir::Name)) out << dir + "/" + f;
    return out;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    qputenv("STOKER_JPEG_SCAN_INDEX_MB", "");  // the default budget, whatever the caller's environment
    photos_ = tmp_.filePath("photos");
    const auto r = runPythonArgs({kScripts + "make_photo_folder.py", photos_, "--classes", "3", "--per-class", "4", "--seed", "5"});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    // PIL's layouts: subsampling 0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0; grayscale; a large photo for the
    // DCT scales; progressive and CMYK, which are not indexed; odd sizes that end in partial MCUs.
    variants_ = tmp_.filePath("variants");
    const auto v = runPythonArgs({"-c",
        "import sys, os; sys.path.insert(0, sys.argv[2]); import photo_sources; out = sys.argv[1]; os.makedirs(out)\n"
        "for n, img in photo_sources.photos(2):\n"
        "  img = img.convert('RGB')\n"
        "  small = img.resize((333, 251))\n"
        "  small.save(f'{out}/{n}-444.jpg', quality=92, subsampling=0)\n"
        "  small.save(f'{out}/{n}-422.jpg', quality=85, subsampling=1)\n"
        "  small.save(f'{out}/{n}-420.jpg', quality=75, subsampling=2)\n"
        "  small.convert('L').save(f'{out}/{n}-gray.jpg', quality=90)\n"
        "  img.resize((1201, 899)).save(f'{out}/{n}-large.jpg', quality=90)\n"
        "  small.save(f'{out}/{n}-progressive.jpg', quality=90, progressive=True)\n"
        "  small.convert('CMYK').save(f'{out}/{n}-cmyk.jpg', quality=90)\n",
        variants_, kScripts});
    QVERIFY2(v.exitCode == 0, v.err.constData());
  }

  // The self-check passes with Debian's libjpeg-turbo: the feature is on where the benchmarks run.
  void selfCheckPassesHere() { QVERIFY(JpegScanResume::available()); }

  // Every crop, whichever crops came before it (so from a partial index, a full one, or none), at
  // every scale, equals libjpeg's own decode; and the entropy decoder skipped most of the work.
  void cropsEqualPlainDecodes() {
    std::mt19937 rng(7);
    QStringList all = files(photos_ + "/astronaut", "*.jpg") + files(photos_ + "/coffee", "*.jpg");
    for (const QString& layout : {"444", "422", "420", "gray", "large"}) all += files(variants_, "*-" + layout + ".jpg");
    QVERIFY(all.size() >= 12);
    JpegIndexCache cache(all.size(), std::size_t{64} << 20);
    Totals totals;
    for (int round = 0; round < 2; ++round)  // the second round starts from the first one's indexes
      for (int i = 0; i < all.size(); ++i) {
        const QString msg = compareCrops(readFile(all[i]), all[i], {&cache, i}, 25, rng, round ? &totals : nullptr);
        QVERIFY2(msg.isEmpty(), qPrintable(msg));
        QVERIFY2(cache.get(i) && cache.get(i)->covered > 0, qPrintable(all[i]));
      }
    qInfo("%lld crops: %lld of %lld MCUs entropy-decoded (%.1f %%)", static_cast<long long>(totals.crops),
          static_cast<long long>(totals.decoded), static_cast<long long>(totals.asked),
          100.0 * static_cast<double>(totals.decoded) / static_cast<double>(totals.asked));
    QCOMPARE(totals.crops, 25 * static_cast<std::int64_t>(all.size()));
    // Random crops cover about a third of an image's MCUs on average; a hook that decoded them all
    // would be near 100 %.
    QVERIFY(totals.decoded < totals.asked * 6 / 10);
  }

  // A crop after an index covering the whole image decodes its own MCUs and only the few before
  // each row's first that reach back to a point: a tight bound that fails if the jumps stop working.
  // Both spacings: 32 pixels when the budget leaves 16 KiB a sample, else 64.
  void aWarmIndexDecodesLittleMoreThanTheCrop() {
    const QByteArray bytes = readFile(files(variants_, "*-420.jpg").first());
    const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.constData());
    for (const std::int64_t samples : {1, 1000}) {
      JpegIndexCache cache(samples, std::size_t{1} << 20);
      const unsigned step = samples == 1 ? 2u : 4u;  // MCUs of 16 pixels
      QCOMPARE(cache.pointSpacing(), step * 16);
      ImageDecoder d;
      const ImageSize s = d.open(data, static_cast<std::size_t>(bytes.size()), "420.jpg");
      d.decode({0, 0, s.width, s.height}, 1, {&cache, 0});  // records every row
      const auto index = cache.get(0);
      QVERIFY(index);
      QCOMPARE(index->mcusPerRow, (333u + 15) / 16);
      QCOMPARE(index->step, step);
      QVERIFY(index->ended && index->covered >= static_cast<std::int64_t>(index->mcusPerRow) * (index->mcuRows - 1));
      // Columns 128..191 are MCU columns 8..11 (a pixel more on each side widens them to 7..12);
      // rows 112..175 are MCU rows 7..10, with the row above and the row below for fancy
      // upsampling's context: 6 rows of 6 MCUs, each row starting from the point at or before 7.
      d.open(data, static_cast<std::size_t>(bytes.size()), "420.jpg");
      d.decode({128, 112, 64, 64}, 1, {&cache, 0});
      const ImageDecoder::EntropyMcus m = d.lastEntropyMcus();
      QVERIFY(m.hooked);
      qInfo("a 64x64 crop, a point every %u pixels: %lld of %lld MCUs entropy-decoded", step * 16,
            static_cast<long long>(m.decoded), static_cast<long long>(m.asked));
      QCOMPARE(m.decoded, static_cast<std::int64_t>(6 * (6 + 7 % step)));
    }
  }

  // The first decode of an image, a crop at its top, records the index to the end of the scan
  // (short of the last few MCUs, whose bits libjpeg reads together with the end marker), and a file
  // cut short below that crop still decodes the crop, as it did before the index.
  void theFirstDecodeRecordsTheWholeScan() {
    const QByteArray bytes = readFile(files(photos_ + "/coffee", "*.jpg").first());
    JpegIndexCache cache(2, std::size_t{1} << 20);
    ImageDecoder d;
    d.open(reinterpret_cast<const std::uint8_t*>(bytes.constData()), static_cast<std::size_t>(bytes.size()), "top.jpg");
    d.decode({100, 0, 40, 20}, 1, {&cache, 0});
    const auto index = cache.get(0);
    QVERIFY(index && index->ended);
    const std::int64_t total = static_cast<std::int64_t>(index->mcusPerRow) * index->mcuRows;
    QVERIFY2(index->covered >= total - index->mcusPerRow, qPrintable(QString("%1 of %2").arg(index->covered).arg(total)));
    // A file cut short is refused whatever the crop, with an index slot or without (a whole decode,
    // PIL's, refuses it: before, a crop above the cut was taken), and no index is kept for it.
    const QByteArray cut = bytes.left(bytes.size() * 2 / 3);
    const PixelRect top{100, 0, 40, 20};
    for (const JpegIndexSlot slot : {JpegIndexSlot{}, JpegIndexSlot{&cache, 1}}) {
      ImageDecoder d2;
      d2.open(reinterpret_cast<const std::uint8_t*>(cut.constData()), static_cast<std::size_t>(cut.size()), "cut.jpg");
      QCOMPARE(expectBadInput([&] { d2.decode(top, 1, slot); }, {"cut.jpg", "truncated JPEG"}), QString());
    }
    QVERIFY(!cache.get(1));
  }

  // The slot's index was made from other bytes (the file changed): it is not used, and the crop is
  // what the new bytes hold.
  void aChangedFileIgnoresItsOldIndex() {
    const QStringList photos = files(photos_ + "/astronaut", "*.jpg");
    QVERIFY(photos.size() >= 2);
    JpegIndexCache cache(1, std::size_t{1} << 20);
    std::mt19937 rng(3);
    QString msg = compareCrops(readFile(photos[0]), photos[0], {&cache, 0}, 5, rng, nullptr);
    QVERIFY2(msg.isEmpty(), qPrintable(msg));
    const auto before = cache.get(0);
    msg = compareCrops(readFile(photos[1]), photos[1], {&cache, 0}, 10, rng, nullptr);
    QVERIFY2(msg.isEmpty(), qPrintable(msg));
    QVERIFY(cache.get(0) && cache.get(0)->fingerprint != before->fingerprint);
  }

  // Progressive and CMYK JPEGs are not indexed and decode as before; so does a JPEG read with no
  // budget (STOKER_JPEG_SCAN_INDEX_MB=0).
  void unindexedJpegsDecodeAsBefore() {
    std::mt19937 rng(11);
    QStringList others = files(variants_, "*-progressive.jpg") + files(variants_, "*-cmyk.jpg");
    QVERIFY(others.size() == 4);
    JpegIndexCache cache(others.size(), std::size_t{1} << 20);
    for (int i = 0; i < others.size(); ++i) {
      const QString msg = compareCrops(readFile(others[i]), others[i], {&cache, i}, 6, rng, nullptr);
      QVERIFY2(msg.isEmpty(), qPrintable(msg));
      QVERIFY2(!cache.get(i), qPrintable(others[i]));
    }
    JpegIndexCache none(1, 0);
    const QString photo = files(photos_ + "/coffee", "*.jpg").first();
    QVERIFY(compareCrops(readFile(photo), photo, {&none, 0}, 3, rng, nullptr).isEmpty());
    QVERIFY(!none.get(0));
    QCOMPARE(none.bytes(), std::size_t{0});
  }

  // The cache never holds more than its budget: indexes past it are dropped, not stored.
  void theBudgetHolds() {
    const QStringList photos = files(photos_ + "/astronaut", "*.jpg") + files(photos_ + "/coffee", "*.jpg");
    JpegIndexCache probe(1000, std::size_t{1} << 20);  // little a sample: a point every 64 pixels, as below
    std::mt19937 rng(5);
    QVERIFY(compareCrops(readFile(photos[0]), photos[0], {&probe, 0}, 1, rng, nullptr).isEmpty());
    QVERIFY(probe.get(0));
    const std::size_t one = probe.get(0)->bytes();
    JpegIndexCache cache(photos.size(), one * 5 / 2);  // room for two
    QCOMPARE(cache.pointSpacing(), probe.pointSpacing());
    for (int i = 0; i < photos.size(); ++i)
      QVERIFY(compareCrops(readFile(photos[i]), photos[i], {&cache, i}, 2, rng, nullptr).isEmpty());
    int held = 0;
    for (int i = 0; i < photos.size(); ++i) held += cache.get(i) ? 1 : 0;
    QCOMPARE(held, 2);
    QVERIFY(cache.bytes() <= cache.budget());
    // A sample refused an index is not recorded again (that would cost a whole scan every epoch):
    // its next decode runs the plain way.
    const int refused = cache.get(0) && cache.get(1) ? 2 : !cache.get(0) ? 0 : 1;
    QVERIFY(!cache.get(refused) && !cache.mayIndex(refused));
    const QByteArray bytes = readFile(photos[refused]);
    ImageDecoder d;
    d.open(reinterpret_cast<const std::uint8_t*>(bytes.constData()), static_cast<std::size_t>(bytes.size()), "refused.jpg");
    d.decode({10, 10, 50, 50}, 1, {&cache, refused});
    QVERIFY(!d.lastEntropyMcus().hooked);
  }

  // Through the dataset, three epochs (each crop drawn anew, the index growing) read the same
  // samples as a dataset that keeps no index.
  void datasetEpochsEqualUnindexed() {
    const std::string t = "RandomResizedCrop(96),RandomHorizontalFlip(),ToDtype(u8)";
    ImageFolderDataset withIndex(photos_.toStdString(), t);
    qputenv("STOKER_JPEG_SCAN_INDEX_MB", "0");
    ImageFolderDataset without(photos_.toStdString(), t);
    std::vector<std::int64_t> idx(static_cast<std::size_t>(withIndex.size()));
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int64_t>(i);
    const std::size_t bytes = static_cast<std::size_t>(withIndex.fields()[0].sampleBytes) * idx.size();
    for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<std::uint8_t> a(bytes), b(bytes);
      std::vector<std::int64_t> la(idx.size()), lb(idx.size());
      std::uint8_t* da[2] = {a.data(), reinterpret_cast<std::uint8_t*>(la.data())};
      std::uint8_t* db[2] = {b.data(), reinterpret_cast<std::uint8_t*>(lb.data())};
      withIndex.readSamples(idx.data(), withIndex.size(), da, ReadContext{9, epoch, nullptr});
      without.readSamples(idx.data(), without.size(), db, ReadContext{9, epoch, nullptr});
      QVERIFY2(a == b, qPrintable(QString("epoch %1").arg(epoch)));
      QVERIFY(la == lb);
    }
    // The budget is read when a dataset opens: one indexed, the other not.
    QCOMPARE(withIndex.scanIndexBudget(), std::size_t{1024} << 20);
    QVERIFY(withIndex.scanIndexBytes() > 0);
    QCOMPARE(without.scanIndexBudget(), std::size_t{0});
    QCOMPARE(without.scanIndexBytes(), std::size_t{0});
    qputenv("STOKER_JPEG_SCAN_INDEX_MB", "");
  }

  // A budget that is not a whole number of MiB stops the dataset's opening with the variable named
  // (it once fell back to the default without a word; "-1" and "12x" read as numbers).
  void aBadBudgetIsRefused() {
    const std::string t = "RandomResizedCrop(96),ToDtype(u8)";
    for (const char* bad : {"abc", "12x", "-1", " 8", "1048577", "99999999999999999999999"}) {
      qputenv("STOKER_JPEG_SCAN_INDEX_MB", bad);
      QCOMPARE(expectBadInput([&] { ImageFolderDataset d(photos_.toStdString(), t); },
                              {"STOKER_JPEG_SCAN_INDEX_MB", QString("got '%1'").arg(bad)}),
               QString());
    }
    qputenv("STOKER_JPEG_SCAN_INDEX_MB", "7");
    QCOMPARE(ImageFolderDataset(photos_.toStdString(), t).scanIndexBudget(), std::size_t{7} << 20);
    qputenv("STOKER_JPEG_SCAN_INDEX_MB", "");
  }

  // Bad files give what they gave before, error or pixels, whether the slot holds the good file's
  // index or the bad file's own: a JPEG cut short, and one with a run of 0xFF bytes in its entropy
  // data (a marker where data should be: libjpeg warns and fills the rest with gray).
  void badJpegsBehaveAsBeforeWithAnIndex() {
    const QString photo = files(photos_ + "/coffee", "*.jpg").first();
    const QByteArray good = readFile(photo);
    const QByteArray cut = good.left(good.size() / 2);
    QByteArray corrupt = good;
    for (int i = good.size() / 3; i < good.size() / 3 + 64; ++i) corrupt[i] = static_cast<char>(0xFF);
    // The whole image, or the error's text.
    auto outcome = [](const QByteArray& bytes, JpegIndexSlot slot) -> QByteArray {
      ImageDecoder d;
      try {
        const ImageSize s = d.open(reinterpret_cast<const std::uint8_t*>(bytes.constData()),
                                   static_cast<std::size_t>(bytes.size()), "bad.jpg");
        const PixelRect all{0, 0, s.width, s.height};
        return pixelsOf(d.decode(all, 1, slot), all);
      } catch (const Error& e) {
        return QByteArray("error: ") + e.what();
      }
    };
    JpegIndexCache goodIndex(1, std::size_t{1} << 20);
    QVERIFY(!outcome(good, {&goodIndex, 0}).startsWith("error"));
    QVERIFY(goodIndex.get(0));
    const QByteArray cutPlain = outcome(cut, {});
    QVERIFY2(cutPlain.contains("truncated JPEG") && cutPlain.contains("bad.jpg"), cutPlain.constData());
    // A region before the cut is refused too, as a whole decode (PIL's) refuses the file: the
    // region's decode never reached the end, and the file was taken or refused by the crop. Bytes
    // after the EOI (a Motion Photo's video) are no cut.
    auto region = [](const QByteArray& bytes) -> QByteArray {
      ImageDecoder d;
      try {
        d.open(reinterpret_cast<const std::uint8_t*>(bytes.constData()), static_cast<std::size_t>(bytes.size()), "bad.jpg");
        const PixelRect top{0, 0, 16, 16};
        return pixelsOf(d.decode(top, 1, {}), top);
      } catch (const Error& e) {
        return QByteArray("error: ") + e.what();
      }
    };
    const QByteArray cutRegion = region(cut);
    QVERIFY2(cutRegion.contains("truncated JPEG"), cutRegion.constData());
    QCOMPARE(region(good + QByteArray(4096, '\x01')), region(good));
    QVERIFY(!region(good).startsWith("error"));
    for (const QByteArray& bad : {cut, corrupt}) {
      const QByteArray plain = outcome(bad, {});
      QCOMPARE(outcome(bad, {&goodIndex, 0}), plain);
      JpegIndexCache own(1, std::size_t{1} << 20);
      QCOMPARE(outcome(bad, {&own, 0}), plain);
      QCOMPARE(outcome(bad, {&own, 0}), plain);  // from its own index, if it recorded one
    }
  }
};

QTEST_GUILESS_MAIN(TestJpegScanIndex)
#include "tst_jpeg_scan_index.moc"
