/* stoker_c.h: the C ABI the Python package `stoker` loads with ctypes (python/stoker/_native.py).
 *
 * Why a C ABI and not a CPython extension: the module must be built against the libtorch that the
 * Python process imports (Debian's 1.13 here, PyTorch 2.x's wheel on GPU machines), and neither
 * Python.h nor pybind11 is guaranteed where that libtorch is (pip wheels ship no Python headers
 * for the interpreter, Debian needs python3-dev). A plain C ABI depends on libtorch's C++ ABI only,
 * like torchcodec's ops library; tensors cross it as DLPack (DLManagedTensor*), which torch turns
 * into a torch.Tensor without a copy (torch.utils.dlpack.from_dlpack) and back (to_dlpack).
 * ctypes releases the GIL for every call, so the core loads while Python threads run.
 * Where the build also finds Python.h and torch's libtorch_python, the optional extension
 * stoker._batches takes the per-batch path (stoker_c_tensors.h) and the package falls back to
 * this ABI elsewhere.
 *
 * Conventions: a function returning a pointer returns NULL on error, one returning int returns -1;
 * stoker_last_error() / stoker_last_error_kind() then say why (per thread). Strings returned as
 * char* are JSON documents the caller frees with stoker_free(). Nothing here throws. */
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STOKER_C_API __attribute__((visibility("default")))

/* Handles, not pointers: ids the library looks up on each call (c_api_handles.h). Any thread may
 * free one while another is inside a call with it; that call ends (an epoch's next() returns
 * STOKER_CLOSED) and a freed handle is refused, never dereferenced. */
typedef struct StokerLoader StokerLoader;
typedef struct StokerEpoch StokerEpoch;

/* Error kinds (stoker::ErrorKind + 1; 0 = no error). */
enum { STOKER_OK = 0, STOKER_BAD_INPUT = 1, STOKER_IO = 2, STOKER_CANCELLED = 3, STOKER_TIMEOUT = 4,
       STOKER_OUT_OF_MEMORY = 5, STOKER_INTERNAL = 6, STOKER_NETWORK = 7 };
STOKER_C_API const char* stoker_last_error(void);
STOKER_C_API int stoker_last_error_kind(void);
STOKER_C_API void stoker_free(char* text);

/* {"stoker": version, "torch": the libtorch version compiled against, "cuda": bool, "abi": n}. */
STOKER_C_API char* stoker_build_info(void);
/* The options of a preset ("gpu_optimized", ...) as LoaderOptions JSON. */
STOKER_C_API char* stoker_preset(const char* name, int rank, int world_size);
/* The prefetch depth that keeps `workers` workers busy (two batches a worker, as DataLoader's
 * default prefetch_factor; at least 8): what `stoker bench --workers N` uses. */
STOKER_C_API int stoker_prefetch_for_workers(int workers);
/* Validates LoaderOptions JSON (unknown keys, types, ranges); returns it complete, every knob. */
STOKER_C_API char* stoker_options_normalize(const char* options_json);
/* [{"name", "export_only", "effect", "group", "pytorch"}] for every knob. */
STOKER_C_API char* stoker_knobs(void);
/* The dataset kinds openDataset takes, as a JSON array of lines. */
STOKER_C_API char* stoker_dataset_kinds(void);
/* `stoker plan --json` for a request {"samples", "world_size", "seed", "epoch", "shuffle",
 * "drop_last", "batch_size", "weights", "step_ms", "resume_from"}. */
STOKER_C_API char* stoker_plan(const char* request_json);

/* The ranks' all-gather for sharing WebDataset scans: given this rank's scans as a JSON array
 * [{"shard", "url", "size", "etag", "index"}], returns every rank's as one JSON array of such arrays (or
 * of their entries), in memory from stoker_strdup, which the core frees; NULL when it failed. */
typedef char* (*stoker_exchange_fn)(void* user, const char* mine_json);
/* A copy of `text` in memory the core frees (what a stoker_exchange_fn returns). */
STOKER_C_API char* stoker_strdup(const char* text);

/* A loader over a dataset spec (every kind `--dataset` takes). `publish_json`: a JSON array of
 * telemetry addresses (may be NULL); `name` names the loader in telemetry (may be NULL or "").
 * `exchange` (may be NULL): for a distributed wds: spec with remote shards and without index=, the
 * ranks open it together and share their scans through it (each scans the remote shards of its
 * own first deal); it is called once, on the calling thread. */
STOKER_C_API StokerLoader* stoker_loader_open(const char* spec, const char* options_json, const char* device,
                                              const char* publish_json, const char* name, int telemetry_rank,
                                              stoker_exchange_fn exchange, void* user);
/* A loader over tensors the caller holds: `count` DLManagedTensor* (ownership passes to the loader,
 * also on error) sharing dim 0, named by `names_json` (a JSON array of strings). */
STOKER_C_API StokerLoader* stoker_loader_from_dlpack(void* const* tensors, int count, const char* names_json,
                                                     const char* options_json, const char* device,
                                                     const char* publish_json, const char* name, int telemetry_rank);
/* Frees the loader; when an epoch of it is still in a call on another thread, that call is
 * cancelled and the loader ends with it. */
