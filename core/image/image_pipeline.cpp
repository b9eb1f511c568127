#include "image/image_pipeline.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "image/resample.h"
#include "util/monotonic_seconds.h"

namespace stoker {
namespace {

// Per worker thread: the decoder and the buffers between the stages, kept between images.
struct Scratch {
  ImageDecoder decoder;
  std::vector<std::uint8_t> window, clipped, hpass;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Python's round(): halves to even (the current rounding mode is round-to-nearest-even).
int roundHalfEven(double v) { return static_cast<int>(std::nearbyint(v)); }

class SampleRandom {
 public:
  explicit SampleRandom(const SampleSeed& s) {
    const auto e = static_cast<std::uint64_t>(s.epoch), i = static_cast<std::uint64_t>(s.sample);
    std::seed_seq seq{static_cast<std::uint32_t>(s.seed), static_cast<std::uint32_t>(s.seed >> 32),
                      static_cast<std::uint32_t>(e),      static_cast<std::uint32_t>(e >> 32),
                      static_cast<std::uint32_t>(i),      static_cast<std::uint32_t>(i >> 32)};
    rng_.seed(seq);
  }
  double uniform(double a, double b) { return a + (b - a) * static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  int randint(int lo, int hi) {  // [lo, hi]
    return lo + static_cast<int>(rng_() % static_cast<std::uint64_t>(hi - lo + 1));
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

ImagePipeline::ImagePipeline(ImageTransforms transforms) : t_(std::move(transforms)) {
  for (std::size_t c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) {
      float x = static_cast<float>(v) / 255.0f;  // ToTensor: .float().div(255)
      if (t_.normalize) x = (x - t_.mean[c]) / t_.std[c];  // Normalize: .sub_(mean).div_(std)
      lut_[c][static_cast<std::size_t>(v)] = x;
      if (t_.dtype == ImageDtype::F16) lut16_[c][static_cast<std::size_t>(v)] = c10::Half(x).x;
      if (t_.dtype == ImageDtype::BF16) lut16_[c][static_cast<std::size_t>(v)] = c10::BFloat16(x).x;
    }
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
    // torchvision's Resize(int): the shorter side becomes S, the longer int(S * long / short).
    const int s = t_.resizeShorter;
    if (width <= height) {
      p.resizedWidth = s;
      p.resizedHeight = static_cast<int>(static_cast<double>(s) * H / W);
    } else {
      p.resizedHeight = s;
      p.resizedWidth = static_cast<int>(static_cast<double>(s) * W / H);
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
                        std::uint8_t* dst, ImageStageSeconds* seconds) const {
  Scratch& s = scratch();
  const double t0 = seconds ? monotonicSeconds() : 0;  // the clock only when timing is asked for
  const ImageSize image = s.decoder.open(data, size, name);
  ImagePlan p = plan(image.width, image.height, seed);
  const int ow = t_.outWidth, oh = t_.outHeight, rw = p.resizedWidth, rh = p.resizedHeight;

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
  const ResampleAxis h = bilinearAxis(spanW, sx0 - spanX, sx1 - spanX, rw);
  const ResampleAxis v = bilinearAxis(spanH, sy0 - spanY, sy1 - spanY, rh);

  // The kept window, clipped to the resized image (the rest is zero padding).
  const int cx0 = std::max(p.windowX, 0), cy0 = std::max(p.windowY, 0);
  const int cx1 = std::min(p.windowX + ow, rw), cy1 = std::min(p.windowY + oh, rh);
  const int cw = cx1 - cx0, ch = cy1 - cy0;
  int colFirst = spanW, colEnd = 0, rowFirst = spanH, rowEnd = 0;
  for (int x = cx0; x < cx1; ++x) {
    colFirst = std::min(colFirst, h.first[static_cast<std::size_t>(x)]);
    colEnd = std::max(colEnd, h.first[static_cast<std::size_t>(x)] + h.count[static_cast<std::size_t>(x)]);
  }
  for (int y = cy0; y < cy1; ++y) {
    rowFirst = std::min(rowFirst, v.first[static_cast<std::size_t>(y)]);
    rowEnd = std::max(rowEnd, v.first[static_cast<std::size_t>(y)] + v.count[static_cast<std::size_t>(y)]);
  }
  const RgbRegion region = s.decoder.decode({spanX + colFirst, spanY + rowFirst, colEnd - colFirst, rowEnd - rowFirst}, d);
  const double t1 = seconds ? monotonicSeconds() : 0;

  const std::size_t windowBytes = static_cast<std::size_t>(ow) * static_cast<std::size_t>(oh) * 3;
  s.window.resize(windowBytes);
  if (cw == ow && ch == oh) {
    resampleRgb(region, spanX, spanY, h, cx0, cw, v, cy0, ch, s.window.data(), s.hpass);
  } else {
    std::fill(s.window.begin(), s.window.end(), std::uint8_t{0});
    s.clipped.resize(static_cast<std::size_t>(cw) * static_cast<std::size_t>(ch) * 3);
    resampleRgb(region, spanX, spanY, h, cx0, cw, v, cy0, ch, s.clipped.data(), s.hpass);
    for (int y = 0; y < ch; ++y)
      std::memcpy(&s.window[(static_cast<std::size_t>(cy0 - p.windowY + y) * static_cast<std::size_t>(ow) +
                             static_cast<std::size_t>(cx0 - p.windowX)) * 3],
                  &s.clipped[static_cast<std::size_t>(y) * static_cast<std::size_t>(cw) * 3], static_cast<std::size_t>(cw) * 3);
  }

  // Flip, convert, normalise: one pass from the window into the sample's slot.
  const std::uint8_t* win = s.window.data();
  const std::size_t plane = static_cast<std::size_t>(ow) * static_cast<std::size_t>(oh);
  for (int y = 0; y < oh; ++y) {
    const std::uint8_t* row = win + static_cast<std::size_t>(y) * static_cast<std::size_t>(ow) * 3;
    const std::size_t outRow = static_cast<std::size_t>(y) * static_cast<std::size_t>(ow);
    if (t_.dtype == ImageDtype::U8) {
      std::uint8_t* o = dst + outRow * 3;
      if (!p.flip) {
        std::memcpy(o, row, static_cast<std::size_t>(ow) * 3);
      } else {
        for (int x = 0; x < ow; ++x) std::memcpy(o + x * 3, row + (ow - 1 - x) * 3, 3);
      }
    } else if (t_.dtype == ImageDtype::F32) {
      auto* o = reinterpret_cast<float*>(dst);
      for (std::size_t c = 0; c < 3; ++c) {
        float* out = o + c * plane + outRow;
        const float* lut = lut_[c].data();
        if (!p.flip)
          for (int x = 0; x < ow; ++x) out[x] = lut[row[x * 3 + static_cast<int>(c)]];
        else
          for (int x = 0; x < ow; ++x) out[x] = lut[row[(ow - 1 - x) * 3 + static_cast<int>(c)]];
      }
    } else {
      auto* o = reinterpret_cast<std::uint16_t*>(dst);
      for (std::size_t c = 0; c < 3; ++c) {
        std::uint16_t* out = o + c * plane + outRow;
        const std::uint16_t* lut = lut16_[c].data();
        for (int x = 0; x < ow; ++x) out[x] = lut[row[(p.flip ? ow - 1 - x : x) * 3 + static_cast<int>(c)]];
      }
    }
  }
  if (seconds) {
    const double t2 = monotonicSeconds();
    seconds->decode += t1 - t0;
    seconds->transform += t2 - t1;
  }
  return p;
}

}  // namespace stoker
