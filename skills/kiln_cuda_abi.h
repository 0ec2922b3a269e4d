/* kiln_cuda_abi.h: the entry point of a free-form cuda source program (`//! kiln-source cuda`),
 * compiled by nvcc into a shared object that the executor loads with dlopen. Plain C, no CUDA
 * header: the stream is passed as a void pointer (a cudaStream_t).
 *   executor --device pointers + stream--> kiln_cuda_run (free-form) --> outputs */
#ifndef KILN_CUDA_ABI_H
#define KILN_CUDA_ABI_H

#ifdef __cplusplus
extern "C" {
#endif

/* Pointers are device pointers in the task's declaration order: inputs[i] for [[inputs]],
 * params[i] for [[params]], outputs[i] for `outputs` (float32, dense, row-major; argmax / argmin
 * outputs are int64). Launch every kernel on `stream` (or join other streams back into it before
 * returning): work still running when `stream` is done is detected and the program fails.
 * Return without waiting for the device; 0 on success, non-zero on failure. */
typedef int (*kiln_cuda_run_fn)(const void* const* inputs, const void* const* params,
                                void* const* outputs, void* stream);
#define KILN_CUDA_ENTRY_NAME "kiln_cuda_run"

#ifdef __cplusplus
}
#endif

#endif /* KILN_CUDA_ABI_H */
