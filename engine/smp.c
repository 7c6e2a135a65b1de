/* smp_: one row of logits to the next token (the contract is in smp.h).
 *
 * Everything sized by the vocabulary is allocated in smp_create; sampling a
 * token allocates nothing. Probabilities stay in double while filtering, so
 * sums and cut-offs lose nothing to float rounding; only the final
 * distribution is written out as float. */
#include "smp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One candidate token: its probability (its logit before the softmax), id. */
typedef struct smp_cand {
    double p;
    int32_t id;
} smp_cand;

struct smp_ctx {
    int vocab;
    smp_cand *cand; /* [vocab] the filters' survivors first, cand[0..n)  */
    smp_cand *tmp;  /* [vocab] the merge sort's buffer                   */
    float *probs;   /* [vocab] smp_sample's distribution                 */
    int32_t *count; /* [vocab] occurrences in the output; 0 between calls */
    uint8_t *seen;  /* [vocab] repetition penalty applied; 0 between calls */
};

/* top-p looks at candidates in rounds of falling cut-offs (p_max / 16, / 256,
 * ...) and sorts only each round's new ones; after this many rounds it takes
 * everything left. */
enum { SMP_TOPP_ROUNDS = 8 };

smp_params smp_params_default(void)
{
    smp_params p = {
        .temperature = 1.0f,
        .top_k = 0,
        .top_p = 1.0f,
        .min_p = 0.0f,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .repetition_penalty = 1.0f,
        .seed = 0,
    };
    return p;
}

