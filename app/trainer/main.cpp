// stoker-demo-trainer: a small real training program on the Stoker loader,
// so the Monitor has something to watch. Trains an MLP (784-256-10) on
// Fashion-MNIST with Adam, feeding it through stoker::Loader, and publishes
// the loader's telemetry (--publish HOST:PORT or file:PATH). Under torchrun
// (RANK/WORLD_SIZE set) each rank reads its DistributedSampler shard and
// reports its rank; ranks train independent replicas (there is no gradient
// all-reduce: this demonstrates data feeding, not data-parallel training).
//
//   stoker-demo-trainer --epochs 2 --publish 127.0.0.1:29650
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>

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
};

struct MlpImpl : torch::nn::Module {
  MlpImpl() : fc1(register_module("fc1", torch::nn::Linear(784, 256))), fc2(register_module("fc2", torch::nn::Linear(256, 10))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

double testAccuracy(Mlp& model, const torch::Tensor& images, const torch::Tensor& labels, torch::Device device) {
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
  options.batch_size = a.batchSize;
  options.num_workers = a.workers;
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

  Mlp model;
  model->to(device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(a.lr));
  std::fprintf(stderr, "rank %d/%d: %s on %s, %s mode, batch %lld\n", rank, world, dataset->description().c_str(),
               loader.device().name().c_str(), loadingModeName(loader.mode()).c_str(),
               static_cast<long long>(a.batchSize));
  for (int e = 0; e < a.epochs; ++e) {
    double lossSum = 0;
    std::int64_t correct = 0, seen = 0, steps = 0;
    Epoch epoch = loader.epoch(e);
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
    std::printf("rank %d epoch %d: loss %.4f, train accuracy %.3f, test accuracy %.3f, %.0f samples/s, data wait %.1f%%\n",
                rank, e, seen ? lossSum / static_cast<double>(seen) : 0.0,
                seen ? static_cast<double>(correct) / static_cast<double>(seen) : 0.0,
                testAccuracy(model, testImages, testLabels, device), s.seconds > 0 ? static_cast<double>(seen) / s.seconds : 0.0,
                s.seconds > 0 ? 100 * s.waitSeconds / s.seconds : 0.0);
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
  CLI::App app{"stoker-demo-trainer: train an MLP on Fashion-MNIST fed by the Stoker loader, publishing telemetry"};
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
