// The decode limit the image benchmark compares Stoker with: a plain libjpeg-turbo loop that reads
// every JPEG of a folder and decodes it whole (full size, RGB, libjpeg's defaults as PIL uses them)
// on N threads, nothing else. Prints images/s of the fastest of --passes passes (the first warms
// the page cache).
//
//   stoker_jpeg_decode_loop DIR [--threads N] [--passes P]
#include <cstdio>
#include <cstring>

#include <jpeglib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace {

// One read of the whole file, as any plain loop would (a char-by-char istreambuf_iterator copy
// cost this loop 8 % of its time and flattered every ratio against it).
std::vector<char> readAll(const std::string& path) {
  std::vector<char> bytes;
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    if (std::fseek(f, 0, SEEK_END) == 0) {
      const long size = std::ftell(f);
      std::rewind(f);
      if (size > 0) {
        bytes.resize(static_cast<std::size_t>(size));
        bytes.resize(std::fread(bytes.data(), 1, bytes.size(), f));
      }
    }
    std::fclose(f);
  }
  return bytes;
}

// Decodes one JPEG whole; returns its pixel count (0 when libjpeg refused it).
long decode(const std::vector<char>& bytes, std::vector<unsigned char>& out) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const std::size_t stride = static_cast<std::size_t>(cinfo.output_width) * 3;
  out.resize(stride * cinfo.output_height);
  JSAMPROW rows[16];  // up to a whole iMCU row per call
  while (cinfo.output_scanline < cinfo.output_height) {
    const JDIMENSION n = std::min<JDIMENSION>(16, cinfo.output_height - cinfo.output_scanline);
    for (JDIMENSION r = 0; r < n; ++r) rows[r] = out.data() + stride * (cinfo.output_scanline + r);
    jpeg_read_scanlines(&cinfo, rows, n);
  }
  const long pixels = static_cast<long>(cinfo.output_width) * cinfo.output_height;
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return pixels;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--threads N] [--passes P]\n", argv[0]);
    return 2;
  }
  int threads = 1, passes = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--passes") == 0) passes = std::atoi(argv[i + 1]);
  }
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(argv[1])) {
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg")) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::atomic<std::size_t> next{0};
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        std::vector<unsigned char> out;
        for (std::size_t i; (i = next.fetch_add(1)) < files.size();) decode(readAll(files[i]), out);
      });
    for (auto& t : pool) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(files.size()) / s);
  }
  std::printf("{\"images\": %zu, \"threads\": %d, \"images_per_s\": %.1f}\n", files.size(), threads, best);
  return 0;
}