int smp_params_check(const smp_params *p, inf_err *err)
{
    if (!p)
        return inf_fail(err, INF_ERR_INVALID,
                        "sampling parameters are missing");
    /* Written as !(in range) so that NaN fails every check. */
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return inf_fail(err, INF_ERR_INVALID,
                        "temperature must be >= 0 and finite, got %g",
                        p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return inf_fail(err, INF_ERR_INVALID,
                        "top_p must be in (0, 1], got %g", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return inf_fail(err, INF_ERR_INVALID,
                        "min_p must be in [0, 1], got %g", p->min_p);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return inf_fail(err, INF_ERR_INVALID,
                        "presence_penalty must be in [-2, 2], got %g",
                        p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return inf_fail(err, INF_ERR_INVALID,
                        "frequency_penalty must be in [-2, 2], got %g",
                        p->frequency_penalty);
    if (!(p->repetition_penalty > 0.0f) || isinf(p->repetition_penalty))
        return inf_fail(err, INF_ERR_INVALID,
                        "repetition_penalty must be > 0 and finite, got %g",
                        p->repetition_penalty);
    return INF_OK;
}

/* ---- generator: xoshiro256** seeded through splitmix64 ---------------- */

static uint64_t smp_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t smp_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void smp_rng_seed(smp_rng *r, uint64_t seed)
{
    /* splitmix64 spreads any seed (0 included) over the state; it is a
     * bijection of its counter, so the state is never all zero. */
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = smp_splitmix64(&x);
}

uint64_t smp_rng_next(smp_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = smp_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = smp_rotl(s[3], 45);
    return out;
}

double smp_rng_uniform(smp_rng *r)
{
    return (double)(smp_rng_next(r) >> 11) * 0x1.0p-53;
}

/* ---- context ------------------------------------------------------------ */

int smp_create(int vocab, smp_ctx **out, inf_err *err)
{
    *out = NULL;
    if (vocab <= 0)
        return inf_fail(err, INF_ERR_INVALID,
                        "sampler vocabulary size must be > 0, got %d", vocab);
    smp_ctx *c = calloc(1, sizeof *c);
    if (!c)
        goto fail;
    c->vocab = vocab;
    c->cand = malloc((size_t)vocab * sizeof *c->cand);
    c->tmp = malloc((size_t)vocab * sizeof *c->tmp);
    c->probs = malloc((size_t)vocab * sizeof *c->probs);
    c->count = calloc((size_t)vocab, sizeof *c->count);
    c->seen = calloc((size_t)vocab, sizeof *c->seen);
    if (!c->cand || !c->tmp || !c->probs || !c->count || !c->seen)
        goto fail;
    *out = c;
    return INF_OK;
fail:
    smp_destroy(c);
    return inf_fail(err, INF_ERR_NOMEM,
                    "out of memory for a sampler over %d tokens", vocab);
}

void smp_destroy(smp_ctx *c)
{
    if (!c)
        return;
    free(c->cand);
    free(c->tmp);
    free(c->probs);
    free(c->count);
    free(c->seen);
    free(c);
}

/* ---- penalties ---------------------------------------------------------- */

/* Repetition penalty on each distinct id of toks not yet penalized. */
static void smp_repeat(smp_ctx *c, float r, const int32_t *toks, int n,
                       float *logits)
{
    for (int i = 0; i < n; i++) {
        int32_t t = toks[i];
        if (t < 0 || t >= c->vocab || c->seen[t])
            continue;
        c->seen[t] = 1;
        logits[t] = logits[t] > 0.0f ? logits[t] / r : logits[t] * r;
    }
}

/* Clears only the marks smp_repeat set: O(history), not O(vocab). */
static void smp_unsee(smp_ctx *c, const int32_t *toks, int n)
{
    for (int i = 0; i < n; i++)
        if (toks[i] >= 0 && toks[i] < c->vocab)
            c->seen[toks[i]] = 0;
}

void smp_apply_penalties(smp_ctx *c, const smp_params *p,
                         const smp_history *h, float *logits)
{
    int rep = p->repetition_penalty != 1.0f;
    int freq = p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
    if (!h || (!rep && !freq))
        return;
    /* vLLM's order: repetition on the raw logits, then frequency, then
     * presence, each as its own float operation. */
    if (rep) {
        smp_repeat(c, p->repetition_penalty, h->prompt, h->n_prompt, logits);
        smp_repeat(c, p->repetition_penalty, h->output, h->n_output, logits);
        smp_unsee(c, h->prompt, h->n_prompt);
        smp_unsee(c, h->output, h->n_output);
    }
    if (freq) {
        const int32_t *out = h->output;
        for (int i = 0; i < h->n_output; i++)
            if (out[i] >= 0 && out[i] < c->vocab)
                c->count[out[i]]++;
        /* The first occurrence of an id applies its whole count and zeroes
         * it, which both penalizes each id once and leaves count clean. */
        for (int i = 0; i < h->n_output; i++) {
            int32_t t = out[i];
            if (t < 0 || t >= c->vocab || c->count[t] == 0)
                continue;
            logits[t] -= p->frequency_penalty * (float)c->count[t];
            logits[t] -= p->presence_penalty;
            c->count[t] = 0;
        }
    }
}

/* ---- distribution ------------------------------------------------------- */

/* a ranks before b: more likely, or as likely and a lower id. A strict total
 * order, so selection and sorting give one answer whatever the algorithm. */
static int smp_before(const smp_cand *a, const smp_cand *b)
{
    return a->p > b->p || (a->p == b->p && a->id < b->id);
}

static void smp_swap(smp_cand *a, smp_cand *b)
{
    smp_cand t = *a;
    *a = *b;
    *b = t;
}

/* Sorts a[0..n) by rank: a merge sort through tmp[0..n), O(n log n) at
 * worst, O(n) on runs already in order (flat rows arrive in id order), and
 * no allocation (glibc's qsort mallocs for large arrays). */
static void smp_sort(smp_cand *a, smp_cand *tmp, int n)
{
    if (n <= 16) {
        for (int i = 1; i < n; i++) {
            smp_cand x = a[i];
            int j = i;
            for (; j > 0 && smp_before(&x, &a[j - 1]); j--)
                a[j] = a[j - 1];
            a[j] = x;
        }
        return;
    }
    int h = n / 2;
    smp_sort(a, tmp, h);
    smp_sort(a + h, tmp, n - h);
    if (smp_before(&a[h - 1], &a[h]))
        return;
    memcpy(tmp, a, (size_t)h * sizeof *a);
    /* Writing at i + (j - h) never passes the right half's reader j. */
    int i = 0, j = h, k = 0;
    while (i < h && j < n)
        a[k++] = smp_before(&a[j], &tmp[i]) ? a[j++] : tmp[i++];
    while (i < h)
        a[k++] = tmp[i++];
}

/* Largest logit, NaN ignored; -inf when there is none. */
static float smp_max(const float *logits, int n)
{
    float m = -INFINITY;
    for (int i = 0; i < n; i++)
        if (logits[i] > m) /* false for NaN */
            m = logits[i];
    return m;
}

/* exp((logit - m) / t) for cand[0..n), whose p holds the logit, then
 * normalized. Subtracting the max first keeps exp() in (0, 1]; -inf is 0. */
static int smp_softmax(smp_cand *cand, int n, double m, double t)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        cand[i].p = exp((cand[i].p - m) / t);
        sum += cand[i].p;
    }
    for (int i = 0; i < n; i++)
        cand[i].p /= sum;
    return n;
}

/* A NaN logit ranks as -inf: last, and probability 0. */
static double smp_key(float logit)
{
    return isnan(logit) ? -INFINITY : (double)logit;
}

/* Restores the heap below h[i]: every parent ranks after its children, so
 * h[0] is the worst of those kept. */
static void smp_sift(smp_cand *h, int k, int i)
{
    for (;;) {
        int w = 2 * i + 1;
        if (w >= k)
            return;
        if (w + 1 < k && smp_before(&h[w], &h[w + 1]))
            w++;
        if (!smp_before(&h[i], &h[w]))
            return;
        smp_swap(&h[i], &h[w]);
        i = w;
    }
}

/* Puts the k best logits (0 < k < n) in cand[0..k), in heap order: one pass
 * with a k-heap, O(n log k) at worst and close to O(n) on real rows, rather
 * than sorting the vocabulary. Ranking by logit is ranking by probability. */
static void smp_select(smp_cand *cand, const float *logits, int n, int k)
{
    for (int i = 0; i < k; i++) {
        cand[i].p = smp_key(logits[i]);
        cand[i].id = i;
    }
    for (int i = k / 2 - 1; i >= 0; i--)
        smp_sift(cand, k, i);
    for (int i = k; i < n; i++) {
        /* Ids arrive in increasing order, so a tie with the worst kept
         * loses: only a strictly larger logit gets in. */
        double x = smp_key(logits[i]);
        if (x > cand[0].p) {
            cand[0].p = x;
            cand[0].id = i;
            smp_sift(cand, k, 0);
        }
    }
}

/* Moves the candidates of cand[from..n) with p >= cut to cand[from..m);
 * returns m. */
static int smp_split(smp_cand *cand, int from, int n, double cut)
{
    int m = from;
    for (int i = from; i < n; i++)
        if (cand[i].p >= cut)
            smp_swap(&cand[i], &cand[m++]);
    return m;
}

/* Rescales cand[0..n) to sum 1; returns n. */
static int smp_renorm(smp_cand *cand, int n)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += cand[i].p;
    for (int i = 0; i < n; i++)
        cand[i].p /= sum;
    return n;
}

