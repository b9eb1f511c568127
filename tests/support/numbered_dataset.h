// numbered_dataset: a dataset whose rows say which sample they are, so a
// test can check any batch against its indices. For suites that link
// stoker_core.
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "data/datasets/tensor_dataset.h"

namespace stoker::test {

// n samples: x[i] = [i, i + 0.5, i + 1, i + 1.5] as float [4], y[i] = i as int64.
inline std::shared_ptr<TensorDataset> numbered(std::int64_t n = 1000) {
  at::Tensor x = at::arange(n, at::kFloat).unsqueeze(1) + at::arange(4, at::kFloat).unsqueeze(0) * 0.5;
  at::Tensor y = at::arange(n, at::kLong);
  return std::make_shared<TensorDataset>("numbered", std::vector<std::string>{"x", "y"}, std::vector<at::Tensor>{x, y});
}

}  // namespace stoker::test
