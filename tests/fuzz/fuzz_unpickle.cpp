// Fuzz target: the restricted unpickler (data.pkl of torch.save archives). It must refuse every
// global outside the state-dict set and never run, recurse or allocate without bound.
#include "fuzz_target.h"
#include "io/pickle_reader.h"

STOKER_FUZZ_TARGET(unpickle) {
  const stoker::PyRef value = stoker::unpickle(data, size, "fuzz.pkl");
  (void)value;
}
