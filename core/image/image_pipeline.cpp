#include "image/image_pipeline.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "image/resample.h"
#include "util/error.h"
#include "util/monotonic_seconds.h"

namespace stoker {
namespace {

// Per worker thread: the decoder and the buffers between the stages, kept between images.
struct Scratch {
  ImageDecoder decoder;
  std::vector<std::uint8_t> window;  // the kept window as three planes, flipped if asked
  ResampleAxis h, v;
  PlanarScratch resample;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Python's round(): halves to even (the current rounding mode is round-to-nearest-even).
int roundHalfEven(double v) { return static_cast<int>(std::nearbyint(v)); }

// The longest side a resize may make (JPEG's own limit): a panorama 100 times wider than high
// under Resize(256) is 25,600 wide.
constexpr int kMaxResizedSide = 65535;

// SplitMix64 (Steele, Lea and Flood; the seeder of Java's SplittableRandom and of xoshiro), its
// state set from (seed, epoch, sample) by the same mixer: a fresh stream per sample in a few
// nanoseconds, where seeding a Mersenne Twister through seed_seq took microseconds per image.
class SampleRandom {
 public:
  explicit SampleRandom(const SampleSeed& s)
      : state_(hash(s.seed ^ hash(static_cast<std::uint64_t>(s.epoch) ^ hash(static_cast<std::uint64_t>(s.sample))))) {}
  double uniform(double a, double b) { return a + (b - a) * static_cast<double>(next() >> 11) * 0x1.0p-53; }
  int randint(int lo, int hi) {  // [lo, hi]
    return lo + static_cast<int>(next() % static_cast<std::uint64_t>(hi - lo + 1));
  }

