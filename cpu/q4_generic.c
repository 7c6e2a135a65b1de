/* Portable int4 kernel: q4.h's sums and float chain spelled out; the oracle
 * the SIMD tables are tested against bit for bit. */
#include "cpu/q4.h"

#include <math.h>
#include <string.h>

#include "engine/qdef.h"

void cpu_q4_quant_rule(const float *v, int K, uint8_t *u, uint16_t *d)
{
    for (int g = 0; g * CPU_Q4_GROUP < K; g++) {
        int k0 = g * CPU_Q4_GROUP;
        qdef_q4_group(v + k0, K - k0 < CPU_Q4_GROUP ? K - k0 : CPU_Q4_GROUP,
                      u + k0, d + g);
    }
}

static void mm4(const cpu_mm4 *a, int n0, int n1)
{
    for (int n = n0; n < n1 && n < a->N; n++) {
        int t = n / CPU_Q4_ROWS, j = (n % CPU_Q4_ROWS) / 16, r = n % 16;
        for (int m = 0; m < a->M; m++) {
            const int8_t *x = a->x + (size_t)m * a->ldx;
            float acc = 0.0f;
            for (int g = 0; g < a->G; g++) {
                const uint8_t *rec = a->w + ((size_t)t * a->G + g) * (a->zp ? CPU_Q4_RECZ : CPU_Q4_REC);
                int32_t s = 0;
                for (int k = 0; k < CPU_Q4_GROUP; k++) {
                    int st = k / 4, p = st % 4;
                    uint8_t b = rec[j * 256 + p * 64 + r * 4 + k % 4];
                    s += (int32_t)(st >= 4 ? b >> 4 : b & 0x0f) * x[g * CPU_Q4_GROUP + k];
                }
                int32_t xs8 = a->xs8[(size_t)m * a->ldxs + g]; /* 8 * sum of qx */
                s -= a->zp ? rec[CPU_Q4_REC + n % CPU_Q4_ROWS] * (xs8 / 8) : xs8;
                uint16_t d;
                memcpy(&d, rec + 4 * 256 + 2 * (n % CPU_Q4_ROWS), 2);
                acc = fmaf((float)s, inf_f16_to_f32(d), acc);
            }
            a->y[(size_t)m * a->ldy + n] = acc * a->sx[m];
        }
    }
}

const cpu_q4k cpu_q4k_generic = {.name = "generic", .mm4 = mm4, .quant = cpu_q4_quant_rule};
