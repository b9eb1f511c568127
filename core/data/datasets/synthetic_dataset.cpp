#include "data/datasets/synthetic_dataset.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "io/dtype.h"
#include "io/host_tensor.h"
#include "io/host_tensor_torch.h"
#include "util/busy_work.h"
#include "util/error.h"

namespace stoker {
namespace {

std::vector<std::int64_t> parseShape(const std::string& text, const std::string& spec) {
  std::vector<std::int64_t> shape;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t x = text.find('x', pos);
    std::string part = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    char* end = nullptr;
    long long v = part.empty() ? -1 : std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 1 || v > (1LL << 31))
      throwBadInput(spec, "SHAPE must be positive sizes joined by 'x', e.g. 1x28x28 (got \"" + text + "\")");
    shape.push_back(v);
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  return shape;
}

}  // namespace

SyntheticDataset::SyntheticDataset(std::int64_t n, std::vector<std::int64_t> shape, c10::ScalarType dtype, double costMicros,
                                   double waitMicros)
    : n_(n), costMicros_(costMicros), waitMicros_(waitMicros) {
  FieldSpec data;
  data.name = "data";
  data.dtype = dtype;
  data.sampleShape = std::move(shape);
  std::int64_t elements = 1;
  for (auto d : data.sampleShape) elements *= d;
  data.sampleBytes = elements * static_cast<std::int64_t>(c10::elementSize(dtype));
  FieldSpec label{"label", c10::ScalarType::Long, {}, 8};
  specs_ = {data, label};
}

std::string SyntheticDataset::description() const {
  char cost[48] = "";
  if (costMicros_ > 0) std::snprintf(cost, sizeof cost, ", %g us of work each", costMicros_);
  char wait[48] = "";
  if (waitMicros_ > 0) std::snprintf(wait, sizeof wait, ", %g us of latency each", waitMicros_);
  return "synthetic (" + std::string(dtypeName(dtypeFromTorch(specs_[0].dtype))) + " " + shapeText(specs_[0].sampleShape) +
         cost + wait + ")";
}

void SyntheticDataset::readItem(std::int64_t index, std::uint8_t* const* dst) const {
  if (index < 0 || index >= n_)
    throwBadInput("sample " + std::to_string(index), "out of range for " + std::to_string(n_) + " samples");
  busyWork(costMicros_);  // decoding occupies a core
  if (waitMicros_ > 0)     // storage latency does not
    std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(waitMicros_));
  const FieldSpec& spec = specs_[0];
  const std::int64_t count = spec.sampleBytes / static_cast<std::int64_t>(c10::elementSize(spec.dtype));
  const double value = static_cast<double>(index % 251) / 251.0;
  switch (spec.dtype) {
    case c10::ScalarType::Float: std::fill_n(reinterpret_cast<float*>(dst[0]), count, static_cast<float>(value)); break;
    case c10::ScalarType::Double: std::fill_n(reinterpret_cast<double*>(dst[0]), count, value); break;
    case c10::ScalarType::Half: std::fill_n(reinterpret_cast<c10::Half*>(dst[0]), count, c10::Half(static_cast<float>(value))); break;
    case c10::ScalarType::BFloat16:
      std::fill_n(reinterpret_cast<c10::BFloat16*>(dst[0]), count, c10::BFloat16(static_cast<float>(value)));
      break;
    case c10::ScalarType::Long: std::fill_n(reinterpret_cast<std::int64_t*>(dst[0]), count, index); break;
    case c10::ScalarType::Int: std::fill_n(reinterpret_cast<std::int32_t*>(dst[0]), count, static_cast<std::int32_t>(index)); break;
    default: std::memset(dst[0], static_cast<int>(index % 251), static_cast<std::size_t>(spec.sampleBytes)); break;
  }
  const std::int64_t label = index % 10;
  std::memcpy(dst[1], &label, sizeof label);
}

std::shared_ptr<SyntheticDataset> parseSyntheticSpec(const std::string& spec) {
  const std::string usage =
      "expected synthetic:N,SHAPE[,dtype][,cost_us[,wait_us]], e.g. synthetic:10000,3x32x32,f32,200";
  if (spec.rfind("synthetic:", 0) != 0) throwBadInput(spec, usage);
  std::vector<std::string> parts;
  std::string rest = spec.substr(10);
  for (std::size_t pos = 0;;) {
    std::size_t comma = rest.find(',', pos);
    parts.push_back(rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (parts.size() < 2 || parts.size() > 5) throwBadInput(spec, usage);
  char* end = nullptr;
  const long long n = std::strtoll(parts[0].c_str(), &end, 10);
  if (parts[0].empty() || *end != '\0' || n < 1) throwBadInput(spec, "N must be a positive sample count (got \"" + parts[0] + "\")");
  auto shape = parseShape(parts[1], spec);
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::size_t next = 2;
  if (parts.size() > 2 && !parts[2].empty() && !std::isdigit(static_cast<unsigned char>(parts[2][0]))) {
    std::string upper = parts[2];
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    auto d = dtypeFromName(upper);
    auto t = d ? torchType(*d) : std::nullopt;
    if (!t) throwBadInput(spec, "unknown dtype \"" + parts[2] + "\" (e.g. f32, f16, bf16, u8, i64)");
    dtype = *t;
    next = 3;
  }
  double cost = 0;
  if (parts.size() > next) {
    cost = std::strtod(parts[next].c_str(), &end);
    if (parts[next].empty() || *end != '\0' || !(cost >= 0) || cost > kMaxBusyMicros)
      throwBadInput(spec, "cost_us must be 0-10000000 microseconds (got \"" + parts[next] + "\")");
    ++next;
  }
  double wait = 0;
  if (parts.size() > next) {
    wait = std::strtod(parts[next].c_str(), &end);
    if (parts[next].empty() || *end != '\0' || !(wait >= 0) || wait > kMaxBusyMicros)
      throwBadInput(spec, "wait_us must be 0-10000000 microseconds (got \"" + parts[next] + "\")");
    ++next;
  }
  if (next != parts.size()) throwBadInput(spec, usage);
  // Sizes are int64 everywhere (sample bytes, the dataset's total): refuse what overflows them
  // (found by fuzz_dataset_spec: 10,3x32x63332x2x63x... overflowed the sample size).
  std::int64_t bytes = static_cast<std::int64_t>(c10::elementSize(dtype)), total = 0;
  for (auto d : shape)
    if (__builtin_mul_overflow(bytes, d, &bytes)) throwBadInput(spec, "a sample of this shape is too large");
  if (__builtin_mul_overflow(bytes, static_cast<std::int64_t>(n), &total))
    throwBadInput(spec, "N samples of this shape are too large");
  return std::make_shared<SyntheticDataset>(n, shape, dtype, cost, wait);
}

}  // namespace stoker
