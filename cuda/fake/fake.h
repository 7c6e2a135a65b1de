/* fake_: a stand-in for the CUDA runtime, cuBLAS and NCCL that runs on the
 * host, for tests only (tests/test_cuda.c linked as test_cuda_fake).
 *
 * It lets the CUDA backend's host code (cuda/backend.c: upload, layouts,
 * batch packing, the phases of a step, the submit/wait ring, placeholders,
 * graph capture and replay, tensor-parallel all-reduces, errors) run end to
 * end on machines without a GPU, against the CPU backend. "Device" memory is
 * host memory; every stream is synchronous; kernels are the C references in
 * kern_ref.c (NOT the CUDA kernels: those run only on a GPU). Work issued
 * while a stream is being captured is recorded and replayed by
 * cudaGraphLaunch, as a real graph would.
 *
 * Never linked into the library or the daemon: its symbols shadow libcudart's. */
#ifndef INFERD_CUDA_FAKE_H
#define INFERD_CUDA_FAKE_H

#include <cuda_runtime_api.h>
#include <stddef.h>

typedef void (*fake_fn)(const void *args);

/* Runs fn(args) now, or, while a capture is open, records it (args copied,
 * n bytes) to run at every launch of the graph. */
cudaError_t fake_launch(fake_fn fn, const void *args, size_t n);

#endif
