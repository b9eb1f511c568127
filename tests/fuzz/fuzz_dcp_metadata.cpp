// Fuzz target: a DCP .metadata through the restricted unpickler's DCP profile and the Metadata
// reader. It must refuse every class outside DCP's and never run, recurse or allocate without bound.
#include "fuzz_target.h"
#include "io/dcp_metadata.h"

STOKER_FUZZ_TARGET(dcp_metadata) {
  const stoker::DcpMetadata md = stoker::parseDcpMetadata(data, size, "fuzz/.metadata");
  (void)md;
}