/* Keeps the shortest ranked prefix of cand[0..n) (normalized) whose mass
 * reaches top_p. Rather than sorting all n, it sorts in rounds: each round
 * takes the candidates above a lower cut-off, all of which rank after those
 * already sorted, so the running sum is exactly a full sort's, in the same
 * order, and a peaked row sorts only its head. */
static int smp_top_p(smp_cand *cand, smp_cand *tmp, int n, double top_p)
{
    double cut = 0.0;
    for (int i = 0; i < n; i++)
        if (cand[i].p > cut)
            cut = cand[i].p;
    double acc = 0.0;
    int done = 0; /* cand[0..done) ranked, summed into acc */
    for (int round = 1; done < n; round++) {
        cut = round < SMP_TOPP_ROUNDS ? cut / 16.0 : 0.0;
        int m = smp_split(cand, done, n, cut);
        smp_sort(cand + done, tmp, m - done);
        for (int i = done; i < m; i++) {
            acc += cand[i].p;
            if (acc >= top_p)
                return smp_renorm(cand, i + 1);
        }
        done = m;
    }
    /* Rounding left the whole mass a hair under top_p: keep everything. */
    return smp_renorm(cand, n);
}

/* Drops p < min_p * p_max, keeping the survivors' order. */
static int smp_min_p(smp_cand *cand, int n, double min_p)
{
    double pmax = 0.0;
    for (int i = 0; i < n; i++)
        if (cand[i].p > pmax)
            pmax = cand[i].p;
    double cut = min_p * pmax;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (cand[i].p >= cut)
            cand[m++] = cand[i];
    return smp_renorm(cand, m);
}

