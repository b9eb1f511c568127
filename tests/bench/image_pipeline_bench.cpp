// Microseconds per image of Stoker's image pipeline on one thread, with nothing else around it: the
// files of a folder held in memory, each run through ImagePipeline::run into the next slot of a
// 64-image batch (as a loader worker writes them, so the float32 output goes to memory as it does
// there), with the JPEG scan index warmed by a first pass. Prints the best of --passes passes,
// whole and split into decode and transform, as one JSON document.
//
// `stoker bench` measures the same work inside the loader, where a 1.2 s epoch on this shared VM
// drifts by several per cent from run to run; the best of many short passes here tells a change
// of a few per cent in one stage from that drift.
//
// --bytes writes what a worker writes with normalize_on device: the u8 planes the device widens,
// not the float32 values (the CPU's share of the u8-over-PCIe path).
//
//   stoker_image_pipeline_bench DIR [--transforms T] [--limit N] [--passes P] [--no-index] [--huge-pages] [--bytes]
#include <algorithm>
#include <chrono>
#include <exception>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "image/image_pipeline.h"
#include "image/jpeg_scan_index.h"

namespace {

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--transforms T] [--limit N] [--passes P] [--no-index] [--huge-pages] [--bytes]\n",
                 argv[0]);
    return 2;
  }
  std::string transforms = "RandomResizedCrop(224),RandomHorizontalFlip(),Normalize(imagenet)";
  std::size_t limit = 1000;
  int passes = 10;
  bool index = true, hugePages = false, bytes = false;
  for (int i = 2; i < argc; ++i) {
    const bool more = i + 1 < argc;
    if (std::strcmp(argv[i], "--transforms") == 0 && more) transforms = argv[++i];
    else if (std::strcmp(argv[i], "--limit") == 0 && more) limit = std::stoul(argv[++i]);
    else if (std::strcmp(argv[i], "--passes") == 0 && more) passes = std::stoi(argv[++i]);
    else if (std::strcmp(argv[i], "--no-index") == 0) index = false;
    else if (std::strcmp(argv[i], "--huge-pages") == 0) hugePages = true;
    else if (std::strcmp(argv[i], "--bytes") == 0) bytes = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::recursive_directory_iterator(argv[1]))
    if (e.is_regular_file()) names.push_back(e.path().string());
  std::sort(names.begin(), names.end());
  // Every k-th file, so a limit still takes some of every class.
  std::vector<std::vector<std::uint8_t>> files;
  std::vector<std::string> kept;
  const std::size_t step = std::max<std::size_t>(1, names.size() / std::max<std::size_t>(1, limit));
  for (std::size_t i = 0; i < names.size() && files.size() < limit; i += step) {
    std::ifstream in(names[i], std::ios::binary);
    files.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    kept.push_back(names[i]);
  }
  if (files.empty()) {
    std::fprintf(stderr, "no files under %s\n", argv[1]);
    return 1;
  }

  stoker::ImagePipeline pipeline(stoker::parseImageTransforms(transforms));
  const auto sampleBytes = static_cast<std::size_t>(bytes ? pipeline.byteExpansion().bytesPerSample()
                                                         : pipeline.transforms().sampleBytes());
  constexpr std::size_t kBatch = 64;
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t batchBytes = (sampleBytes * kBatch + kHuge - 1) / kHuge * kHuge;
  auto* slot0 = static_cast<std::uint8_t*>(std::aligned_alloc(kHuge, batchBytes));
  if (hugePages) madvise(slot0, batchBytes, MADV_HUGEPAGE);  // before the first touch, as the loader does
  stoker::JpegIndexCache cache(static_cast<std::int64_t>(files.size()), std::size_t{1} << 30);

  double best = 1e30, bestDecode = 0, bestTransform = 0;
  for (int pass = -1; pass < passes; ++pass) {  // pass -1 records the scan index
    stoker::ImageStageSeconds stages;
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < files.size(); ++i) {
      const stoker::SampleSeed seed{0, pass + 1, static_cast<std::int64_t>(i)};  // a new crop every pass
      pipeline.run(files[i].data(), files[i].size(), kept[i], seed, slot0 + (i % kBatch) * sampleBytes, &stages,
                   index ? stoker::JpegIndexSlot{&cache, static_cast<std::int64_t>(i)} : stoker::JpegIndexSlot{}, bytes);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (pass >= 0 && s < best) best = s, bestDecode = stages.decode, bestTransform = stages.transform;
  }
  const double n = static_cast<double>(files.size());
  std::printf("{\"images\": %zu, \"index\": %s, \"bytes\": %s, \"us_per_image\": %.1f, \"decode_us\": %.1f, \"transform_us\": %.1f}\n",
              files.size(), index ? "true" : "false", bytes ? "true" : "false", best / n * 1e6, bestDecode / n * 1e6, bestTransform / n * 1e6);
  std::free(slot0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a missing folder, a bad image or transform text
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
