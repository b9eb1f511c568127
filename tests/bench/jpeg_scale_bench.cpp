// Why the image pipeline decodes at DCT scales 1/2, 1/4 and 1/8 only: libjpeg-turbo also decodes at
// M/8 for every M, but on x86-64 only the 8x8 IDCT is SIMD (and the 4x4 of a 1/2 scale stays cheap);
// 7/8, 6/8 and 5/8 run plain C IDCTs and cost more than a full-size decode, which would make every
// crop that fits such a scale slower. This program shows it on a folder: the JPEGs held in memory,
// one thread, each decoded whole and as a central box (the rows by jpeg_skip_scanlines, the columns
// by jpeg_crop_scanline, as the pipeline reads a crop), at each scale M/8. It prints microseconds
// per image, the best of --passes passes, as one JSON document.
//
//   stoker_jpeg_scale_bench DIR [--limit N] [--passes P] [--box F]
#include <cstdio>
#include <cstring>

#include <jpeglib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

// Microseconds per image to decode every file at scale M/8, the central `box` fraction of each side.
double decodeAll(const std::vector<std::vector<unsigned char>>& files, int m, double box) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_decompress(&cinfo);
  std::vector<unsigned char> rows;  // a row group at a time: the output is not kept
  const auto start = std::chrono::steady_clock::now();
  for (const auto& f : files) {
    jpeg_mem_src(&cinfo, f.data(), static_cast<unsigned long>(f.size()));
    jpeg_read_header(&cinfo, TRUE);
    cinfo.scale_num = static_cast<unsigned>(m);
    cinfo.scale_denom = 8;
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    const JDIMENSION boxW = std::max<JDIMENSION>(1, static_cast<JDIMENSION>(cinfo.output_width * box));
    const JDIMENSION boxH = std::max<JDIMENSION>(1, static_cast<JDIMENSION>(cinfo.output_height * box));
    JDIMENSION x = (cinfo.output_width - boxW) / 2, w = boxW;
    if (w < cinfo.output_width) jpeg_crop_scanline(&cinfo, &x, &w);
    jpeg_skip_scanlines(&cinfo, (cinfo.output_height - boxH) / 2);
    if (rows.size() < static_cast<std::size_t>(w) * 3 * 16) rows.resize(static_cast<std::size_t>(w) * 3 * 16);
    JSAMPROW ptrs[16];
    for (JDIMENSION done = 0; done < boxH;) {
      const JDIMENSION n = std::min<JDIMENSION>(16, boxH - done);
      for (JDIMENSION r = 0; r < n; ++r) ptrs[r] = rows.data() + static_cast<std::size_t>(r) * w * 3;
      done += jpeg_read_scanlines(&cinfo, ptrs, n);
    }
    jpeg_abort_decompress(&cinfo);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  jpeg_destroy_decompress(&cinfo);
  return s / static_cast<double>(files.size()) * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--limit N] [--passes P] [--box F]\n", argv[0]);
    return 2;
  }
  std::size_t limit = 1000;
  int passes = 3;
  double box = 0.7;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--limit") == 0) limit = static_cast<std::size_t>(std::atol(argv[i + 1]));
    if (std::strcmp(argv[i], "--passes") == 0) passes = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--box") == 0) box = std::atof(argv[i + 1]);
  }
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(argv[1])) {
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg")) paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.size() > limit) paths.resize(limit);
  if (paths.empty() || box <= 0 || box > 1) {
    std::fprintf(stderr, "need JPEGs under %s and 0 < --box <= 1\n", argv[1]);
    return 2;
  }
  std::vector<std::vector<unsigned char>> files;
  for (const auto& p : paths) {
    std::ifstream in(p, std::ios::binary);
    files.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::printf("{\"images\": %zu, \"box\": %.2f, \"us_per_image\": {", files.size(), box);
  for (int m = 8; m >= 1; --m) {
    double whole = 1e30, central = 1e30;
    for (int pass = 0; pass < passes; ++pass) {
      whole = std::min(whole, decodeAll(files, m, 1.0));
      central = std::min(central, decodeAll(files, m, box));
    }
    std::printf("%s\"%d/8\": {\"whole\": %.1f, \"box\": %.1f}", m == 8 ? "" : ", ", m, whole, central);
    std::fflush(stdout);
  }
  std::printf("}}\n");
  return 0;
}
