// data/datasets/device_tensor_dataset: fields a training program already holds on the loader's
// device (a PyTorch script's CUDA tensors), sharing dim 0. The loader is resident on them as they
// are -- no host copy, no second copy on the device -- and gathers each batch there; a sample is
// never read on the host, so streaming them is refused.
#pragma once

#include <memory>

#include "data/dataset.h"
#include "data/loader.h"

namespace stoker {

class DeviceTensorDataset : public Dataset {
 public:
  // Error(BadInput) naming the field that is not contiguous or does not share dim 0.
  DeviceTensorDataset(std::string description, const std::vector<std::string>& names,
                      const std::vector<at::Tensor>& fields);
  std::string description() const override { return description_; }
  std::int64_t size() const override { return size_; }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  // Error(BadInput): the samples are on the device (a loader over them is resident there).
  void readItem(std::int64_t index, std::uint8_t* const* dst) const override;

 private:
  std::string description_;
  std::int64_t size_ = 0;
  std::vector<FieldSpec> specs_;
  std::string device_;  // where the fields lie; the loader resident on them holds them
};

// A loader resident on `fields` where they lie: each must be on `device` (its torch device), and
// `options.loading_mode` must not be streaming. Error(BadInput) naming what is wrong otherwise.
std::unique_ptr<Loader> loaderOverDeviceTensors(std::vector<std::string> names, std::vector<at::Tensor> fields,
                                                const LoaderOptions& options, std::shared_ptr<DeviceBackend> device);

}  // namespace stoker
