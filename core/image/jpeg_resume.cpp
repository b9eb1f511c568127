#include "image/jpeg_resume.h"

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <jerror.h>

namespace stoker {
namespace {

#if defined(LIBJPEG_TURBO_VERSION_NUMBER) && LIBJPEG_TURBO_VERSION_NUMBER >= 2000000 && \
    LIBJPEG_TURBO_VERSION_NUMBER < 4000000 && SIZE_MAX == UINT64_MAX
constexpr bool kMirrored = true;
#else
constexpr bool kMirrored = false;  // another libjpeg: every decode runs the plain way
#endif

using DecodeMcu = boolean (*)(j_decompress_ptr, JBLOCKROW*);

// jpegint.h's struct jpeg_entropy_decoder (3.0 added the lossless decode_mcus after decode_mcu).
struct EntropyPublic {
  void (*start_pass)(j_decompress_ptr);
  DecodeMcu decode_mcu;
#if defined(LIBJPEG_TURBO_VERSION_NUMBER) && LIBJPEG_TURBO_VERSION_NUMBER >= 3000000
  void* decode_mcus;
#endif
  boolean insufficient_data;
};

// jdhuff.h's bitread_perm_state (64-bit: bit_buf_type is size_t), padded to 16 bytes as there.
struct BitState {
  std::size_t get_buffer;  // the bits read ahead, the low `bits_left` of them unread
  int bits_left;
};

// jdhuff.c's huff_entropy_decoder up to the fields used here.
struct HuffDecoder {
  EntropyPublic pub;
  BitState bitstate;
  int last_dc_val[4];  // savable_state: MAX_COMPS_IN_SCAN predictors
  unsigned restarts_to_go;
};
static_assert(sizeof(BitState) == 16 && offsetof(HuffDecoder, last_dc_val) == sizeof(EntropyPublic) + 16,
              "the mirror of jdhuff.c's layout");

HuffDecoder* huff(j_decompress_ptr c) { return reinterpret_cast<HuffDecoder*>(c->entropy); }

// --- the once-per-process self-check -----------------------------------------------------------

struct CheckError {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};
void checkErrorExit(j_common_ptr c) { std::longjmp(reinterpret_cast<CheckError*>(c->err)->jump, 1); }
void checkQuiet(j_common_ptr, int) {}

// A 4:2:0 JPEG of structured noise, in memory (libjpeg's own encoder).
std::vector<std::uint8_t> encodeCheckImage(int width, int height) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(width) * height * 3);
  std::uint32_t s = 12345;
  for (std::size_t i = 0; i < rgb.size(); ++i) {
    s = s * 1664525u + 1013904223u;
    const std::size_t px = i / 3;
    rgb[i] = static_cast<std::uint8_t>((px % width) * 2 + (px / width) + (s >> 27) * (i % 3 + 1));
  }
  jpeg_compress_struct c;
  CheckError err;
  c.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = checkErrorExit;
  unsigned char* out = nullptr;
  unsigned long outSize = 0;
  std::vector<std::uint8_t> bytes;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&c);
    std::free(out);
    return {};
  }
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &out, &outSize);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = rgb.data() + static_cast<std::size_t>(c.next_scanline) * width * 3;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  bytes.assign(out, out + outSize);
  jpeg_destroy_compress(&c);
  std::free(out);
  return bytes;
}

