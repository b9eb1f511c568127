#include "dist/group_scan_exchange.h"

#include "data/dataset.h"
#include "data/datasets/scan_exchange_json.h"
#include "dist/dist_group.h"

namespace stoker {

ScanExchange scanExchangeOver(DistGroup& group) {
  return scanExchangeOverJson([&group](const std::string& mine) {
    std::string all = "[";
    for (const std::string& theirs : group.allgather(mine)) all += (all.size() > 1 ? "," : "") + theirs;
    return all + "]";
  });
}

std::shared_ptr<Dataset> openDatasetSharingScans(const std::string& spec, const LoaderOptions& options, DistGroup* group) {
  if (!group || group->worldSize() < 2 || spec.rfind("wds:", 0) != 0 || !datasetIsRemote(spec)) return openDataset(spec, options);
  validateLoaderOptions(options);
  return openWebDataset(spec, options, scanExchangeOver(*group), ScanSplit{group->rank(), group->worldSize()});
}

}  // namespace stoker
