// image/jpeg_resume: runs libjpeg's Huffman decoder only over the MCUs a crop needs, by
// recording and restoring its state (image/jpeg_scan_index says why that is worth it).
//
// libjpeg decodes every MCU of the rows it reaches (jdcoefct's decompress_onepass), and
// jpeg_skip_scanlines still Huffman-decodes the rows it skips; both call the entropy decoder
// through cinfo->entropy->decode_mcu, once per MCU in raster order. JpegScanResume replaces that
// pointer for one decode and counts the calls, so it knows each MCU's row and column: an MCU whose
// coefficients libjpeg will not inverse-transform (a skipped row, a column left of or right of the
// crop) is not decoded at all, and before the next MCU that is, the decoder's state is set from the
// index point nearest before it. With no point there yet, it decodes forward and records the points
// it passes.
//
// The state lives in libjpeg-turbo's private huff_entropy_decoder (jdhuff.c): the bit buffer and
// the DC predictors, mirrored here for libjpeg-turbo 2.x and 3.x. Two guards keep a mismatched
// library from being misread: right after jpeg_start_decompress the mirrored fields must hold
// their start values, and once per process a generated JPEG is decoded both ways and must give the
// same pixels; otherwise every decode runs the plain way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first

#include <jpeglib.h>

#include "image/jpeg_scan_index.h"

namespace stoker {

class JpegScanResume {
 public:
  // Whether this process's libjpeg passed the self-check (run on the first call).
  static bool available();

  // After jpeg_start_decompress (and jpeg_crop_scanline, which gave the output columns
  // [cropX, cropX + cropWidth)): hooks the entropy decoder if the image is a single-scan baseline
  // Huffman JPEG of 1 to 3 components without restart intervals. `known` (may be null) is resumed
  // from when it was made from the same bytes (`fingerprint`) and geometry. `data`/`size` are the
  // bytes jpeg_mem_src was given; `spacing`, the source pixels between two points of a row (a new
  // index's; a known one keeps its own). Returns whether the hook is in place.
  bool begin(j_decompress_ptr cinfo, const std::uint8_t* data, std::size_t size, std::uint64_t fingerprint,
             unsigned cropX, unsigned cropWidth, const JpegScanIndex* known, unsigned spacing);
  // After the rows were read: records the rest of the scan unless the index has ended (entropy
  // decoding only). libjpeg may warn or fail in there; the caller decides what that means.
  void recordRest(j_decompress_ptr cinfo);
  // Stops recording for good (recordRest failed part-way: the points before it stay good).
  void stopRecording() {
    recording_ = false;
    index_.ended = true;
  }
  // Unhooks, and says whether index() now holds more than `known` did.
  bool end(j_decompress_ptr cinfo);
  const JpegScanIndex& index() const { return index_; }

  // How many MCUs libjpeg asked for and how many were entropy-decoded in the last decode.
  std::int64_t mcusAsked() const { return next_; }
  std::int64_t mcusDecoded() const { return decoded_; }

 private:
  static boolean hook(j_decompress_ptr cinfo, JBLOCKROW* mcu);
  boolean decodeMcu(j_decompress_ptr cinfo, JBLOCKROW* mcu);
  boolean step(j_decompress_ptr cinfo, JBLOCKROW* mcu);
  void reach(j_decompress_ptr cinfo, std::int64_t mcu);
  void record(j_decompress_ptr cinfo);
  void restore(j_decompress_ptr cinfo, const JpegScanIndex::Point& p);

  boolean (*real_)(j_decompress_ptr, JBLOCKROW*) = nullptr;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  JpegScanIndex index_;
  std::int64_t coveredBefore_ = 0;
  bool endedBefore_ = false;
  std::int64_t next_ = 0;     // the MCU libjpeg asks for next
  std::int64_t pos_ = 0;      // the MCU the decoder's state is at
  std::int64_t decoded_ = 0;
  unsigned firstCol_ = 0, lastCol_ = 0;
  bool recording_ = false;
  bool hooked_ = false;
};

}  // namespace stoker