static void smp_one_hot(float *probs, int n, int32_t at)
{
    memset(probs, 0, (size_t)n * sizeof *probs);
    probs[at] = 1.0f;
}

void smp_probs(smp_ctx *c, const smp_params *p, const float *logits,
               float *probs)
{
    int vocab = c->vocab;
    float m = smp_max(logits, vocab);
    if (!(p->temperature > 0.0f) || !isfinite(m)) {
        smp_one_hot(probs, vocab, smp_argmax(logits, vocab));
        return;
    }
    int n;
    if (p->top_k > 0 && p->top_k < vocab) {
        /* Renormalizing over the top k equals exponentiating only them. */
        smp_select(c->cand, logits, vocab, p->top_k);
        n = p->top_k;
    } else {
        for (int i = 0; i < vocab; i++) {
            c->cand[i].p = smp_key(logits[i]);
            c->cand[i].id = i;
        }
        n = vocab;
    }
    n = smp_softmax(c->cand, n, m, p->temperature);
    if (p->top_p < 1.0f)
        n = smp_top_p(c->cand, c->tmp, n, p->top_p);
    if (p->min_p > 0.0f)
        n = smp_min_p(c->cand, n, p->min_p);
    if (n < vocab)
        memset(probs, 0, (size_t)vocab * sizeof *probs);
    for (int i = 0; i < n; i++)
        probs[c->cand[i].id] = (float)c->cand[i].p;
}

/* ---- drawing ------------------------------------------------------------ */

int32_t smp_draw(const float *probs, int n, double u)
{
    double total = 0.0;
    int32_t last = -1;
    for (int i = 0; i < n; i++)
        if (probs[i] > 0.0f) {
            total += probs[i];
            last = i;
        }
    if (last < 0)
        return smp_argmax(probs, n);
    double target = u * total;
    double acc = 0.0;
    for (int32_t i = 0; i < last; i++)
        if (probs[i] > 0.0f) {
            acc += probs[i];
            if (target < acc)
                return i;
        }
    /* Also where u * total rounded up to total itself. */
    return last;
}

int32_t smp_sample(smp_ctx *c, const smp_params *p, const smp_history *h,
                   smp_rng *rng, float *logits)
{
    smp_apply_penalties(c, p, h, logits);
    if (!(p->temperature > 0.0f))
        return smp_argmax(logits, c->vocab);
    smp_probs(c, p, logits, c->probs);
    return smp_draw(c->probs, c->vocab, smp_rng_uniform(rng));
}

int32_t smp_argmax(const float *x, int n)
{
    int32_t best = -1;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i]))
            continue;
        if (best < 0 || x[i] > x[best])
            best = i;
    }
    return best < 0 ? 0 : best;
}
