#include "image/image_decoder.h"

#include <spng.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#include <jerror.h>

#include <xxhash.h>

#include "image/resample.h"
#include "image/bmp_image.h"
#include "image/jpeg_resume.h"
#include "image/tiff_image.h"
#include "image/webp_image.h"
#include "util/error.h"

namespace stoker {

ImageFormat sniffImageFormat(const std::uint8_t* data, std::size_t size) {
  static const std::uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return ImageFormat::Jpeg;
  if (size >= 8 && std::memcmp(data, png, 8) == 0) return ImageFormat::Png;
  if (isWebp(data, size)) return ImageFormat::Webp;
  if (isTiff(data, size)) return ImageFormat::Tiff;
  if (isBmp(data, size)) return ImageFormat::Bmp;
  if (size >= 2 && data[0] == 'P' && data[1] >= '1' && data[1] <= '7') return ImageFormat::Pnm;
  return ImageFormat::Unknown;
}

const char* imageFormatName(ImageFormat f) {
  switch (f) {
    case ImageFormat::Jpeg: return "JPEG";
    case ImageFormat::Png: return "PNG";
    case ImageFormat::Webp: return "WebP";
    case ImageFormat::Tiff: return "TIFF";
    case ImageFormat::Bmp: return "BMP";
    case ImageFormat::Pnm: return "PPM/PGM";  // recognised, to say it is not decoded
    case ImageFormat::Unknown: break;
  }
  return "unknown";
}

namespace {

// What PIL gives for a 4-component JPEG: its "CMYK;I" raw mode (Adobe's inverted polarity, assumed
// for every CMYK JPEG) and then Image.convert("RGB")'s cmyk2rgb (Pillow's Convert.c).
void cmykToRgb(const std::uint8_t* in, unsigned width, std::uint8_t* out) {
  auto muldiv255 = [](int a, int b) {
    const int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
  };
  for (unsigned x = 0; x < width; ++x, in += 4, out += 3) {
    const int nk = in[3];  // 255 - (255 - k): the inverted K, negated
    for (int c = 0; c < 3; ++c) {
      const int v = nk - muldiv255(255 - in[c], nk);
      out[c] = static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

// libjpeg's message as what it is: a valid JPEG of a kind libjpeg-turbo does not decode (12-bit
// precision, lossless, arithmetic coding or a conversion not built in) is no corrupt file. By the
// message's code: "Unsupported marker type" is corruption, whatever its first word.
std::string jpegProblem(int code, const char* message) {
  const bool unsupported = code == JERR_BAD_PRECISION || code == JERR_SOF_UNSUPPORTED || code == JERR_ARITH_NOTIMPL ||
                           code == JERR_NOT_COMPILED || code == JERR_CONVERSION_NOTIMPL;
  return std::string(unsupported ? "unsupported JPEG: " : "corrupt JPEG: ") + message;
}

}  // namespace

// libjpeg reports errors by calling error_exit, which must not return: it longjmps back to the
// setjmp in the calls below. Those functions hold no C++ objects, so nothing is skipped.
struct ImageDecoder::Jpeg {
  struct ErrorManager {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    bool truncated;
  };
  jpeg_decompress_struct cinfo{};  // no memory manager until readHeader: destroy is then a no-op
  ErrorManager err;
  bool cmyk = false;               // CMYK or YCCK: decoded as CMYK, converted to RGB as PIL does
  std::vector<std::uint8_t> row4;  // one CMYK row
  JpegScanResume resume;           // entropy-decodes only the crop's MCUs, from a scan index
  bool indexGrew = false;          // the last decode recorded more of the index than it was given
  bool hooked = false;             // the last decode went through `resume`
  jpeg_progress_mgr progress{};    // stops a file with more scans than kMaxJpegScans

  // Each scan of a multi-scan file walks every block of the image: thousands of near-empty scans
  // in a few kilobytes took minutes an image. libjpeg-turbo's TurboJPEG stops at 500 too.
  static constexpr int kMaxJpegScans = 500;
  static void onProgress(j_common_ptr c) {
    auto* d = reinterpret_cast<j_decompress_ptr>(c);
    if (d->input_scan_number <= kMaxJpegScans) return;
    auto* e = reinterpret_cast<ErrorManager*>(c->err);
    std::snprintf(e->message, sizeof e->message, "more than %d scans (a progressive JPEG has about 10)", kMaxJpegScans);
    std::longjmp(e->jump, 1);
  }

  // The last error's words, "unsupported" or "corrupt" (jpegProblem).
  std::string problem() const { return jpegProblem(err.pub.msg_code, err.message); }

  static void onError(j_common_ptr c) {
    auto* e = reinterpret_cast<ErrorManager*>(c->err);
    (*c->err->format_message)(c, e->message);
    std::longjmp(e->jump, 1);
  }
  // Warnings: libjpeg pads a truncated file with gray and goes on; PIL refuses it, and so do we.
  static void onMessage(j_common_ptr c, int level) {
    auto* e = reinterpret_cast<ErrorManager*>(c->err);
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) e->truncated = true;
  }

  Jpeg() {  // the decompressor itself is made per image, by readHeader
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = onError;
    err.pub.emit_message = onMessage;
  }
  ~Jpeg() { jpeg_destroy_decompress(&cinfo); }

  // 0 on success, else err.message says why.
  int readHeader(const std::uint8_t* data, std::size_t size) {
    err.truncated = false;
    err.message[0] = '\0';
    // A new decompressor for every image, not jpeg_abort_decompress: libjpeg keeps the quantization
    // and Huffman tables across images (for abbreviated streams), so an image that leaves a table
    // out (Motion-JPEG frames rely on the standard Huffman tables), or defines it only after its
    // first scan, would decode with the last image's table: other pixels than PIL's, which starts
    // afresh, and pixels that depend on which image this worker decoded before (found by
    // fuzz_image_decode). A create costs a few small allocations against milliseconds of decode.
    // It comes after the setjmp: out of memory, it reports through error_exit too (and leaves no
    // memory manager, which jpeg_abort_decompress and the next destroy accept).
    if (setjmp(err.jump)) {
      jpeg_abort_decompress(&cinfo);
      return 1;
    }
    jpeg_destroy_decompress(&cinfo);
    jpeg_create_decompress(&cinfo);
    progress.progress_monitor = onProgress;
    cinfo.progress = &progress;
    jpeg_mem_src(&cinfo, const_cast<unsigned char*>(data), static_cast<unsigned long>(size));
    jpeg_read_header(&cinfo, TRUE);
    return 0;
  }

  // The index's rest, recorded once the region's rows are out: speculative work, so a warning (the
  // file cut short below the region, which the region does not need) or an error in there does not
  // count against the decode; the index keeps the points recorded before it.
  void recordRest() {
    const bool truncated = err.truncated;
    std::jmp_buf outer;
    std::memcpy(&outer, &err.jump, sizeof outer);
    if (setjmp(err.jump)) resume.stopRecording();
    else resume.recordRest(&cinfo);
    std::memcpy(&err.jump, &outer, sizeof outer);
    err.truncated = truncated;
  }

  int scaledSize(int denom, unsigned* w, unsigned* h) {
    if (setjmp(err.jump)) return 1;
    cinfo.scale_num = 1;
    cinfo.scale_denom = static_cast<unsigned>(denom);
    jpeg_calc_output_dimensions(&cinfo);
    *w = cinfo.output_width;
    *h = cinfo.output_height;
    return 0;
  }

  // Decodes rows [y, y + h) and (at least) columns [*x, *x + *w) of the 1/denom image into
  // `out` (resized by the caller through `grow`); *x and *w come back widened to iMCU edges.
  // With `data` non-null (the bytes given to readHeader), the entropy decoding runs through
  // `resume` from the scan index `known` (may be null) and indexGrew says whether it recorded more.
  int decode(int denom, unsigned* x, unsigned* w, unsigned y, unsigned h, PixelBuffer* out,
             const std::uint8_t* data, std::size_t size, std::uint64_t fingerprint, const JpegScanIndex* known,
             unsigned spacing, bool gray) {
    indexGrew = hooked = false;
    if (setjmp(err.jump)) {
      hooked = false;
      jpeg_abort_decompress(&cinfo);
      return 1;
    }
    cinfo.scale_num = 1;
    cinfo.scale_denom = static_cast<unsigned>(denom);
    cinfo.out_color_space = cmyk ? JCS_CMYK : gray ? JCS_GRAYSCALE : JCS_RGB;  // libjpeg turns YCCK into CMYK
    jpeg_start_decompress(&cinfo);
    if (*w < cinfo.output_width) {
      // One more column on each side: libjpeg's fancy upsampling treats the cropped span's first
      // and last columns as the image's edges, so their chroma differs from a whole decode (up to
      // 14 levels on a red-blue edge, in tst_image_datasets); the columns asked for stay inside.
      const unsigned left = *x > 0 ? 1 : 0;
      *x -= left;
      *w = std::min(*w + left + 1, cinfo.output_width - *x);
      if (*w < cinfo.output_width) jpeg_crop_scanline(&cinfo, x, w);
    }
    hooked = data && resume.begin(&cinfo, data, size, fingerprint, *x, *w, known, spacing);
    if (y > 0) jpeg_skip_scanlines(&cinfo, y);
    const std::size_t stride = static_cast<std::size_t>(cinfo.output_width) * (gray ? 1 : 3);
    if (out->size() < stride * h + kResampleSlack) out->resize(stride * h + kResampleSlack);  // the resampler reads past
    if (cmyk) row4.resize(static_cast<std::size_t>(cinfo.output_width) * 4);
    for (unsigned row = 0; row < h;) {
      // Up to 16 rows per call (libjpeg makes them a row group at a time), one when converting CMYK.
      JSAMPROW rows[16];
      const unsigned want = cmyk ? 1 : std::min(h - row, 16u);
      for (unsigned i = 0; i < want; ++i) rows[i] = cmyk ? row4.data() : out->data() + stride * (row + i);
      const unsigned got = jpeg_read_scanlines(&cinfo, rows, want);
      if (cmyk && got) cmykToRgb(row4.data(), cinfo.output_width, out->data() + stride * row);
      row += got;
    }
    if (hooked) {
      recordRest();
      indexGrew = resume.end(&cinfo);
    }
    jpeg_abort_decompress(&cinfo);  // the rows below the region are never inverse-transformed
    return 0;
  }
};

ImageDecoder::ImageDecoder() = default;
ImageDecoder::~ImageDecoder() = default;

namespace {

// Whether an EOI marker (FF D9) lies at or after `from` (where the first scan's entropy-coded data
// starts): such data holds no FF D9 (an FF byte is stuffed as FF 00), so a file cut short has none
// there (an EXIF thumbnail's EOI lies before the scan). Searched from the end: at once for a whole
// file, also one with trailing bytes after it (a Motion Photo's video).
bool eoiAfter(const std::uint8_t* data, std::size_t size, std::size_t from) {
  for (std::size_t end = size; end > from + 1;) {
    const void* hit = ::memrchr(data + from + 1, 0xD9, end - from - 1);
    if (!hit) return false;
    const std::size_t at = static_cast<std::size_t>(static_cast<const std::uint8_t*>(hit) - data);
    if (data[at - 1] == 0xFF) return true;
    end = at;
  }
  return false;
}


// A progressive (or any multi-scan) JPEG is decoded into a buffer of every DCT coefficient of the
// image, 128 bytes a block, zeroed at the start, whatever the file holds: a 150-byte file that
// declares 13376x13376 pixels took 1 GiB a worker before it was found truncated. Refused when the
// buffer exceeds both 256 MiB and 1024x the file (a real progressive photo needs 10-100x: 72 MB
// for a 24-megapixel 4:2:0 file of 1-10 MB).
void refuseCoefficientBomb(const jpeg_decompress_struct& cinfo, std::size_t size, const std::string& name) {
  if (!jpeg_has_multiple_scans(const_cast<j_decompress_ptr>(&cinfo))) return;
  std::uint64_t blocks = 0;
  for (int c = 0; c < cinfo.num_components; ++c) {
    const jpeg_component_info& comp = cinfo.comp_info[c];
    const auto roundUp = [](std::uint64_t v, std::uint64_t m) { return m ? (v + m - 1) / m * m : v; };
    blocks += roundUp(comp.width_in_blocks, static_cast<std::uint64_t>(comp.h_samp_factor)) *
              roundUp(comp.height_in_blocks, static_cast<std::uint64_t>(comp.v_samp_factor));
  }
  const std::uint64_t bytes = blocks * DCTSIZE2 * sizeof(JCOEF);
  constexpr std::uint64_t kFloor = std::uint64_t{256} << 20;
  if (bytes > kFloor && bytes > std::uint64_t{1024} * size)
    throwBadInput(name, "progressive JPEG of " + std::to_string(cinfo.image_width) + "x" + std::to_string(cinfo.image_height) +
                            " in " + std::to_string(size) + " bytes: decoding it would hold " + std::to_string(bytes >> 20) +
                            " MiB of coefficients (more than 1024x the file; a decompression bomb?)");
}

}  // namespace

ImageSize ImageDecoder::open(const std::uint8_t* data, std::size_t size, const std::string& name) {
  releaseIfHuge(pixels_);  // the last image's, if it was a large one
  data_ = data;
  size_ = size;
  name_ = name;
  format_ = sniffImageFormat(data, size);
  if (format_ == ImageFormat::Jpeg) {
    if (!jpeg_) jpeg_ = std::make_unique<Jpeg>();
    if (jpeg_->readHeader(data, size)) throwBadInput(name, jpeg_->problem());
    size0_ = {static_cast<int>(jpeg_->cinfo.image_width), static_cast<int>(jpeg_->cinfo.image_height)};
    refuseCoefficientBomb(jpeg_->cinfo, size, name);
    const J_COLOR_SPACE cs = jpeg_->cinfo.jpeg_color_space;
    jpeg_->cmyk = cs == JCS_CMYK || cs == JCS_YCCK;
    jpegEnds_ = eoiAfter(data, size, static_cast<std::size_t>(jpeg_->cinfo.src->next_input_byte - data));
  } else if (format_ == ImageFormat::Png) {
    spng_ctx* ctx = spng_ctx_new(0);
    if (!ctx) throw Error(ErrorKind::Io, name, "out of memory for a PNG decoder");
    std::unique_ptr<spng_ctx, void (*)(spng_ctx*)> guard(ctx, spng_ctx_free);
    spng_ihdr ihdr{};
    int rc = spng_set_png_buffer(ctx, data, size);
    if (!rc) rc = spng_get_ihdr(ctx, &ihdr);
    if (rc) throwBadInput(name, std::string("corrupt PNG: ") + spng_strerror(rc));
    if (ihdr.width > (1u << 20) || ihdr.height > (1u << 20)) throwBadInput(name, "PNG dimensions are too large");
    size0_ = {static_cast<int>(ihdr.width), static_cast<int>(ihdr.height)};
  } else if (format_ == ImageFormat::Webp) {
    size0_ = webpSize(data, size, name);
  } else if (format_ == ImageFormat::Tiff) {
    size0_ = tiffSize(data, size, name);
  } else if (format_ == ImageFormat::Bmp) {
    size0_ = bmpSize(data, size, name);
  } else if (format_ == ImageFormat::Pnm) {
    throwBadInput(name, "PPM/PGM image: not decoded (no fuzz-hardened reader for it is packaged here; "
                        "convert it to PNG, e.g. with Pillow or netpbm's pnmtopng)");
  } else {
    throwBadInput(name, size == 0 ? "empty file" : "not an image Stoker decodes (JPEG, PNG, WebP, TIFF, BMP)");
  }
  if (size0_.width < 1 || size0_.height < 1 ||
      static_cast<std::int64_t>(size0_.width) * size0_.height > kMaxImagePixels)
    throwBadInput(name, "image of " + std::to_string(size0_.width) + "x" + std::to_string(size0_.height) +
                            " pixels: must be 1 to " + std::to_string(kMaxImagePixels) +
                            " pixels (PIL's decompression-bomb limit)");
  return size0_;
}

ImageSize ImageDecoder::scaledSize(int denom) const {
  if (denom == 1 || format_ != ImageFormat::Jpeg) return size0_;
  unsigned w = 0, h = 0;
  if (jpeg_->scaledSize(denom, &w, &h)) throwBadInput(name_, jpeg_->problem());
  return {static_cast<int>(w), static_cast<int>(h)};
}

RgbRegion ImageDecoder::decode(PixelRect want, int denom, JpegIndexSlot slot, bool keepGray) {
  const ImageSize full = scaledSize(denom);
  want.x = std::clamp(want.x, 0, full.width - 1);
  want.y = std::clamp(want.y, 0, full.height - 1);
  want.width = std::clamp(want.width, 1, full.width - want.x);
  want.height = std::clamp(want.height, 1, full.height - want.y);
  switch (format_) {  // the formats other than JPEG decode whole
    case ImageFormat::Jpeg: break;
    case ImageFormat::Png: return decodePng();
    case ImageFormat::Webp: decodeWebp(data_, size_, name_, size0_, pixels_, kResampleSlack); return wholeImage();
    case ImageFormat::Tiff: decodeTiff(data_, size_, name_, size0_, pixels_, kResampleSlack); return wholeImage();
    case ImageFormat::Bmp: decodeBmp(data_, size_, name_, size0_, pixels_, kResampleSlack); return wholeImage();
    case ImageFormat::Pnm:
    case ImageFormat::Unknown: throwBadInput(name_, "no image opened");
  }
  if (!jpegEnds_) {
    // No EOI after the scan: cut short, or a writer that left it out. A region's decode never
    // reaches the end, so it would take a cut file that a whole decode (PIL's) refuses, depending
    // on the crop: the whole image is decoded, and libjpeg's end-of-data warning decides.
    want = {0, 0, full.width, full.height};
    slot.cache = nullptr;
  }
  unsigned x = static_cast<unsigned>(want.x), w = static_cast<unsigned>(want.width);
  // The scan index, when the dataset keeps one: looked up and published here, outside the function
  // libjpeg longjmps through.
  const std::shared_ptr<const JpegScanIndex> known =
      slot.cache && JpegScanResume::available() ? slot.cache->get(slot.sample) : nullptr;
  const bool indexed = known || (slot.cache && slot.cache->mayIndex(slot.sample) && JpegScanResume::available());
  const std::uint64_t fingerprint = indexed ? XXH3_64bits(data_, size_) : 0;
  const bool gray = keepGray && jpeg_->cinfo.jpeg_color_space == JCS_GRAYSCALE;
  if (jpeg_->decode(denom, &x, &w, static_cast<unsigned>(want.y), static_cast<unsigned>(want.height), &pixels_,
                    indexed ? data_ : nullptr, size_, fingerprint, known.get(), indexed ? slot.cache->pointSpacing() : 0,
                    gray))
    throwBadInput(name_, jpeg_->problem());
  if (jpeg_->err.truncated) throwBadInput(name_, "truncated JPEG (premature end of data)");
  if (jpeg_->indexGrew) slot.cache->put(slot.sample, std::make_shared<const JpegScanIndex>(jpeg_->resume.index()));
  RgbRegion r;
  r.pixels = pixels_.data();
  r.channels = gray ? 1 : 3;
  r.stride = static_cast<std::ptrdiff_t>(w) * r.channels;
  r.rect = {static_cast<int>(x), want.y, static_cast<int>(w), want.height};
  return r;
}

ImageDecoder::EntropyMcus ImageDecoder::lastEntropyMcus() const {
  if (format_ != ImageFormat::Jpeg || !jpeg_ || !jpeg_->hooked) return {};
  return {true, jpeg_->resume.mcusAsked(), jpeg_->resume.mcusDecoded()};
}

RgbRegion ImageDecoder::decodePng() {
  spng_ctx* ctx = spng_ctx_new(0);
  if (!ctx) throw Error(ErrorKind::Io, name_, "out of memory for a PNG decoder");
  std::unique_ptr<spng_ctx, void (*)(spng_ctx*)> guard(ctx, spng_ctx_free);
  spng_set_chunk_limits(ctx, 64u << 20, 64u << 20);  // ancillary chunks cannot claim gigabytes
  std::size_t bytes = 0;
  int rc = spng_set_png_buffer(ctx, data_, size_);
  if (!rc) rc = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &bytes);
  if (!rc && pixels_.size() < bytes + kResampleSlack) pixels_.resize(bytes + kResampleSlack);  // as above
  // Alpha is dropped and 16-bit samples keep their high byte, as PIL's convert("RGB") does.
  if (!rc) rc = spng_decode_image(ctx, pixels_.data(), bytes, SPNG_FMT_RGB8, 0);
  if (rc) throwBadInput(name_, std::string("corrupt PNG: ") + spng_strerror(rc));
  return wholeImage();
}

RgbRegion ImageDecoder::wholeImage() {
  RgbRegion r;
  r.stride = static_cast<std::ptrdiff_t>(size0_.width) * 3;
  r.pixels = pixels_.data();
  r.rect = {0, 0, size0_.width, size0_.height};
  return r;
}

}  // namespace stoker
