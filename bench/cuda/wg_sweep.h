/* bench_cuda --wgmma: cuda_k_gemm_wg (Hopper's wgmma, cuda/k_gemm_wg.cu)
 * beside cuda_k_gemm and cuBLAS on a model's four layer GEMMs. */
#ifndef INFERD_BENCH_CUDA_WG_SWEEP_H
#define INFERD_BENCH_CUDA_WG_SWEEP_H

#include <cJSON.h>

#include "engine/model.h"

/* Times the three on random data at M 1, 64, 256 and 2048 (medians of 15
 * runs after 3), prints a table and adds to o ("wgmma_gemm_shapes"): each
 * time, the wgmma kernel's largest difference from cuda_k_gemm relative to
 * the row's largest |y|, and whether the bits are the same. Returns 0; 1
 * off Hopper (o says so) or with a message when a CUDA call fails (the
 * device may then be unusable: run it last). Nothing is asserted: the
 * kernel is not chosen by anything yet. */
int wg_sweep(const model *m, cJSON *o);

#endif
