// util/user_cache_dir: the folder where Stoker keeps, for the user, what it could make again but
// should not have to (the scans of remote WebDataset shards): $STOKER_CACHE_DIR, else
// $XDG_CACHE_HOME/stoker, else $HOME/.cache/stoker -- where pip, torch hub and Hugging Face keep
// theirs. Empty when none of them is set (a daemon without a home): nothing is kept then.
#pragma once

#include <string>

namespace stoker {

std::string userCacheDir();

}  // namespace stoker
