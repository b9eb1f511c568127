// image/resample: Pillow's antialiased bilinear resize (Resample.c), reproduced so that Stoker's
// Resize and RandomResizedCrop give torchvision's PIL results: the same filter support (scaled
// with the reduction), the same 22-bit fixed-point weights, the same two passes (horizontal first,
// rounded to u8 between them). Only the output pixels asked for are computed, from only the source
// pixels they read, so a centre crop of a resize costs the crop, not the whole resize.
#pragma once

#include <cstdint>
#include <vector>

#include "image/image_decoder.h"

namespace stoker {

// One axis: output pixel o reads input pixels [first[o], first[o] + count[o]) with weights
// weights[o * ksize ...]. Input coordinates are relative to the span the filter may read.
struct ResampleAxis {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<std::int32_t> weights;
  bool identity = false;  // Pillow skips this pass
  std::vector<double> taps;  // bilinearAxis's scratch, kept with the axis so refilling allocates nothing
};

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for resizing the input box [in0, in1) of an
// axis of `inSize` pixels to `outSize` pixels, into `axis` (reusing its storage).
void bilinearAxis(int inSize, double in0, double in1, int outSize, ResampleAxis& axis);

// The input pixels [first, end) that output pixels [out, out + n) of an axis read (n >= 1):
// Pillow's ybox_first / ybox_last, and the columns or rows a decode must cover.
struct InputSpan {
  int first = 0, end = 0;
};
InputSpan inputSpan(const ResampleAxis& axis, int out, int n);

// Bytes a source region's buffer must hold past its last pixel: the horizontal pass reads 16 bytes
// from a group of taps whose first pixel may be the region's last.
constexpr std::size_t kResampleSlack = 16;

// Resizes into `out` (rows of outW x 3 bytes, outH rows) the output pixels [outX, outX + outW) x
// [outY, outY + outH) of the resize described by `h` and `v`, whose input coordinate 0 is the
// image pixel (srcX, srcY). `src` (3 channels) must cover every source pixel they read, plus kResampleSlack bytes. `scratch` holds the
// horizontal pass between calls.
void resampleRgb(const RgbRegion& src, int srcX, int srcY, const ResampleAxis& h, int outX, int outW,
                 const ResampleAxis& v, int outY, int outH, std::uint8_t* out, std::vector<std::uint8_t>& scratch);

// Where resampleRgbPlanar writes: channel c's row y at data + c * planeStride + y * rowStride; the
// output pixel resampled for column i lands in column outW - 1 - i when `mirror` (a horizontal flip
// for free).
struct PlanarOut {
  std::uint8_t* data = nullptr;
  std::ptrdiff_t rowStride = 0, planeStride = 0;
  bool mirror = false;
};

// Buffers resampleRgbPlanar keeps between calls (one per thread).
struct PlanarScratch {
  std::vector<std::uint8_t> planes, hpass, interleaved, packed, rgb;
  std::vector<std::int32_t> base, pairWeights;
};

// resampleRgb's output, bit for bit, written as three planes (what ToTensor's CHW layout wants);
// of a gray region (channels 1), plane 0 only: its R, G and B are equal.
// On AVX2 each channel is resampled in its own plane, 8 values per vpmaddwd, whenever every
// 4 neighbouring output pixels read within 16 source pixels (reductions up to about 3x); otherwise
// resampleRgb runs and its output is split into planes.
void resampleRgbPlanar(const RgbRegion& src, int srcX, int srcY, const ResampleAxis& h, int outX, int outW,
                       const ResampleAxis& v, int outY, int outH, const PlanarOut& out, PlanarScratch& scratch);

}  // namespace stoker
