// Fuzz target: dataset specs (`--dataset`, the workbench picker). File-backed kinds have their own
// file targets, so the text after "synthetic:" is fuzzed, and accepted datasets produce items.
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/datasets/synthetic_dataset.h"
#include "fuzz_target.h"
#include "io/dtype.h"

using stoker::fuzz::check;

STOKER_FUZZ_TARGET(dataset_spec) {
  const std::string spec = "synthetic:" + std::string(reinterpret_cast<const char*>(data), size);
  const auto dataset = stoker::openDataset(spec);
  check(dataset->size() >= 0, "a dataset has a size");
  const auto* synthetic = dynamic_cast<const stoker::SyntheticDataset*>(dataset.get());
  check(synthetic != nullptr, "a synthetic spec gives a synthetic dataset");
  // cost_us and wait_us up to 10 s are valid and spent on purpose: reading such items would only
  // make libFuzzer report slow units (CI's smoke run once filed "…,0,9e6" as a finding).
  if (dataset->size() == 0 || synthetic->costMicros() > 100 || synthetic->waitMicros() > 1000) return;
  std::vector<std::vector<std::uint8_t>> buffers;
  std::vector<std::uint8_t*> dst;
  std::uint64_t itemBytes = 0;
  for (const auto& f : dataset->fields()) itemBytes += static_cast<std::uint64_t>(f.sampleBytes);
  if (itemBytes > (16u << 20)) return;  // valid, just slow to fill
  for (const auto& f : dataset->fields()) buffers.emplace_back(static_cast<std::size_t>(f.sampleBytes));
  for (auto& b : buffers) dst.push_back(b.data());
  dataset->readItem(0, dst.data());
  dataset->readItem(dataset->size() - 1, dst.data());
}
