// dist_group.cpp as a build against PyTorch's wheel compiles it: c10d with NCCL, without Gloo's
// headers (the wheels ship none). Compiled only by stoker_cuda_syntax_check, so that a machine
// without a GPU or a wheel still catches a Gloo reference left outside its guard.
#define STOKER_WITH_C10D 1
#undef STOKER_C10D_GLOO
#include "dist/dist_group.cpp"  // NOLINT(bugprone-suspicious-include)
