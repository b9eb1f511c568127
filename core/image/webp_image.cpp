#include "image/webp_image.h"

#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>
#include <memory>

#include "util/error.h"

namespace stoker {
namespace {

const char* statusText(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data";
  }
  return "unknown error";
}

}  // namespace

bool isWebp(const std::uint8_t* data, std::size_t size) {
  return size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0;
}

ImageSize webpSize(const std::uint8_t* data, std::size_t size, const std::string& name) {
  WebPBitstreamFeatures f;
  const VP8StatusCode s = WebPGetFeatures(data, size, &f);
  if (s == VP8_STATUS_NOT_ENOUGH_DATA) throwBadInput(name, "truncated WebP (its header is cut short)");
  if (s != VP8_STATUS_OK) throwBadInput(name, std::string("corrupt WebP: ") + statusText(s));
  // An animation is composed in two RGBA canvases of libwebp's besides the RGB copy: 2^26 pixels
  // (under half the still limit) keeps a forged header from claiming gigabytes.
  constexpr std::int64_t kMaxCanvasPixels = std::int64_t(1) << 26;
  if (f.has_animation && static_cast<std::int64_t>(f.width) * f.height > kMaxCanvasPixels)
    throwBadInput(name, "WebP animation of " + std::to_string(f.width) + "x" + std::to_string(f.height) +
                            " pixels: its canvas must be at most " + std::to_string(kMaxCanvasPixels) + " pixels");
  return {f.width, f.height};  // an animation's canvas
}

namespace {

// An animation's first frame as PIL gives it: libwebp's WebPAnimDecoder (PIL's WebP plugin reads
// every WebP through it) composes the frame on a canvas cleared to transparent black, in RGBA;
// convert("RGB") then drops the alpha. The whole file must parse first, as for PIL: the demuxer
// refuses one cut short anywhere, even past the first frame.
void decodeAnimationFirstFrame(const std::uint8_t* data, std::size_t size, const std::string& name, ImageSize image,
                               std::uint8_t* out) {
  const WebPData whole{data, size};
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options))
    throwBadInput(name, "libwebp's animation decoder could not be set up (a version mismatch)");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;  // the loader's workers are the threads
  std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)> decoder(WebPAnimDecoderNew(&whole, &options),
                                                                       WebPAnimDecoderDelete);
  if (!decoder) {  // which of the two: a partial parse says whether the file just ends too soon
    WebPDemuxState state = WEBP_DEMUX_PARSE_ERROR;
    if (WebPDemuxer* partial = WebPDemuxPartial(&whole, &state)) WebPDemuxDelete(partial);
    if (state == WEBP_DEMUX_PARSING_HEADER || state == WEBP_DEMUX_PARSED_HEADER)
      throwBadInput(name, "truncated WebP animation (premature end of data)");
    throwBadInput(name, "corrupt WebP animation: its chunks do not parse");
  }
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(decoder.get(), &info) || static_cast<int>(info.canvas_width) != image.width ||
      static_cast<int>(info.canvas_height) != image.height)
    throwBadInput(name, "corrupt WebP animation: its canvas differs from its header");
  std::uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(decoder.get(), &rgba, &timestamp))
    throwBadInput(name, "corrupt WebP animation: its first frame does not decode");
  const std::size_t pixels = static_cast<std::size_t>(image.width) * static_cast<std::size_t>(image.height);
  for (std::size_t i = 0; i < pixels; ++i) std::memcpy(out + 3 * i, rgba + 4 * i, 3);
}

}  // namespace

void decodeWebp(const std::uint8_t* data, std::size_t size, const std::string& name, ImageSize image,
                PixelBuffer& out, std::size_t slack) {
  const std::size_t stride = static_cast<std::size_t>(image.width) * 3;
  const std::size_t bytes = stride * static_cast<std::size_t>(image.height);
  if (out.size() < bytes + slack) out.resize(bytes + slack);
  WebPBitstreamFeatures f;
  if (WebPGetFeatures(data, size, &f) == VP8_STATUS_OK && f.has_animation)
    return decodeAnimationFirstFrame(data, size, name, image, out.data());
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) throwBadInput(name, "libwebp's decoder could not be set up (a version mismatch)");
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = out.data();
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = bytes;
  const VP8StatusCode s = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);  // frees nothing of ours (external memory); the call pairs with the decode
  if (s == VP8_STATUS_NOT_ENOUGH_DATA) throwBadInput(name, "truncated WebP (premature end of data)");
  if (s != VP8_STATUS_OK) throwBadInput(name, std::string("corrupt WebP: ") + statusText(s));
}

}  // namespace stoker