 private:
  static constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ull;
  static std::uint64_t finalise(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  static std::uint64_t hash(std::uint64_t z) { return finalise(z + kGamma); }
  std::uint64_t next() { return finalise(state_ += kGamma); }
  std::uint64_t state_;
};

}  // namespace

ImagePipeline::ImagePipeline(ImageTransforms transforms) : t_(std::move(transforms)) {
  for (std::size_t c = 0; c < 3; ++c) {
    toFloat_[c] = PlaneToFloat(t_.mean[c], t_.std[c], t_.normalize);
    for (std::size_t v = 0; v < 256; ++v) {
      const float x = toFloat_[c].table()[v];
      if (t_.dtype == ImageDtype::F16) lut16_[c][v] = c10::Half(x).x;
      if (t_.dtype == ImageDtype::BF16) lut16_[c][v] = c10::BFloat16(x).x;
    }
  }
}

ByteExpansion ImagePipeline::byteExpansion() const {
  ByteExpansion e;
  e.plane = static_cast<std::int64_t>(t_.outHeight) * t_.outWidth;
  e.valueBytes = t_.dtype == ImageDtype::F32 ? 4 : 2;
  e.table.resize(static_cast<std::size_t>(kExpandChannels) * 256 * static_cast<std::size_t>(e.valueBytes));
  for (std::size_t c = 0; c < 3; ++c)
    for (std::size_t v = 0; v < 256; ++v) {
      std::uint8_t* at = e.table.data() + (c * 256 + v) * static_cast<std::size_t>(e.valueBytes);
      if (t_.dtype == ImageDtype::F32) std::memcpy(at, &toFloat_[c].table()[v], 4);
      else std::memcpy(at, &lut16_[c][v], 2);
    }
  return e;
}

ImagePlan ImagePipeline::plan(int width, int height, const SampleSeed& seed) const {
  ImagePlan p;
  SampleRandom random(seed);
  const double W = width, H = height;
  p.box[2] = W;
  p.box[3] = H;
  if (t_.randomResizedCrop) {
    // torchvision.transforms.RandomResizedCrop.get_params, draw for draw.
    const double area = W * H, logMin = std::log(t_.ratioMin), logMax = std::log(t_.ratioMax);
    bool found = false;
    for (int attempt = 0; attempt < 10 && !found; ++attempt) {
      const double target = area * random.uniform(t_.scaleMin, t_.scaleMax);
      const double aspect = std::exp(random.uniform(logMin, logMax));
      const int w = roundHalfEven(std::sqrt(target * aspect));
      const int h = roundHalfEven(std::sqrt(target / aspect));
      if (0 < w && w <= width && 0 < h && h <= height) {
        const int i = random.randint(0, height - h), j = random.randint(0, width - w);
        p.box[0] = j, p.box[1] = i, p.box[2] = j + w, p.box[3] = i + h;
        found = true;
      }
    }
    if (!found) {  // the fallback: a central crop clamped to the ratio range
      const double inRatio = W / H;
      int w = width, h = height;
      if (inRatio < t_.ratioMin) h = roundHalfEven(w / t_.ratioMin);
      else if (inRatio > t_.ratioMax) w = roundHalfEven(h * t_.ratioMax);
      const int i = (height - h) / 2, j = (width - w) / 2;
      p.box[0] = j, p.box[1] = i, p.box[2] = j + w, p.box[3] = i + h;
    }
    p.resizedWidth = t_.rrcWidth;
    p.resizedHeight = t_.rrcHeight;
  } else if (t_.resizeShorter) {
    // torchvision's Resize(int): the shorter side becomes S, the longer int(S * long / short) --
    // Python's int product (exact in a double too), then one rounded division. S times the ratio
    // rounded twice: 237 x 224 under Resize(224) became 236 x 224 where torchvision leaves it as is.
    // Held below int's range (run() refuses what passes kMaxResizedSide).
    const int s = t_.resizeShorter;
    auto longer = [&](int lng, int shrt) {
      return static_cast<int>(std::min(static_cast<double>(s) * lng / shrt, 1e9));
    };
    if (width <= height) {
      p.resizedWidth = s;
      p.resizedHeight = longer(height, width);
    } else {
      p.resizedHeight = s;
      p.resizedWidth = longer(width, height);
    }
  } else if (t_.resizeHeight) {
    p.resizedWidth = t_.resizeWidth;
    p.resizedHeight = t_.resizeHeight;
  } else {
    p.resizedWidth = width;
    p.resizedHeight = height;
  }
  p.resizedWidth = std::max(p.resizedWidth, 1);
  p.resizedHeight = std::max(p.resizedHeight, 1);
  if (t_.cropHeight) {
    // torchvision's center_crop: round((size - crop) / 2), or zero padding split floor-first.
    auto offset = [](int size, int crop) { return crop > size ? -((crop - size) / 2) : roundHalfEven((size - crop) / 2.0); };
    p.windowX = offset(p.resizedWidth, t_.cropWidth);
    p.windowY = offset(p.resizedHeight, t_.cropHeight);
  }
  if (t_.hasFlip) p.flip = random.uniform(0.0, 1.0) < t_.flipP;
  return p;
}

ImagePlan ImagePipeline::run(const std::uint8_t* data, std::size_t size, const std::string& name, const SampleSeed& seed,
                        std::uint8_t* dst, ImageStageSeconds* seconds, JpegIndexSlot index, bool planarBytes) const {
  Scratch& s = scratch();
  const double t0 = seconds ? monotonicSeconds() : 0;  // the clock only when timing is asked for
  const ImageSize image = s.decoder.open(data, size, name);
  ImagePlan p = plan(image.width, image.height, seed);
  const int ow = t_.outWidth, oh = t_.outHeight, rw = p.resizedWidth, rh = p.resizedHeight;
  // An image far longer than wide (a 1x1048576 PNG is 10 KB) under Resize(S) would be resized to
  // S x S*1048576: its resampling tables alone took GBs a worker, kept, and past int's range the
  // size wrapped to a black image. PIL could not make that image either: refused, naming it.
  if (rw > kMaxResizedSide || rh > kMaxResizedSide)
    throwBadInput(name, std::to_string(image.width) + "x" + std::to_string(image.height) + " would be resized to " +
                            std::to_string(rw) + "x" + std::to_string(rh) + ": more than " +
                            std::to_string(kMaxResizedSide) + " pixels a side");

  // The smallest DCT scale that still leaves the source box at least as large as the resize.
  if (s.decoder.canScale()) {
    const double bw = p.box[2] - p.box[0], bh = p.box[3] - p.box[1];
    for (int d : {8, 4, 2})
      if (bw / d >= rw && bh / d >= rh) {
        p.scaleDenom = d;
        break;
      }
  }
  const int d = p.scaleDenom;
  const ImageSize scaled = s.decoder.scaledSize(d);
  const double sx0 = p.box[0] / d, sx1 = p.box[2] / d, sy0 = p.box[1] / d, sy1 = p.box[3] / d;
  const int spanX = static_cast<int>(std::floor(sx0)), spanY = static_cast<int>(std::floor(sy0));
  const int spanW = std::min(static_cast<int>(std::ceil(sx1)), scaled.width) - spanX;
  const int spanH = std::min(static_cast<int>(std::ceil(sy1)), scaled.height) - spanY;
  ResampleAxis& h = s.h;
  ResampleAxis& v = s.v;
  bilinearAxis(spanW, sx0 - spanX, sx1 - spanX, rw, h);
  bilinearAxis(spanH, sy0 - spanY, sy1 - spanY, rh, v);

  // The kept window, clipped to the resized image (the rest is zero padding).
  const int cx0 = std::max(p.windowX, 0), cy0 = std::max(p.windowY, 0);
  const int cx1 = std::min(p.windowX + ow, rw), cy1 = std::min(p.windowY + oh, rh);
  const int cw = cx1 - cx0, ch = cy1 - cy0;
  const InputSpan cols = inputSpan(h, cx0, cw), rows = inputSpan(v, cy0, ch);
  const RgbRegion region = s.decoder.decode(
      {spanX + cols.first, spanY + rows.first, cols.end - cols.first, rows.end - rows.first}, d, index, /*keepGray=*/true);
  const double t1 = seconds ? monotonicSeconds() : 0;

  // Resize into the window's three planes, flipped on the way when the plan says so; the part of
  // the window past the resized image (CenterCrop's padding) stays zero.
  const std::size_t plane = static_cast<std::size_t>(ow) * static_cast<std::size_t>(oh);
  s.window.resize(plane * 3);
  if (cw != ow || ch != oh) std::fill(s.window.begin(), s.window.end(), std::uint8_t{0});
  const int left = cx0 - p.windowX;  // the resized pixels' first column in the unflipped window
  PlanarOut out;
  out.data = s.window.data() + static_cast<std::size_t>(cy0 - p.windowY) * static_cast<std::size_t>(ow) +
             static_cast<std::size_t>(p.flip ? ow - left - cw : left);
  out.rowStride = ow;
  out.planeStride = static_cast<std::ptrdiff_t>(plane);
  out.mirror = p.flip;
  resampleRgbPlanar(region, spanX, spanY, h, cx0, cw, v, cy0, ch, out, s.resample);

  // ToTensor + Normalize (CHW, as the window is), or back to HWC bytes for u8 output. A gray
  // image was resized as one plane: it is R, G and B.
  const std::uint8_t* win = s.window.data();
  const std::size_t planeOf[3] = {0, region.channels == 1 ? 0 : plane, region.channels == 1 ? 0 : 2 * plane};
  if (planarBytes) {  // the planes as they are, for the device to widen (image/byte_expansion)
    for (std::size_t c = 0; c < 3; ++c) std::memcpy(dst + c * plane, win + planeOf[c], plane);
  } else if (t_.dtype == ImageDtype::U8) {
    for (std::size_t i = 0; i < plane; ++i)
      for (std::size_t c = 0; c < 3; ++c) dst[i * 3 + c] = win[planeOf[c] + i];
  } else if (t_.dtype == ImageDtype::F32) {
    auto* o = reinterpret_cast<float*>(dst);
    for (std::size_t c = 0; c < 3; ++c) toFloat_[c].run(win + planeOf[c], plane, o + c * plane);
  } else {
    auto* o = reinterpret_cast<std::uint16_t*>(dst);
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t i = 0; i < plane; ++i) o[c * plane + i] = lut16_[c][win[planeOf[c] + i]];
  }
  if (seconds) {
    const double t2 = monotonicSeconds();
    seconds->decode += t1 - t0;
    seconds->transform += t2 - t1;
  }
  return p;
}

}  // namespace stoker