// Rows [y, y + h) and columns from x of width w (widened as jpeg_crop_scanline widens them),
// decoded plainly (resume null) or through `resume`; empty on any libjpeg error.
std::vector<std::uint8_t> decodeCheckCrop(const std::vector<std::uint8_t>& jpeg, unsigned x, unsigned w, unsigned y,
                                          unsigned h, JpegScanResume* resume, const JpegScanIndex* known) {
  jpeg_decompress_struct c;
  CheckError err;
  c.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = checkErrorExit;
  err.pub.emit_message = checkQuiet;
  std::vector<std::uint8_t> pixels;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&c);
    return {};
  }
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
  jpeg_read_header(&c, TRUE);
  c.out_color_space = JCS_RGB;
  jpeg_start_decompress(&c);
  jpeg_crop_scanline(&c, &x, &w);
  if (resume && !resume->begin(&c, jpeg.data(), jpeg.size(), 1, x, w, known, 32)) {
    jpeg_destroy_decompress(&c);
    return {};
  }
  if (y > 0) jpeg_skip_scanlines(&c, y);
  const std::size_t stride = static_cast<std::size_t>(c.output_width) * 3;
  pixels.resize(stride * h);
  for (unsigned row = 0; row < h;) {
    JSAMPROW rp = pixels.data() + stride * row;
    row += jpeg_read_scanlines(&c, &rp, 1);
  }
  if (resume) resume->end(&c);
  jpeg_abort_decompress(&c);
  jpeg_destroy_decompress(&c);
  return pixels;
}

// The hook must give what plain libjpeg gives: a crop decoded from no index (recording one), then
// other crops from it (jumping over skipped rows and columns), compared byte for byte.
bool selfCheck() {
  if (!kMirrored) return false;
  const std::vector<std::uint8_t> jpeg = encodeCheckImage(203, 157);
  if (jpeg.empty()) return false;
  JpegScanResume first;
  const std::vector<std::uint8_t> a = decodeCheckCrop(jpeg, 40, 90, 30, 70, &first, nullptr);
  if (a.empty() || a != decodeCheckCrop(jpeg, 40, 90, 30, 70, nullptr, nullptr)) return false;
  const JpegScanIndex index = first.index();
  if (index.covered <= 0) return false;
  const unsigned crops[][4] = {{70, 60, 50, 40}, {0, 203, 0, 157}, {100, 103, 90, 67}, {17, 33, 120, 30}};
  for (const auto& k : crops) {
    JpegScanResume again;
    const std::vector<std::uint8_t> b = decodeCheckCrop(jpeg, k[0], k[1], k[2], k[3], &again, &index);
    if (b.empty() || b != decodeCheckCrop(jpeg, k[0], k[1], k[2], k[3], nullptr, nullptr)) return false;
  }
  return true;
}

}  // namespace

bool JpegScanResume::available() {
  static const bool ok = selfCheck();
  return ok;
}

