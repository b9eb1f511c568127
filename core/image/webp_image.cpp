#include "image/webp_image.h"

#include <webp/decode.h>

#include <cstring>

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
  if (f.has_animation) throwBadInput(name, "animated WebP (Stoker decodes WebP stills)");
  return {f.width, f.height};
}

void decodeWebp(const std::uint8_t* data, std::size_t size, const std::string& name, ImageSize image,
                std::vector<std::uint8_t>& out, std::size_t slack) {
  const std::size_t stride = static_cast<std::size_t>(image.width) * 3;
  const std::size_t bytes = stride * static_cast<std::size_t>(image.height);
  if (out.size() < bytes + slack) out.resize(bytes + slack);
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