STOKER_C_API void stoker_loader_free(StokerLoader* loader);
/* Waits up to `wait_ms` for every call in flight (on any thread) to return: 1 when none is left.
 * For exit, after freeing every loader: no thread is then still tearing one down. */
STOKER_C_API int stoker_quiesce(int wait_ms);
/* In a fork's child (Python's os.register_at_fork): the parent's calls in flight are not the
   child's to wait for. */
STOKER_C_API void stoker_forget_calls_after_fork(void);
/* {"description", "samples", "batches", "samples_per_epoch", "mode", "prefetch_depth", "notes", "advice",
 *  "fields": [{"name", "dtype", "shape"}], "options": {...}, "memory": {...}, "last_epoch": {...}}. */
STOKER_C_API char* stoker_loader_describe(StokerLoader* loader);
/* For a loader the script gave no num_workers: where its batches wait on the network (uncached remote
 * token windows, streamed), raises its workers, and its ring to `batches_per_worker` batches a
 * worker (0: the script chose the depth), before its first epoch (Loader::raiseWorkersForNetwork;
 * later it is a retune). 1 when raised, 0 when nothing changed, -1 on error. */
STOKER_C_API int stoker_loader_raise_workers_for_network(StokerLoader* loader, int batches_per_worker);
/* The sample order of `epoch` for this loader's rank (the sampler's, or the dataset's own): writes at
 * most `capacity` indices to `out` and returns how many there are (call with capacity 0 to size). */
STOKER_C_API int64_t stoker_loader_order(StokerLoader* loader, int64_t epoch, int64_t* out, int64_t capacity);

/* Starts `epoch`: the sampler's order when `order` is NULL, else the `count` indices given (what is
 * left of an interrupted epoch, a rank's share of a plan), cut into batches of batch_size or, when
 * `sizes` is not NULL, into `size_count` batches of those sizes. */
STOKER_C_API StokerEpoch* stoker_epoch_start(StokerLoader* loader, int64_t epoch, const int64_t* order, int64_t count,
                                             const int64_t* sizes, int64_t size_count);
/* Queues `epoch` over `order` (and `sizes`, as stoker_epoch_start takes them) behind this one: the
 * workers go on into it when they run out of this epoch's batches, and a stoker_epoch_start of that
 * epoch over the same order and sizes serves what they made (no gap at the boundary). 1 when
 * queued, 0 when nothing is (no workers, not persistent_workers, one queued already), -1 on error. */
STOKER_C_API int stoker_epoch_queue_next(StokerEpoch* epoch, int64_t next_epoch, const int64_t* order, int64_t count,
                                         const int64_t* sizes, int64_t size_count);
/* The next batch, waiting at most `wait_ms` for another thread to produce it (so a caller can look
 * at its own interrupts in between): writes one DLManagedTensor* per field to `fields` (at most
 * `capacity`) and returns the field count; 0 after the last batch, STOKER_NOT_READY when the wait
 * ran out (call again), STOKER_CLOSED once the epoch (or its loader) was freed, also by another
 * thread during this call, -1 on error (a worker's error names the batch and the sample). */
#define STOKER_NOT_READY (-2)
#define STOKER_CLOSED (-3)
STOKER_C_API int stoker_epoch_next(StokerEpoch* epoch, int wait_ms, void** fields, int capacity);
/* The sample indices (int64, host) of the batch stoker_epoch_next returned last, as a
 * DLManagedTensor* the caller owns; NULL before the first batch. */
STOKER_C_API void* stoker_epoch_indices(StokerEpoch* epoch);
/* Stops the workers and frees the epoch's buffers (batches already handed out stay valid); when
 * another thread is inside stoker_epoch_next with it, that call does so as it returns. */
STOKER_C_API void stoker_epoch_free(StokerEpoch* epoch);

/* Progress of a long operation: done and total units (bytes), the current item. A non-zero return
 * cancels the operation (it then fails with STOKER_CANCELLED). Called from the core's threads. */
typedef int (*stoker_progress_fn)(void* user, uint64_t done, uint64_t total, const char* item);

/* `stoker ckpt inspect --json`. */
STOKER_C_API char* stoker_ckpt_inspect(const char* path);
/* `stoker ckpt convert --json`; `request_json`: {"to", "dtype", "memory_budget", "jobs", "resume",
 * "force", "dry_run", "rank", "world_size", "include": [...], "exclude": [...]}. */
STOKER_C_API char* stoker_ckpt_convert(const char* src, const char* dst, const char* request_json,
                                       stoker_progress_fn progress, void* user);
/* {"equal", "tensors_compared", "non_tensor_items_not_compared", "first_difference"}, as `stoker ckpt verify --json`. */
STOKER_C_API char* stoker_ckpt_verify(const char* a, const char* b, stoker_progress_fn progress, void* user);
/* The auto-tuner, as `stoker tune --json`; `request_json`: {"budget_s", "device"}. */
STOKER_C_API char* stoker_tune(const char* spec, const char* options_json, const char* request_json,
                               stoker_progress_fn progress, void* user);

#ifdef __cplusplus
}
#endif
