// data/datasets/scan_exchange_json: WebDataset scans (ScannedShard) as JSON, the form in which the
// ranks of a job hand them to each other over whatever all-gather the job has -- Python's
// torch.distributed.all_gather_object (the stoker package) or c10d's allgather of bytes (`stoker
// feed`). One format, so a rank of either kind reads what the others sent.
#pragma once

#include <functional>
#include <string>

#include "data/datasets/web_dataset.h"

namespace stoker {

// A ScanExchange over `gatherAll`, which takes this rank's scans as a JSON list and returns every
// rank's: a JSON list of those lists (a flat list of scans is taken too). What cannot travel as
// JSON (text that is not UTF-8: tar member names, ETags) goes empty rather than failing this
// rank's side of the all-gather, where the others would wait: an index the others then scan for
// themselves, an ETag left unchecked, a shard URL that no rank could name (each scans it).
ScanExchange scanExchangeOverJson(std::function<std::string(const std::string& mine)> gatherAll);

}  // namespace stoker
