// dist/group_scan_exchange: the ranks of a c10d job (`stoker feed`) sharing their WebDataset scans
// over their own group, as the Python package's ranks do over torch.distributed: each rank scans
// its split of the remote shards and takes the others' indexes, so N ranks fetch each shard once
// between them to open the dataset instead of N times.
#pragma once

#include <memory>
#include <string>

#include "data/datasets/web_dataset.h"

namespace stoker {

class DistGroup;

// The exchange over `group` (which must outlive the open): scans as JSON (scan_exchange_json),
// gathered as bytes.
ScanExchange scanExchangeOver(DistGroup& group);

// `spec` opened by this rank of `group`: a WebDataset with a remote shard pattern shares its scans
// (split by rank); any other spec, or no group, opens as openDataset does.
std::shared_ptr<Dataset> openDatasetSharingScans(const std::string& spec, const LoaderOptions& options, DistGroup* group);

}  // namespace stoker
