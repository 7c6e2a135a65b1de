/* bench_cuda's GEMM-level timings (bench/bench_cuda.c runs them): every
 * kernel of the model's four layer GEMMs at several M on random data, beside
 * cuBLAS, with the bits of each against the launcher's choice. */
#ifndef INFERD_BENCH_CUDA_GEMMS_H
#define INFERD_BENCH_CUDA_GEMMS_H

#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/model.h"

/* A failed CUDA / cuBLAS call ends the benchmark, naming it. */
#define TRY(call)                                                                      \
    do {                                                                               \
        if ((call) != 0) {                                                             \
            fprintf(stderr, "bench_cuda: %s failed at %s:%d\n", #call, __FILE__,       \
                    __LINE__);                                                         \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

/* n bf16 values uniform in [-scale, scale) into a new device buffer (timing
 * on constant data or zeros flatters tensor cores). */
uint16_t *dev_random_bf16(size_t n, float scale, uint32_t seed);

/* cuda_k_gemm's candidate tile shapes beside cuBLAS (the "gemm_shapes"
 * array of out); 0 when a candidate gives other bits than the launcher's. */
int gemm_sweep(const model *m, cJSON *out);

/* The quantized GEMMs' kernels and the activations' quantizers
 * ("quantized_gemm_shapes"), weight GB/s against the copy bandwidth bw;
 * 0 when a kernel gives other bits. */
int qgemm_sweep(const model *m, double bw, cJSON *out);

/* cuda_k_gemm_wg (Hopper's wgmma, chosen by nothing yet) beside cuda_k_gemm
 * and cuBLAS at M 1, 64, 256 and 2048 ("wgmma_gemm_shapes"): its largest
 * difference from cuda_k_gemm relative to the row's largest |y| and whether
 * the bits are the same, reported, not asserted. 1 off compute capability
 * 9.0 (out says so), else 0; a failed call ends the benchmark: run it last. */
int wg_sweep(const model *m, cJSON *out);

#endif
