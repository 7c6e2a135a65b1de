// Sampling on the device: one block per logit row turns the row into a token
// id exactly as engine/smp.c does (greedy argmax, lowest id on ties; else
// softmax(logits / T) in double, top-k, top-p within the top-k set, min-p,
// and an inverse-CDF draw in token-id order at the request's uniform u), so
// only ids cross PCIe.
//
// Filters need the k-th ranked token, ranked by (logit desc, id asc). That
// is found as a cut: the shortest ranked prefix whose weight reaches a
// target (weight 1 and target k for top-k; the token's mass and top_p times
// the kept mass for top-p). The cut key is found by binary search over the
// 32-bit order-preserving key of the logit (32 passes, each a block sum),
// then ties on that key are walked in id order. Masses are summed in 2^-40
// fixed point, so every sum is exact and independent of summation order:
// the kept sets do not change from run to run.
//
// A row's token mask (a grammar's) is applied first, in place: disallowed
// logits become -inf, as the host's logits-processor chain makes them, so
// everything after sees what smp_ sees there. The logits of a sampled step
// never leave the device, so overwriting them costs nothing.
#include <limits.h>
#include <math.h>

#include "cuda/dev.cuh"
#include "cuda/kern.h"

#define SB 512 // threads per row
typedef unsigned long long u64;
static const double FX = 1099511627776.0; // 2^40

struct red_t {
    double d[32];
    u64 u[32];
    int i[32];
    float f[32];
};

// Order-preserving key: larger logit, larger key. NaN ranks as -inf (as in
// smp_key); -0 as +0 (they compare equal there).
static __device__ __forceinline__ uint32_t okey(float x)
{
    if (isnan(x))
        x = -INFINITY;
    if (x == 0.0f)
        x = 0.0f;
    uint32_t u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// (v1, i1) ranks before (v2, i2); i == INT_MAX marks "none".
static __device__ __forceinline__ bool better(float v1, int i1, float v2, int i2)
{
    return i1 != INT_MAX && (i2 == INT_MAX || v1 > v2 || (v1 == v2 && i1 < i2));
}

// The best (v, i) of the warp, in every lane.
static __device__ __forceinline__ void warp_argmax(float &v, int &i)
{
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (better(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
}

static __device__ void block_argmax(float &v, int &i, red_t &red)
{
    warp_argmax(v, i);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) {
        red.f[w] = v;
        red.i[w] = i;
    }
    __syncthreads();
    v = lane < nw ? red.f[lane] : -INFINITY;
    i = lane < nw ? red.i[lane] : INT_MAX;
    warp_argmax(v, i);
}

static __device__ int block_min(int v, red_t &red)
{
    for (int o = 16; o > 0; o >>= 1)
        v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0)
        red.i[w] = v;
    __syncthreads();
    v = lane < nw ? red.i[lane] : INT_MAX;
    for (int o = 16; o > 0; o >>= 1)
        v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ int block_max(int v, red_t &red)
{
    return -block_min(-v, red);
}

// Inclusive prefix sum over the block in thread order; *total gets the sum.
template <class V> static __device__ V block_scan(V v, V *red, V *total)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        V n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o)
            v += n;
    }
    __syncthreads();
    if (lane == 31)
        red[w] = v;
    __syncthreads();
    if (w == 0) {
        V x = lane < nw ? red[lane] : V(0);
        for (int o = 1; o < 32; o <<= 1) {
            V n = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o)
                x += n;
        }
        if (lane < nw)
            red[lane] = x;
    }
    __syncthreads();
    *total = red[nw - 1];
    return v + (w > 0 ? red[w - 1] : V(0));
}

// The cut: the shortest prefix of the ranking whose weight wf reaches
// target. Members are key > *tau, or key == *tau and id <= *idcut. When the
// whole row weighs less than target, everything is kept (*tau 0, *idcut V).
template <class WF>
static __device__ void rank_cut(const float *x, int V, WF wf, u64 target, uint32_t kmax,
                                uint32_t *tau, int *idcut, red_t &red)
{
    auto W = [&](uint32_t k) -> u64 { // weight of the tokens with key >= k
        u64 s = 0;
        for (int i = threadIdx.x; i < V; i += SB)
            if (okey(x[i]) >= k)
                s += wf(i);
        return block_sum(s, red.u);
    };
    *tau = 0;
    *idcut = V;
    if (W(0) < target)
        return;
    uint32_t lo = 0, hi = kmax; // W(lo) >= target > W(hi + 1)
    while (lo < hi) {
        uint32_t mid = lo + (uint32_t)(((u64)hi - lo + 1) / 2);
        if (W(mid) >= target)
            lo = mid;
        else
            hi = mid - 1;
    }
    u64 above = lo == 0xffffffffu ? 0 : W(lo + 1);
    for (int base = 0; base < V; base += SB) {
        int i = base + threadIdx.x;
        u64 wt = (i < V && okey(x[i]) == lo) ? wf(i) : 0, chunk;
        u64 inc = block_scan(wt, red.u, &chunk);
        int hit = block_min((wt > 0 && above + inc >= target) ? i : INT_MAX, red);
        if (hit != INT_MAX) {
            *tau = lo;
            *idcut = hit;
            return;
        }
        above += chunk;
    }
    *tau = lo; // not reached: the ties carry the target (rounding); keep them all
}

