/* libplimsoll_torch_cuda.so: plimsoll as PyTorch's CUDA allocator, through
 * torch.cuda.memory.CUDAPluggableAllocator(path, "plimsoll_torch_malloc", "plimsoll_torch_free").
 * See docs/pytorch.md. C-compatible; needs no CUDA header: a cudaStream_t is passed as a plain pointer.
 * No function lets an exception out: failures print plimsoll's message on stderr. */
#ifndef PLIMSOLL_TORCH_CUDA_H
#define PLIMSOLL_TORCH_CUDA_H

#include <sys/types.h> /* ssize_t */

#ifdef __cplusplus
extern "C" {
#endif

typedef void* plimsoll_cuda_stream; /* a cudaStream_t (CUstream); NULL is the legacy default stream */

/* `size` bytes on cuda:`device` (plimsoll's numbering, configured by PLIMSOLL_* environment variables) for use
 * on `stream`. NULL when out of memory or the device is unavailable: PyTorch then raises its OutOfMemoryError,
 * and plimsoll's report is on stderr. */
void* plimsoll_torch_malloc(ssize_t size, int device, plimsoll_cuda_stream stream);
/* Frees `ptr`, last used on `stream`: reused at once by allocations on `stream` (stream order), by other streams
 * once the work queued on `stream` before this call has completed. */
void plimsoll_torch_free(void* ptr, ssize_t size, int device, plimsoll_cuda_stream stream);
/* The live `ptr` (from plimsoll_torch_malloc on cuda:`device`; `device` -1: whichever device holds it) is also
 * used on `stream` (torch's record_stream, e.g. through the C++ CUDAPluggableAllocator::set_record_stream_fn, whose
 * hook passes no device): once freed, no other stream reuses it before the work queued on `stream` up to the free
 * has completed. A NULL `ptr` (PyTorch passes an empty tensor's) is no block: 0, nothing done, nothing said.
 * 0, or -1 with the reason on stderr and in
 * plimsoll_torch_cuda_last_error(): not a live block of that device, or out of host memory beyond the fallback's
 * fixed room (plimsoll otherwise survives that by synchronizing the device at the block's free); after -1 the
 * block's streams are as they were: synchronize `stream` before freeing it. */
int plimsoll_torch_record_stream(void* ptr, int device, plimsoll_cuda_stream stream);
/* The device's counters as a JSON object ({"device":"cuda:0","in_use_bytes":...}), or NULL when the device was
 * never used. Valid until the calling thread's next call of this function. */
const char* plimsoll_torch_cuda_stats_json(int device);
/* torch.cuda.empty_cache() for plimsoll (which PyTorch's own call does not reach through a pluggable allocator):
 * waits for the work queued before pending frees, then gives every cached granule of cuda:`device` back to the
 * driver. Returns the bytes given back, or -1 when the device was never used. */
long long plimsoll_torch_cuda_empty_cache(int device);
/* torch.cuda.reset_peak_memory_stats(): the device's peaks start again from the current values. 0, or -1 when the
 * device was never used. */
int plimsoll_torch_cuda_reset_peak(int device);
/* Pause (docs/sharing.md, "Pause and resume"): gives cuda:`device`'s GPU memory back while keeping every address
 * reserved, so PyTorch's tensors stay valid pointers; `keep_contents` != 0 copies their bytes to pinned host memory
 * first, and back on resume. While paused, plimsoll_torch_malloc returns NULL (PyTorch raises its
 * OutOfMemoryError). Waits for the device's queued work first. Returns the bytes given back, or -1 (paused already,
 * a preallocated device, never used, no host memory for the contents): the reason is on stderr and in
 * plimsoll_torch_cuda_last_error(). */
long long plimsoll_torch_cuda_pause(int device, int keep_contents);
/* Maps the memory back at the same addresses (and the contents). 0, or -1 (not paused; the memory is not available
 * again: the device stays paused, call again later), the reason as for pause. */
int plimsoll_torch_cuda_resume(int device);
/* 1 while paused, 0 when not, -1 when the device was never used (or, with a reason in
 * plimsoll_torch_cuda_last_error(), when the query itself failed). */
int plimsoll_torch_cuda_is_paused(int device);
/* The reason for this thread's last failure of pause, resume, is_paused or record_stream ("" if none): the
 * failure's own text, or, where host memory ran out and that text could not be kept, a fixed one (such as
 * "unexpected failure (out of host memory?)"); never an earlier failure's. Valid until this thread's next failure of
 * those calls. */
const char* plimsoll_torch_cuda_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* PLIMSOLL_TORCH_CUDA_H */
