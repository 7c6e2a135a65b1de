#include "engine/qdef.h"

#include <math.h>

#include "engine/common.h"

/* One operation per statement: the SIMD tables and kernels match each. */
float qdef_i8(const float *v, int n, int8_t *q)
{
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = fabsf(v[i]);
        if (a > amax) /* false for NaN */
            amax = a;
    }
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < n; i++) {
        float t = fmaxf(v[i] * inv, -127.0f); /* NaN becomes -127 */
        t = fminf(t, 127.0f);
        q[i] = (int8_t)(int)rintf(t);
    }
    return amax / 127.0f;
}

void qdef_i8_static(const float *v, int n, float s, int8_t *q, int offset)
{
    for (int i = 0; i < n; i++) {
        float t = fmaxf(v[i] / s, -127.0f); /* NaN becomes -127 */
        t = fminf(t, 127.0f);
        int r = (int)rintf(t);
        if (offset)
            ((uint8_t *)q)[i] = (uint8_t)(r + 128);
        else
            q[i] = (int8_t)r;
    }
}

/* nearbyintf (round half to even, the default mode) without the libm
 * call: below 2^22 adding and taking back 1.5 * 2^23 leaves the nearest
 * integer (the sum's ulp is 1). Only a zero's sign may differ, which the
 * callers' integer conversion drops. */
static inline float qdef__round(float x)
{
    return fabsf(x) < 0x1p22f ? (x + 0x1.8p23f) - 0x1.8p23f : nearbyintf(x);
}

uint16_t qdef_q4_scale(float a, float *inv)
{
    uint16_t h = inf_f32_to_f16(a / -8.0f);
    if ((h & 0x7c00u) == 0x7c00u) /* beyond f16: the largest finite scale */
        h = (uint16_t)((h & 0x8000u) | 0x7bffu);
    float D = inf_f16_to_f32(h);
    *inv = D != 0.0f ? 1.0f / D : 0.0f;
    return h;
}

void qdef_q4_group(const float *v, int len, uint8_t u[QDEF_Q4_GROUP], uint16_t *d16)
{
    float m = 0.0f, a = 0.0f; /* m: the largest |v| (NaNs skipped); a: the first v of it */
    for (int i = 0; i < len; i++) {
        float f = fabsf(v[i]);
        m = f > m ? f : m;
    }
    for (int i = 0; m > 0.0f && i < len; i++)
        if (fabsf(v[i]) == m) {
            a = v[i];
            break;
        }
    float inv;
    uint16_t h = qdef_q4_scale(a, &inv);
    for (int i = 0; i < QDEF_Q4_GROUP; i++) {
        float t = i < len ? qdef__round(v[i] * inv) : 0.0f;
        t = !(t >= -8.0f) ? -8.0f : t > 7.0f ? 7.0f : t; /* NaN weights become -8 */
        u[i] = (uint8_t)((int)t + 8);
    }
    *d16 = h;
}

void qdef_q4_codes(const uint8_t *codes, int64_t cols, int64_t g, uint8_t fill,
                   uint8_t u[QDEF_Q4_GROUP])
{
    for (int i = 0; i < QDEF_Q4_GROUP; i++) {
        int64_t k = g * QDEF_Q4_GROUP + i;
        u[i] = k < cols ? (uint8_t)(codes[k / 2] >> (4 * (k % 2)) & 15) : fill;
    }
}
