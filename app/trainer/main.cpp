// stoker-demo-trainer: a small real training program on the Stoker loader,
// so the Monitor has something to watch. Trains an MLP (784-256-10) or a
// small CNN (--model cnn: two 3x3 convolutions, 32 and 64 channels) on
// Fashion-MNIST with Adam, feeding it through stoker::Loader, and publishes
// the loader's telemetry (--publish HOST:PORT or file:PATH). Under torchrun
// (RANK/WORLD_SIZE set) each rank reads its DistributedSampler shard and
// reports its rank; ranks train independent replicas (there is no gradient
// all-reduce: this demonstrates data feeding, not data-parallel training).
//
// With --json each epoch's figures are one JSON line on stdout: `stoker.sh gpu-check` compares
// them with tests/bench/train_feed_peer.py, the same CNN fed by PyTorch's DataLoader.
//
//   stoker-demo-trainer --epochs 2 --publish 127.0.0.1:29650
//   stoker-demo-trainer --device cuda:0 --model cnn --mode streaming --json
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "io/host_tensor_torch.h"
#include "data/dataset.h"
#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "dist/torchrun_env.h"
#include "telemetry/telemetry_publisher.h"
#include "util/busy_work.h"
#include "util/error.h"

namespace {

struct Args {
  std::string dataDir = stoker::kFashionMnistDefaultDir;
  std::string device = "cpu";
  std::vector<std::string> publish;
  int epochs = 2;
  std::int64_t batchSize = 128;
  int workers = 2;
  double lr = 1e-3;
  std::int64_t maxSteps = 0;  // per epoch; 0 = the whole epoch
  double extraStepMicros = 0;
  std::uint64_t seed = 0;
  std::string model = "mlp";
  std::string mode = "auto";
  bool json = false;
};

// mlp: 784-256-10. cnn: conv3x3(32)-relu-pool-conv3x3(64)-relu-pool-fc(128)-relu-fc(10), the
// usual small Fashion-MNIST CNN (the same layers as tests/bench/train_feed_peer.py).
torch::nn::Sequential makeModel(const std::string& kind) {
  namespace nn = torch::nn;
  if (kind == "mlp") return nn::Sequential(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
  if (kind == "cnn")
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Flatten(), nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
  stoker::throwBadInput("--model " + kind, "unknown (known: mlp, cnn)");
}

double testAccuracy(torch::nn::Sequential& model, const torch::Tensor& images, const torch::Tensor& labels, torch::Device device) {
  torch::NoGradGuard noGrad;
  model->eval();
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < images.size(0); i += 1000) {
    const auto x = images.slice(0, i, i + 1000).to(device);
    const auto y = labels.slice(0, i, i + 1000).to(device);
    correct += model->forward(x).argmax(1).eq(y).sum().item<std::int64_t>();
  }
  model->train();
  return static_cast<double>(correct) / static_cast<double>(images.size(0));
}

int run(const Args& a) {
  using namespace stoker;
  if (a.epochs < 1) throwBadInput("--epochs", "must be at least 1");
  const auto env = distEnvFromEnvironment();
  const int rank = env ? env->rank : 0, world = env ? env->worldSize : 1;
  torch::manual_seed(static_cast<std::uint64_t>(a.seed));

  LoaderOptions options = gpuOptimized();
  options.loading_mode = a.mode == "resident"    ? LoadingMode::Resident
                         : a.mode == "streaming" ? LoadingMode::Streaming
                                                 : LoadingMode::Auto;
  options.batch_size = a.batchSize;
  options.num_workers = a.workers;
  options.prefetch = std::max(options.prefetch, prefetchForWorkers(a.workers));  // every worker busy
  options.seed = a.seed;
  options.telemetry_interval_ms = 250;
  if (world > 1) {
    options.sampler_type = SamplerType::Distributed;
    options.shard_rank = rank;
    options.shard_world_size = world;
  }
  auto dataset = openDataset("fashion-mnist:" + a.dataDir, options);
  Loader loader(dataset, options, DeviceSpec::parse(a.device));
  std::shared_ptr<TelemetryPublisher> publisher;
  if (!a.publish.empty()) {
    publisher = std::make_shared<TelemetryPublisher>(a.publish);
    loader.addObserver(publisher);
  }
  loader.setTelemetryRank(rank);
  const torch::Device device = loader.device().torchDevice();
  const LabeledImages test = loadFashionMnist(a.dataDir, Split::Test);
  const at::Tensor testImages = test.images.toTorch(), testLabels = test.labels.toTorch();

  torch::nn::Sequential model = makeModel(a.model);
  model->to(device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(a.lr));
  std::fprintf(stderr, "rank %d/%d: %s on %s, %s mode, batch %lld\n", rank, world, dataset->description().c_str(),
               loader.device().name().c_str(), loadingModeName(loader.mode()).c_str(),
               static_cast<long long>(a.batchSize));
  for (int e = 0; e < a.epochs; ++e) {
    double lossSum = 0;
    std::int64_t correct = 0, seen = 0, steps = 0;
    // The next epoch's first batches are made while this one ends (not after the last epoch).
    Epoch epoch = loader.epoch(e, e + 1 < a.epochs ? Loader::Lookahead::NextEpoch : Loader::Lookahead::Off);
    while (auto batch = epoch.next()) {
      const auto& x = (*batch)["images"];
      const auto& y = (*batch)["labels"];
      optimizer.zero_grad();
      const auto logits = model->forward(x);
      const auto loss = torch::nn::functional::cross_entropy(logits, y);
      loss.backward();
      optimizer.step();
      lossSum += loss.item<double>() * static_cast<double>(y.size(0));
      correct += logits.argmax(1).eq(y).sum().item<std::int64_t>();
      seen += y.size(0);
      busyWork(a.extraStepMicros);  // a heavier model, for demos of an input-bound vs compute-bound job
      if (a.maxSteps > 0 && ++steps >= a.maxSteps) break;
    }
    epoch.stop();
    const EpochSummary s = loader.lastEpoch();
    const double loss = seen ? lossSum / static_cast<double>(seen) : 0.0;
    const double trainAccuracy = seen ? static_cast<double>(correct) / static_cast<double>(seen) : 0.0;
    const double rate = s.seconds > 0 ? static_cast<double>(seen) / s.seconds : 0.0;
    const double waitShare = s.seconds > 0 ? s.waitSeconds / s.seconds : 0.0;
    const double testAcc = testAccuracy(model, testImages, testLabels, device);
    if (a.json)
      std::printf("%s\n", nlohmann::json{{"feeder", "stoker-" + loadingModeName(loader.mode())}, {"model", a.model},
                                         {"device", loader.device().name()}, {"rank", rank}, {"epoch", e},
                                         {"batch_size", a.batchSize}, {"workers", a.workers}, {"samples", seen},
                                         {"seconds", s.seconds}, {"samples_per_s", rate}, {"data_wait_share", waitShare},
                                         {"loss", loss}, {"test_accuracy", testAcc}}
                               .dump()
                               .c_str());
    else
      std::printf("rank %d epoch %d: loss %.4f, train accuracy %.3f, test accuracy %.3f, %.0f samples/s, data wait %.1f%%\n",
                  rank, e, loss, trainAccuracy, testAcc, rate, 100 * waitShare);
    std::fflush(stdout);
  }
  if (publisher) {
    publisher->flush(1000);
    std::fprintf(stderr, "telemetry: %lld records sent, %lld dropped\n", static_cast<long long>(publisher->sent()),
                 static_cast<long long>(publisher->dropped()));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"stoker-demo-trainer: train an MLP or a CNN on Fashion-MNIST fed by the Stoker loader, publishing telemetry"};
  app.set_version_flag("--version", "stoker-demo-trainer 0.1.0");
  app.add_option("--data-dir", a.dataDir, "Fashion-MNIST directory (Debian's dataset-fashion-mnist)");
  app.add_option("--device", a.device, "cpu, sim:N or cuda:N");
  app.add_option("--publish", a.publish, "telemetry to HOST:PORT (the Monitor, stoker monitor) or file:PATH; repeatable");
  app.add_option("--epochs", a.epochs, "epochs (default 2)");
  app.add_option("--batch-size", a.batchSize, "samples per batch (default 128)");
  app.add_option("--workers", a.workers, "loader worker threads (default 2)");
  app.add_option("--lr", a.lr, "Adam learning rate (default 1e-3)");
  app.add_option("--max-steps", a.maxSteps, "stop each epoch after this many steps (0 = whole epoch)");
  app.add_option("--extra-step-us", a.extraStepMicros, "busy work added to every step, as a heavier model would");
  app.add_option("--seed", a.seed, "seed of the sampler and the model");
  app.add_option("--model", a.model, "mlp (default) or cnn")->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--mode", a.mode, "loading mode: auto (default), resident or streaming")
      ->check(CLI::IsMember({"auto", "resident", "streaming"}));
  app.add_flag("--json", a.json, "each epoch's figures as one JSON line");
  try {
    app.parse(argc, argv);
    return run(a);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.kind() == stoker::ErrorKind::BadInput ? 2 : 1;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error: libtorch: %s\n", e.what_without_backtrace());
    return 1;
  }
}
