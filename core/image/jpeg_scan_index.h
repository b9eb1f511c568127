// image/jpeg_scan_index: where libjpeg's Huffman decoder stood at points of a baseline JPEG's scan,
// so that a later decode of another crop of the same image starts at the crop instead of running
// the bitstream from its first MCU.
//
// A baseline JPEG is one serial Huffman bitstream: to reach the MCU at row r, column c, libjpeg must
// decode every MCU before it, although it only inverse-transforms the crop's columns and skips the
// rows above it. That entropy decoding is most of a crop's cost (42 % of the train pipeline's time
// in perf, against 8 % for the IDCT). The decoder's state between two MCUs is small: the position in
// the stream (a byte and how many of its bits are unread) and each component's last DC value. The
// first decode of an image records it every `step` MCUs (32 or 64 pixels) of every MCU row, up to the last MCU it
// decoded; later epochs jump from one recorded point to the next and decode only the MCUs the crop
// covers (plus at most step - 1 before each row's first). The first decode goes on recording to the
// end of the scan once its rows are out (entropy decoding only), so the second epoch already finds
// a point before every crop. The pixels are the same bit for bit: the
// same libjpeg decodes the same MCUs from the same state (tst_jpeg_scan_index checks it on every crop).
//
// JpegIndexCache keeps one index per sample of a dataset, shared by the worker threads, within a
// byte budget (an index costs 12 bytes per point: 2.3 KiB for a 500x375 4:2:0 photo with a point
// every 64 pixels, 4.6 KiB every 32).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace stoker {

struct JpegScanIndex {
  // The decoder's state just before an MCU: the entropy-coded byte holding the next unread bit (at
  // `offset` in the file), how many of its bits are still unread (1 to 8), and the DC predictors.
  struct Point {
    std::uint32_t offset = 0;
    std::uint8_t unreadBits = 0;
    std::int16_t lastDc[3] = {0, 0, 0};
  };
  std::uint64_t fingerprint = 0;  // XXH3 of the file's bytes: a changed file never uses a stale index
  std::uint32_t mcusPerRow = 0, mcuRows = 0, components = 0;
  std::uint32_t step = 1;         // MCUs between two points of a row (a point at columns 0, step, 2 step...)
  std::uint32_t pointsPerRow = 0;
  // Points exist for every MCU before `covered` (in raster order) that sits on the grid.
  std::int64_t covered = 0;
  // Recording went as far as it can: to the scan's last MCU, or to where the data stops being
  // recordable (a marker, missing data); later decodes do not try to extend it.
  bool ended = false;
  std::vector<Point> points;      // pointsPerRow per MCU row, for all rows (filled up to `covered`)

  std::size_t bytes() const { return sizeof(*this) + points.capacity() * sizeof(Point); }
  // The point at or before MCU `mcu` on its row's grid (its index in `points`), and that MCU.
  std::size_t pointAt(std::int64_t mcu) const {
    return static_cast<std::size_t>(mcu / mcusPerRow) * pointsPerRow + static_cast<std::size_t>(mcu % mcusPerRow) / step;
  }
  std::int64_t mcuOfPoint(std::size_t point) const {
    return static_cast<std::int64_t>(point / pointsPerRow) * mcusPerRow +
           static_cast<std::int64_t>(point % pointsPerRow) * step;
  }
};

// One slot per sample; get/put are safe from any thread (a sample is indexed by whichever worker
// decodes it, and a later epoch may give it to another).
class JpegIndexCache {
 public:
  JpegIndexCache(std::int64_t samples, std::size_t budgetBytes);
  std::shared_ptr<const JpegScanIndex> get(std::int64_t sample) const;
  // Replaces the sample's index; dropped when it would pass the budget, and the sample is then not
  // indexed again (mayIndex false): a decode that records costs a whole pass over the scan, which
  // every epoch would pay for an index it cannot keep.
  void put(std::int64_t sample, std::shared_ptr<const JpegScanIndex> index);
  // Whether a decode of the sample may record an index (no put() for it was refused).
  bool mayIndex(std::int64_t sample) const;
  std::size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  std::size_t budget() const { return budget_; }
  // Source pixels between two points of a row: 32 when the budget leaves 16 KiB a sample (a
  // 500x375 photo's index is then 4.6 KiB, and a crop's rows start 8 pixels before it on average,
  // 4 % faster here than 64), else 64 (2.3 KiB: twice the photos indexed within the budget).
  unsigned pointSpacing() const { return spacing_; }

  // The budget a dataset gets: STOKER_JPEG_SCAN_INDEX_MB (MiB; 0 turns indexing off), else 1024 MiB,
  // room for about 450,000 photos of 500x375 at the 64-pixel spacing. Throws Error(BadInput) naming
  // the variable for anything but a whole number of MiB up to 1 TiB.
  static std::size_t defaultBudget();

 private:
  std::vector<std::shared_ptr<const JpegScanIndex>> slots_;  // read and written with std::atomic_load/store
  std::unique_ptr<std::atomic<bool>[]> refused_;             // put() found no room for the sample's index
  std::atomic<std::size_t> bytes_{0};
  std::size_t budget_;
  unsigned spacing_;
};

// Which cache slot an image's decode may use and refresh (cache null: none).
struct JpegIndexSlot {
  JpegIndexCache* cache = nullptr;
  std::int64_t sample = -1;
};

}  // namespace stoker
