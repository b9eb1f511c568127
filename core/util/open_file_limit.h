// util/open_file_limit: raises this process's soft limit on open files to its hard limit (at most
// 65,536), as servers that hold many connections do. The Monitor takes a connection per rank, and
// the usual soft limit of 1,024 ran out before its 4,096 peers (accepting then failed with
// EMFILE); a loader of many remote shards holds sockets and files beside them.
#pragma once

namespace stoker {

// The soft limit now (unchanged where raising it fails).
long raiseOpenFileLimit();

}  // namespace stoker
