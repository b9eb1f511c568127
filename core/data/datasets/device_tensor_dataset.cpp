#include "data/datasets/device_tensor_dataset.h"

#include "data/datasets/tensor_dataset.h"
#include "data/device.h"
#include "util/error.h"

namespace stoker {

DeviceTensorDataset::DeviceTensorDataset(std::string description, const std::vector<std::string>& names,
                                         const std::vector<at::Tensor>& fields)
    : description_(std::move(description)), specs_(fieldSpecsOf(description_, names, fields)) {
  for (std::size_t f = 0; f < fields.size(); ++f)
    // A copy here would be the second copy of the dataset on the device that this class avoids.
    if (!fields[f].is_contiguous()) throwBadInput(names[f], "is not contiguous (call .contiguous() first)");
  size_ = fields[0].size(0);
  device_ = fields[0].device().str();
}

void DeviceTensorDataset::readItem(std::int64_t index, std::uint8_t* const*) const {
  throwBadInput("sample " + std::to_string(index),
                "lies on " + device_ + " (" + description_ +
                    "): it is gathered there by a resident loader, never read on the host");
}

std::unique_ptr<Loader> loaderOverDeviceTensors(std::vector<std::string> names, std::vector<at::Tensor> fields,
                                                const LoaderOptions& options, std::shared_ptr<DeviceBackend> device) {
  if (!device) throwBadInput("device", "none given");
  const c10::Device where = device->torchDevice();
  for (std::size_t f = 0; f < fields.size() && f < names.size(); ++f)
    if (fields[f].device() != where)
      throwBadInput(names[f], "is on " + fields[f].device().str() + ", the loader's device is " + device->name() +
                                  ": give the loader the tensors' device");
  if (options.loading_mode == LoadingMode::Streaming)
    throwBadInput("loading_mode streaming", "the tensors are on " + device->name() +
                                                " already: a loader over them is resident there (use auto or resident)");
  auto dataset = std::make_shared<DeviceTensorDataset>("tensors on " + device->name(), names, fields);
  return std::make_unique<Loader>(std::move(dataset), options, std::move(device), nullptr, std::move(fields));
}

}  // namespace stoker