bool JpegScanResume::begin(j_decompress_ptr c, const std::uint8_t* data, std::size_t size, std::uint64_t fingerprint,
                           unsigned cropX, unsigned cropWidth, const JpegScanIndex* known, unsigned spacing) {
  hooked_ = false;
  next_ = pos_ = decoded_ = 0;
  if (!kMirrored || c->progressive_mode || c->arith_code || jpeg_has_multiple_scans(c) || c->buffered_image ||
      c->restart_interval != 0 || c->comps_in_scan != c->num_components || c->comps_in_scan < 1 ||
      c->comps_in_scan > 3 || c->data_precision != 8 || c->MCUs_per_row == 0 || c->MCU_rows_in_scan == 0 ||
      size > UINT32_MAX)
    return false;
  HuffDecoder* h = huff(c);
  // What start_pass_huff_decoder leaves: a wrong mirror would read pointers or garbage here.
  if (!h || !h->pub.decode_mcu || h->pub.insufficient_data || h->bitstate.bits_left != 0 || h->bitstate.get_buffer != 0 ||
      h->restarts_to_go != 0 || c->src->next_input_byte < data || c->src->next_input_byte > data + size)
    return false;
  for (int ci = 0; ci < c->comps_in_scan; ++ci)  // start_pass zeroes only the scan's predictors
    if (h->last_dc_val[ci] != 0) return false;

  // An MCU is one block of a single-component scan, else max_h_samp_factor blocks across; its width
  // in output pixels is that times the scaled block size, as jpeg_crop_scanline aligns to it.
  const unsigned blocks = c->comps_in_scan == 1 ? 1u : static_cast<unsigned>(c->max_h_samp_factor);
  const unsigned mcuWidth = blocks * static_cast<unsigned>(c->min_DCT_scaled_size);
  if (mcuWidth == 0) return false;
  firstCol_ = cropX / mcuWidth;
  lastCol_ = std::min((cropX + cropWidth + mcuWidth - 1) / mcuWidth, static_cast<unsigned>(c->MCUs_per_row)) - 1;

  const std::uint32_t mcusPerRow = c->MCUs_per_row, mcuRows = c->MCU_rows_in_scan;
  const std::uint32_t stepMcus = std::max(1u, spacing / (blocks * 8u));  // MCUs between points
  index_.fingerprint = fingerprint;
  index_.mcusPerRow = mcusPerRow;
  index_.mcuRows = mcuRows;
  index_.components = static_cast<std::uint32_t>(c->comps_in_scan);
  index_.step = stepMcus;
  index_.pointsPerRow = (mcusPerRow + stepMcus - 1) / stepMcus;
  const std::size_t points = static_cast<std::size_t>(index_.pointsPerRow) * mcuRows;
  const bool resumable = known && known->fingerprint == fingerprint && known->mcusPerRow == mcusPerRow &&
                         known->mcuRows == mcuRows && known->step == stepMcus &&
                         known->components == index_.components && known->points.size() == points;
  if (resumable) {
    index_.covered = known->covered;
    index_.ended = known->ended;
    index_.points.assign(known->points.begin(), known->points.end());
  } else {  // none yet, or made from other bytes: start afresh
    index_.covered = 0;
    index_.ended = false;
    index_.points.assign(points, JpegScanIndex::Point{});
  }
  coveredBefore_ = index_.covered;
  endedBefore_ = index_.ended;
  recording_ = true;
  data_ = data;
  size_ = size;
  real_ = h->pub.decode_mcu;
  h->pub.decode_mcu = &JpegScanResume::hook;
  c->client_data = this;
  hooked_ = true;
  return true;
}

void JpegScanResume::recordRest(j_decompress_ptr c) {
  if (!hooked_ || index_.ended) return;
  const std::int64_t total = static_cast<std::int64_t>(index_.mcusPerRow) * index_.mcuRows;
  if (recording_ && index_.covered < total) {
    reach(c, index_.covered);
    while (recording_ && pos_ < total && c->unread_marker == 0 && !huff(c)->pub.insufficient_data)
      if (!step(c, nullptr)) break;
  }
  index_.ended = true;
}

bool JpegScanResume::end(j_decompress_ptr c) {
  if (!hooked_) return false;
  huff(c)->pub.decode_mcu = real_;
  c->client_data = nullptr;
  hooked_ = false;
  return index_.covered > coveredBefore_ || index_.ended != endedBefore_;
}

boolean JpegScanResume::hook(j_decompress_ptr c, JBLOCKROW* mcu) {
  return static_cast<JpegScanResume*>(c->client_data)->decodeMcu(c, mcu);
}

// libjpeg asks for MCU next_: with a null buffer (a skipped row) or outside the crop's columns its
// coefficients are never used, so it is left undecoded (zero, as libjpeg zeroed it). Otherwise the
// decoder's state is brought to it: from the nearest recorded point when that is ahead of where the
// state is, then decoding forward. The jpeg_mem_src source never suspends, so no FALSE comes back
// from libjpeg that would make it ask for the same MCU again.
boolean JpegScanResume::decodeMcu(j_decompress_ptr c, JBLOCKROW* mcu) {
  const std::int64_t k = next_++;
  const unsigned col = static_cast<unsigned>(k % index_.mcusPerRow);
  if (!mcu || col < firstCol_ || col > lastCol_) return TRUE;
  reach(c, k);
  return pos_ == k ? step(c, mcu) : FALSE;
}

