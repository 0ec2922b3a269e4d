/* kiln_abi.h: the only header a generated cpu kernel includes. Plain C, a few lines, so that the
 * host compiler builds a generated program in well under a second. Host services (threads, a
 * library GEMM, scratch memory) come in through kiln_host; the executor provides them.
 *   executor --kiln_host + tensor pointers--> kiln_run (generated) --> outputs */
#ifndef KILN_ABI_H
#define KILN_ABI_H

#include <stdint.h>

#define KILN_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*kiln_range_fn)(void* ctx, int64_t begin, int64_t end);

typedef struct kiln_host {
  int32_t abi_version; /* KILN_ABI_VERSION */
  int32_t num_threads; /* workers behind parallel_for */
  /* Runs fn over [0, n) split into chunks of at least `grain`, on the host's threads; returns when
   * all chunks are done. */
  void (*parallel_for)(const struct kiln_host* host, int64_t n, int64_t grain, kiln_range_fn fn,
                       void* ctx);
  /* Row-major C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C; op transposes when trans_* != 0.
   * lda / ldb / ldc are row strides of A, B and C as stored. */
  void (*sgemm)(const struct kiln_host* host, int trans_a, int trans_b, int64_t m, int64_t n,
                int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                float beta, float* c, int64_t ldc);
  /* Scratch memory, 64-byte aligned, valid until kiln_run returns; NULL when out of memory. */
  void* (*alloc)(const struct kiln_host* host, int64_t bytes);
  void* impl;
} kiln_host;

/* The entry point of every generated cpu program. Pointers follow the task's declaration order:
 * inputs[i] for [[inputs]], params[i] for [[params]], outputs[i] for `outputs` (float32, dense,
 * row-major; argmax/argmin outputs are int64). Returns 0 on success, non-zero on failure. */
typedef int (*kiln_run_fn)(const kiln_host* host, const void* const* inputs,
                           const void* const* params, void* const* outputs);
#define KILN_ENTRY_NAME "kiln_run"

#ifdef __cplusplus
}
#endif

#endif /* KILN_ABI_H */