static __global__ void __launch_bounds__(SB)
    k_sample(float *logits, int V, const cuda_smp_row *rows, int32_t *ids)
{
    __shared__ red_t red;
    int row = blockIdx.x;
    const cuda_smp_row p = rows[row];
    if (p.mask) {
        float *xm = logits + (size_t)row * V;
        for (int i = threadIdx.x; i < V; i += SB)
            if (!(p.mask[i >> 5] >> (i & 31) & 1u))
                xm[i] = -INFINITY;
        __syncthreads(); // the block's global writes are visible to it after this
    }
    const float *x = logits + (size_t)row * V;

    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = threadIdx.x; i < V; i += SB) {
        float v = x[i];
        if (!isnan(v) && (bi == INT_MAX || v > bv)) {
            bv = v;
            bi = i;
        }
    }
    block_argmax(bv, bi, red);
    int amax = bi == INT_MAX ? 0 : bi;
    float m = bi == INT_MAX ? -INFINITY : bv;
    if (!(p.temperature > 0.0f) || !isfinite(m)) { // greedy, or a row smp treats so
        if (threadIdx.x == 0)
            ids[row] = amax;
        return;
    }
    const double md = m, temp = p.temperature;
    auto w = [&](int i) -> double {
        float l = x[i];
        return isnan(l) ? 0.0 : exp(((double)l - md) / temp);
    };
    auto fx = [&](int i) -> u64 { return __double2ull_rn(w(i) * FX); };
    const uint32_t kmax = okey(m);

    uint32_t tk = 0, tp = 0;
    int ik = V, ip = V;
    if (p.top_k > 0 && p.top_k < V)
        rank_cut(x, V, [](int) -> u64 { return 1; }, (u64)p.top_k, kmax, &tk, &ik, red);
    auto in_k = [&](int i) -> bool {
        uint32_t k = okey(x[i]);
        return k > tk || (k == tk && i <= ik);
    };
    if (p.top_p < 1.0f) {
        u64 s1 = 0;
        for (int i = threadIdx.x; i < V; i += SB)
            if (in_k(i))
                s1 += fx(i);
        s1 = block_sum(s1, red.u);
        u64 target = (u64)ceil((double)p.top_p * (double)s1);
        if (target < 1)
            target = 1;
        rank_cut(x, V, [&](int i) -> u64 { return in_k(i) ? fx(i) : 0; }, target, kmax, &tp,
                 &ip, red);
    }
    auto keep = [&](int i) -> bool {
        uint32_t k = okey(x[i]);
        if (!in_k(i) || !(k > tp || (k == tp && i <= ip)))
            return false;
        return !(p.min_p > 0.0f) || w(i) >= (double)p.min_p; // p_max has weight 1
    };

    double s3 = 0.0;
    for (int i = threadIdx.x; i < V; i += SB)
        if (keep(i))
            s3 += w(i);
    s3 = block_sum(s3, red.d);
    // the probabilities smp_probs would write (float), drawn as smp_draw does
    auto prob = [&](int i) -> double {
        if (i >= V || !keep(i))
            return 0.0;
        float f = (float)(w(i) / s3);
        return f > 0.0f ? (double)f : 0.0;
    };
    double total = 0.0;
    int last = -1;
    for (int i = threadIdx.x; i < V; i += SB) {
        double q = prob(i);
        if (q > 0.0) {
            total += q;
            last = i;
        }
    }
    total = block_sum(total, red.d);
    last = block_max(last, red);
    if (last < 0) {
        if (threadIdx.x == 0)
            ids[row] = amax;
        return;
    }
    double target = p.u * total, base = 0.0;
    int pick = last;
    for (int b0 = 0; b0 < last; b0 += SB) {
        int i = b0 + threadIdx.x;
        double q = i < last ? prob(i) : 0.0, chunk;
        double inc = block_scan(q, red.d, &chunk);
        int hit = block_min((q > 0.0 && target < base + inc) ? i : INT_MAX, red);
        if (hit != INT_MAX) {
            pick = hit;
            break;
        }
        base += chunk;
    }
    if (threadIdx.x == 0)
        ids[row] = pick;
}

extern "C" cudaError_t cuda_k_sample(float *logits, int V, int n,
                                     const cuda_smp_row *rows, int32_t *ids, cudaStream_t st)
{
    if (n > 0)
        k_sample<<<n, SB, 0, st>>>(logits, V, rows, ids);
    return cudaGetLastError();
}