// Brings the decoder's state to MCU k (>= pos_): from the recorded point nearest before k when that
// is ahead of pos_, then decoding forward (recording what it passes past `covered`).
void JpegScanResume::reach(j_decompress_ptr c, std::int64_t k) {
  if (pos_ >= k) return;
  std::int64_t from = index_.covered > 0 ? std::min(k, index_.covered - 1) : 0;
  const std::size_t point = index_.pointAt(from);
  from = index_.mcuOfPoint(point);
  if (from > pos_) {
    restore(c, index_.points[point]);
    pos_ = from;
  }
  while (pos_ < k)
    if (!step(c, nullptr)) return;
}

boolean JpegScanResume::step(j_decompress_ptr c, JBLOCKROW* mcu) {
  if (recording_ && pos_ == index_.covered) record(c);
  if (!real_(c, mcu)) return FALSE;
  ++pos_;
  ++decoded_;
  return TRUE;
}

// Notes the state before MCU pos_ (a point when pos_ is on the grid). The bits libjpeg has read
// ahead are the last bits_left bits of the data bytes before next_input_byte, so the point is found
// by walking back over them, a stuffed zero after each 0xFF data byte. Near a marker libjpeg pads
// with zero bits that are not in the file, and a 0xFF not followed by a stuffed zero is padding
// libjpeg skips: from there on nothing more is recorded.
void JpegScanResume::record(j_decompress_ptr c) {
  if (pos_ >= static_cast<std::int64_t>(index_.mcusPerRow) * index_.mcuRows) {  // libjpeg never asks past the scan
    recording_ = false;
    return;
  }
  if (static_cast<std::uint32_t>(pos_ % index_.mcusPerRow) % index_.step == 0) {
    const HuffDecoder* h = huff(c);
    const std::uint8_t* end = data_ + size_;
    const std::uint8_t* q = c->src->next_input_byte;
    int unread = h->bitstate.bits_left;
    bool ok = c->unread_marker == 0 && !h->pub.insufficient_data && unread >= 0 && unread <= 64 && q >= data_ + 2 &&
              q <= end;
    if (ok && unread == 0) {
      ok = q < end - 1 && (*q != 0xFF || q[1] == 0);
      unread = 8;
    } else {
      while (ok) {
        --q;
        if (*q == 0x00 && q[-1] == 0xFF) --q;
        else if (*q == 0xFF) ok = false;
        if (!ok || unread <= 8) break;
        unread -= 8;
        ok = q >= data_ + 2;
      }
    }
    JpegScanIndex::Point p;
    for (std::uint32_t ci = 0; ok && ci < index_.components; ++ci) {
      ok = h->last_dc_val[ci] >= INT16_MIN && h->last_dc_val[ci] <= INT16_MAX;
      p.lastDc[ci] = static_cast<std::int16_t>(h->last_dc_val[ci]);
    }
    if (!ok) {
      recording_ = false;
      return;
    }
    p.offset = static_cast<std::uint32_t>(q - data_);
    p.unreadBits = static_cast<std::uint8_t>(unread);
    index_.points[index_.pointAt(pos_)] = p;
  }
  index_.covered = pos_ + 1;
}

void JpegScanResume::restore(j_decompress_ptr c, const JpegScanIndex::Point& p) {
  HuffDecoder* h = huff(c);
  const std::uint8_t* b = data_ + p.offset;
  const std::size_t skip = *b == 0xFF ? 2 : 1;  // a 0xFF data byte is followed by its stuffed zero
  c->src->next_input_byte = b + skip;
  c->src->bytes_in_buffer = size_ - p.offset - skip;
  h->bitstate.get_buffer = *b;
  h->bitstate.bits_left = p.unreadBits;
  for (std::uint32_t ci = 0; ci < index_.components; ++ci) h->last_dc_val[ci] = p.lastDc[ci];
}

}  // namespace stoker
