// Loader benchmark, the C++ side (tests/bench/loader_bench.sh runs it next to
// the Python peers). In one process, on the same data and batch size:
//   fashion     Stoker's loader vs a hand-written libtorch loop
//               (randperm + index_select per batch), Fashion-MNIST, shuffled
//   gather      Stoker's resident gather of 64 KiB samples vs memcpy of the
//               same bytes (1 and 2 threads)
//   scaling     synthetic samples with 200 us of CPU work: 1 vs 2 threads
// Prints one JSON document. Every figure is a median of ROUNDS epochs after a
// warm-up epoch.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/datasets/synthetic_dataset.h"
#include "data/datasets/tensor_dataset.h"
#include "data/loader.h"

using namespace stoker;
using Clock = std::chrono::steady_clock;

namespace {

int rounds() {
  const char* r = std::getenv("ROUNDS");
  return r ? std::max(1, std::atoi(r)) : 5;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Samples per second of a Stoker loader (median over rounds, after a warm-up epoch).
double stokerRate(const std::shared_ptr<Dataset>& ds, const LoaderOptions& o, double* bytesPerS = nullptr) {
  Loader loader(ds, o);
  std::vector<double> rates, byteRates;
  for (int e = 0; e <= rounds(); ++e) {
    const auto start = Clock::now();
    std::int64_t samples = 0, bytes = 0;
    for (const Batch& b : loader.epoch(e)) {
      samples += b.size();
      bytes += b.nbytes();
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (e == 0) continue;
    rates.push_back(static_cast<double>(samples) / s);
    byteRates.push_back(static_cast<double>(bytes) / s);
  }
  if (bytesPerS) *bytesPerS = median(byteRates);
  return median(rates);
}

// One epoch of the loop people write by hand with libtorch; returns samples/s.
double torchLoopEpoch(const at::Tensor& images, const at::Tensor& labels, std::int64_t batch, std::uint64_t seed) {
  const std::int64_t n = images.size(0);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto start = Clock::now();
  at::Tensor perm = at::randperm(n, gen, at::kLong);
  std::int64_t samples = 0;
  for (std::int64_t b = 0; b + batch <= n; b += batch) {
    at::Tensor idx = perm.slice(0, b, b + batch);
    at::Tensor x = images.index_select(0, idx);
    at::Tensor y = labels.index_select(0, idx);
    samples += x.size(0) + 0 * y.size(0);
  }
  return static_cast<double>(samples) / std::chrono::duration<double>(Clock::now() - start).count();
}

// One epoch of a Stoker loader; returns samples/s.
double stokerEpoch(Loader& loader, std::int64_t e) {
  const auto start = Clock::now();
  std::int64_t samples = 0;
  for (const Batch& b : loader.epoch(e)) samples += b.size();
  return static_cast<double>(samples) / std::chrono::duration<double>(Clock::now() - start).count();
}

// memcpy of `total` bytes from `src` in batch-sized pieces into a reused batch buffer.
double memcpyRate(const std::uint8_t* src, std::int64_t total, std::int64_t batchBytes, int threads) {
  std::vector<std::vector<std::uint8_t>> dst(threads, std::vector<std::uint8_t>(static_cast<std::size_t>(batchBytes)));
  std::vector<double> rates;
  for (int r = 0; r <= rounds(); ++r) {
    const auto start = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (std::int64_t off = t * batchBytes; off + batchBytes <= total; off += threads * batchBytes)
          std::memcpy(dst[t].data(), src + off, static_cast<std::size_t>(batchBytes));
      });
    for (auto& p : pool) p.join();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (r > 0) rates.push_back(static_cast<double>(total / batchBytes * batchBytes) / s);
  }
  return median(rates);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string fashion = argc > 1 ? argv[1] : "fashion-mnist";
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(cores);
  nlohmann::json out;

  // 1. Fashion-MNIST, batch 256, shuffled, float32 batches.
  auto ds = openDataset(fashion);
  const auto fields = ds->hostFields();
  LoaderOptions base = LoaderOptions::builder().batchSize(256).build();
  nlohmann::json variants = nlohmann::json::object();
  double best = 0;
  for (int workers : {0, 1, 2})
    for (bool reuse : {false, true}) {
      LoaderOptions o = base;
      o.num_workers = workers;
      o.reuse_buffers = reuse;
      const double r = stokerRate(ds, o);
      variants[std::to_string(workers) + " workers" + (reuse ? ", reuse" : "")] = r;
      best = std::max(best, r);
    }
  // The headline pair runs interleaved, epoch by epoch, so both see the same
  // machine (this VM's memory bandwidth drifts by 30% from minute to minute).
  LoaderOptions defaults = gpuOptimized();
  defaults.batch_size = 256;
  Loader loader(ds, defaults);
  std::vector<double> stokerRates, torchRates;
  for (int r = 0; r <= 2 * rounds(); ++r) {
    const double s = stokerEpoch(loader, r), t = torchLoopEpoch(fields[0], fields[1], 256, static_cast<std::uint64_t>(r));
    if (r == 0) continue;
    stokerRates.push_back(s);
    torchRates.push_back(t);
  }
  const double stokerDefault = median(stokerRates), torchLoop = median(torchRates);
  out["fashion"] = {{"samples", ds->size()},
                    {"stoker_samples_per_s", stokerDefault},
                    {"stoker_best_samples_per_s", best},
                    {"stoker_variants", variants},
                    {"torch_loop_cpp_samples_per_s", torchLoop},
                    {"ratio_vs_torch_loop_cpp", stokerDefault / torchLoop}};

  // 2. Gather of 64 KiB samples vs memcpy.
  {
    auto big = parseSyntheticSpec("synthetic:8192,16384,f32");  // 512 MiB, materialised once (resident)
    LoaderOptions o = gpuOptimized();
    o.batch_size = 256;
    o.loading_mode = LoadingMode::Resident;
    double gatherBytes = 0;
    stokerRate(big, o, &gatherBytes);
    // memcpy over the same 512 MiB (a fresh copy: the synthetic dataset has no host fields to reuse).
    at::Tensor src = at::rand({8192, 16384});
    const std::int64_t batchBytes = 256 * 16384 * 4;
    const double one = memcpyRate(static_cast<const std::uint8_t*>(src.data_ptr()), static_cast<std::int64_t>(src.nbytes()),
                                  batchBytes, 1);
    const double two = memcpyRate(static_cast<const std::uint8_t*>(src.data_ptr()), static_cast<std::int64_t>(src.nbytes()),
                                  batchBytes, cores);
    out["gather_64k"] = {{"stoker_bytes_per_s", gatherBytes},
                         {"memcpy_1_thread_bytes_per_s", one},
                         {"memcpy_all_threads_bytes_per_s", two},
                         {"fraction_of_memcpy_1_thread", gatherBytes / one},
                         {"fraction_of_memcpy_all_threads", gatherBytes / two}};
  }

  // 3. Scaling with 200 us of CPU work per sample: 1 producing thread (the
  // consumer alone, num_workers 0) vs 2 (one worker plus the consumer, which
  // collates whenever it would wait), and two workers plus the consumer.
  {
    auto costly = parseSyntheticSpec("synthetic:3000,3x32x32,f32,200");
    LoaderOptions o = LoaderOptions::builder().batchSize(64).loadingMode(LoadingMode::Streaming).build();
    o.num_workers = 0;
    const double t1 = stokerRate(costly, o);
    o.num_workers = 1;
    const double t2 = stokerRate(costly, o);
    o.num_workers = 2;
    const double w2 = stokerRate(costly, o);
    out["scaling_200us"] = {{"threads_1_samples_per_s", t1}, {"threads_2_samples_per_s", t2},
                            {"workers_2_samples_per_s", w2}, {"speedup", t2 / t1},
                            {"ideal_samples_per_s_per_thread", 1e6 / 200}};
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
