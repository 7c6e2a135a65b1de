/* The MLP speculator as a proposer: fed the target's hidden states through
 * the seam (the CPU backend's want_hidden), it drafts, and greedy output
 * with it equals output without it (lossless), for concurrent requests
 * prefilled in chunks; the engine's adaptive disabling (no drafts at
 * disable_by_batch_size running, drafting paused while acceptance is below
 * the floor) holds for it; and at temperature 1 its sampled drafts and
 * proposal probabilities, verified, give exactly the target's distribution
 * (chi-square). The speculator is a random one the test writes in
 * the real checkpoint format (tied), sized for the fixture model
 * $INFERD_TEST_FIXTURES/tiny (skipped, saying so, when absent). Its
 * computation against the numpy reference is tests/ref/check_mlp_spec.py. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "cpu/backend.h"
#include "engine/eng.h"
#include "engine/spec_mlp.h"
#include "tests/mlp_fix.h"

typedef struct done_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
} done_wait;

static void on_notify(void *user, eng_req *r)
{
    (void)r;
    done_wait *w = user;
    pthread_mutex_lock(&w->mu);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

enum { NREQ = 3, OUT = 30 };

/* The engine's adaptive policy: 0 and 0 leave drafting always on. */
typedef struct policy {
    int disable_batch;   /* eng_config.spec_disable_batch   */
    double min_accept;   /* eng_config.spec_min_accept      */
} policy;

/* Greedy text of nreq (up to NREQ) concurrent requests, with the
 * speculator or without. */
static void run(const model *m, const tok *tk, spec_proposer *sp, met_registry *met,
                policy pol, int nreq, char texts[NREQ][4096])
{
    cpu_config cc = cpu_config_default();
    cc.n_threads = 2;
    cc.max_tokens = 16;
    cc.max_context = 128;
    cc.num_blocks = 64;
    be_backend *be = NULL;
    inf_err err = {0};
    assert_int_equal(cpu_backend_create(m, &cc, &be, &err), INF_OK);
    done_wait w;
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    eng_config ec = {.max_num_seqs = 8, .max_num_batched_tokens = 16, .max_model_len = 128,
                     .block_size = 16, .num_blocks = 64, .met = met, .spec = sp,
                     .spec_k = sp ? 3 : 0, .spec_disable_batch = pol.disable_batch,
                     .spec_min_accept = pol.min_accept, .notify = on_notify, .notify_user = &w};
    eng *e = NULL;
    if (eng_create(&ec, m, tk, be, &e, &err))
        fail_msg("eng_create: %s", err.msg);
    eng_req *r[NREQ];
    for (int i = 0; i < nreq; i++) {
        int32_t prompt[24];
        prompt[0] = 1;
        for (int j = 1; j < 24; j++)
            prompt[j] = (int32_t)(3 + (j * 31 + i * 17) % (m->cfg.vocab_size - 3));
        eng_params p = {.sampling = smp_params_default(), .max_tokens = OUT, .ignore_eos = 1,
                        .logprobs = -1};
        p.sampling.temperature = 0;
        assert_int_equal(eng_req_create(prompt, 24, &p, &r[i], &err), INF_OK);
        assert_int_equal(eng_submit(e, r[i], 0, &err), INF_OK);
    }
    for (int i = 0; i < nreq; i++) {
        eng_out o = {0};
        pthread_mutex_lock(&w.mu);
        while (!eng_req_finished(r[i]))
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        eng_req_take(r[i], &o);
        assert_int_equal(o.finish, ENG_FINISH_LENGTH);
        assert_int_equal(o.n_output, OUT);
        snprintf(texts[i], 4096, "%s", o.text ? o.text : "");
        eng_out_free(&o);
        eng_req_unref(r[i]);
    }
    eng_destroy(e);
    be_destroy(be);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
}

/* The tiny fixture model, its tokenizer, a random speculator for it
 * (written to $INFERD_TEST_TMP/name; its drafts are nearly all rejected) and
 * the requests' greedy text without speculation (off). */
typedef struct rand_spec {
    model *m;
    tok *tk;
    spec_proposer *sp;
    char sdir[700];
    char off[NREQ][4096];
} rand_spec;

static void rand_spec_open(rand_spec *x, const char *name)
{
    const char *fx = getenv("INFERD_TEST_FIXTURES");
    char dir[600], cfgp[700];
    snprintf(dir, sizeof dir, "%s/tiny", fx ? fx : "");
    snprintf(cfgp, sizeof cfgp, "%s/config.json", dir);
    if (!fx || access(cfgp, R_OK)) {
        print_message("skipped: $INFERD_TEST_FIXTURES/tiny not present (`make unit` makes it)\n");
        skip();
    }
    const char *tmp = getenv("INFERD_TEST_TMP");
    inf_err err = {0};
    memset(x, 0, sizeof *x);
    snprintf(x->sdir, sizeof x->sdir, "%s/%s", tmp ? tmp : "/tmp", name);
    assert_int_equal(model_load(dir, &x->m, &err), INF_OK);
    assert_int_equal(tok_create(dir, &x->tk, &err), INF_OK);
    mlp_fix_write(x->sdir, x->m->cfg.vocab_size, x->m->cfg.hidden_size, 32, 3, 1, 0.2f, 99);
    spec_mlp_config sc = {.dir = x->sdir, .target_vocab = x->m->cfg.vocab_size,
                          .target_hidden = x->m->cfg.hidden_size};
    if (spec_mlp_create(&sc, &x->sp, &err))
        fail_msg("spec_mlp_create: %s", err.msg);
    run(x->m, x->tk, NULL, NULL, (policy){0, 0}, NREQ, x->off);
}

static void rand_spec_close(rand_spec *x)
{
    x->sp->ops->destroy(x->sp);
    tok_destroy(x->tk);
    model_destroy(x->m);
}

static void test_spec_mlp_lossless_and_drafting(void **state)
{
    (void)state;
    static rand_spec x;
    rand_spec_open(&x, "mlp_spec_tiny");
    inf_err err = {0};
    assert_int_equal(spec_mlp_n_predict(x.sp), 3);
    met_registry *met = NULL;
    met_config mc = {.model_name = "tiny", .max_model_len = 128, .spec_k = 3};
    assert_int_equal(met_create(&mc, &met, &err), INF_OK);
    static char on[NREQ][4096];
    run(x.m, x.tk, x.sp, met, (policy){0, 0}, NREQ, on);
    for (int i = 0; i < NREQ; i++)
        assert_string_equal(on[i], x.off[i]);
    met_snap s;
    met_snapshot(met, &s);
    print_message("mlp speculator (random weights): %llu drafted, %llu accepted\n",
                  (unsigned long long)s.counters[MET_SPEC_DRAFT_TOKENS],
                  (unsigned long long)s.counters[MET_SPEC_ACCEPTED_TOKENS]);
    assert_true(s.counters[MET_SPEC_DRAFT_TOKENS] > 0);
    /* a speculator for another vocabulary or hidden size is refused */
    spec_mlp_config sc = {.dir = x.sdir, .target_vocab = x.m->cfg.vocab_size + 1,
                          .target_hidden = x.m->cfg.hidden_size};
    spec_proposer *bad = NULL;
    assert_int_equal(spec_mlp_create(&sc, &bad, &err), INF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "vocabulary"));
    met_destroy(met);
    rand_spec_close(&x);
}

/* Drafts and drafted tokens verified in a run of nreq requests of x's
 * under policy pol; the greedy text must still be x's off. */
static uint64_t drafted(const rand_spec *x, policy pol, int nreq, uint64_t *drafts)
{
    met_registry *met = NULL;
    inf_err err = {0};
    met_config mc = {.model_name = "tiny", .max_model_len = 128, .spec_k = 3};
    assert_int_equal(met_create(&mc, &met, &err), INF_OK);
    static char on[NREQ][4096];
    run(x->m, x->tk, x->sp, met, pol, nreq, on);
    for (int i = 0; i < nreq; i++)
        assert_string_equal(on[i], x->off[i]);
    met_snap s;
    met_snapshot(met, &s);
    met_destroy(met);
    if (drafts)
        *drafts = s.counters[MET_SPEC_DRAFTS];
    return s.counters[MET_SPEC_DRAFT_TOKENS];
}

/* Adaptive disabling, as for the other proposers: with disable_by_batch_size
 * 1 (every step has a sequence running) nothing is drafted, with NREQ + 1
 * drafting goes on; with an acceptance floor a random speculator, whose
 * drafts are nearly always rejected, pauses (4, 8, 16 steps), so it drafts
 * well under a third of what it drafts without the floor. Text unchanged. */
static void test_spec_mlp_adaptive_disabling(void **state)
{
    (void)state;
    static rand_spec x;
    rand_spec_open(&x, "mlp_spec_tiny_policy");
    uint64_t always = drafted(&x, (policy){0, 0}, NREQ, NULL);
    uint64_t by_batch_off = drafted(&x, (policy){1, 0}, NREQ, NULL);
    uint64_t by_batch_on = drafted(&x, (policy){NREQ + 1, 0}, NREQ, NULL);
    uint64_t floored = drafted(&x, (policy){0, 0.99}, NREQ, NULL);
    print_message("drafted tokens: always %llu; disable_by_batch_size 1: %llu, %d: %llu; "
                  "acceptance floor 0.99: %llu\n", (unsigned long long)always,
                  (unsigned long long)by_batch_off, NREQ + 1, (unsigned long long)by_batch_on,
                  (unsigned long long)floored);
    assert_true(always > 0);
    assert_int_equal(by_batch_off, 0);
    assert_true(by_batch_on > 0);
    assert_true(floored > 0);           /* it probes again after each pause */
    assert_true(floored * 3 < always);
    rand_spec_close(&x);
}

/* The draft length: a random speculator's drafts are nearly all rejected.
 * Among other requests each one's length then falls to what was accepted
 * plus one (mostly 1); a lone request drafts the full k = 3 every step but
 * where max_tokens leaves less room (the last two). Text unchanged. */
static void test_spec_mlp_draft_length(void **state)
{
    (void)state;
    static rand_spec x;
    rand_spec_open(&x, "mlp_spec_tiny_length");
    uint64_t d1, dn;
    uint64_t t1 = drafted(&x, (policy){0, 0}, 1, &d1);
    uint64_t tn = drafted(&x, (policy){0, 0}, NREQ, &dn);
    print_message("alone: %llu drafts of %llu tokens; %d requests: %llu drafts of %llu tokens\n",
                  (unsigned long long)d1, (unsigned long long)t1, NREQ,
                  (unsigned long long)dn, (unsigned long long)tn);
    assert_true(d1 > 0 && dn > 0);
    /* alone: 3 a draft, less only where the room (OUT - outputs - 1) is under 3 */
    assert_true(t1 <= 3 * d1 && t1 + 3 >= 3 * d1);
    /* among others, rejections shorten the drafts: well under 3 on average */
    assert_true(2 * tn < 3 * dn);
    rand_spec_close(&x);
}

/* 0.999 quantiles of chi-square (standard tables), by degrees of freedom. */
static double chi2_999(int df)
{
    switch (df) {
    case 8: return 26.124;
    case 15: return 37.697;
    case 35: return 66.619;
    default: fail_msg("no chi-square quantile for %d degrees of freedom", df);
    }
    return 0;
}

/* Speculative sampling with the MLP speculator's own sampled drafts and
 * proposal probabilities: the first two tokens the verifier emits are
 * distributed as the target's (rows p0, p1: a target whose row depends only
 * on the position), checked by chi-square over the V x V joint, at
 * temperature 1 and at temperature 0.7 with top-k 4 (the request's
 * processing applied to both sides). A round that emits one token proposes
 * again from the new position, as the engine does. */
static void test_spec_mlp_verify_preserves_target_distribution(void **state)
{
    (void)state;
    enum { V = 6, D = 8, I = 8, K = 3, N = 100000 };
    const char *tmp = getenv("INFERD_TEST_TMP");
    char sdir[700];
    snprintf(sdir, sizeof sdir, "%s/mlp_spec_chi2", tmp ? tmp : "/tmp");
    mlp_fix_write(sdir, V, D, I, K, 1, 1.5f, 99);
    spec_proposer *sp = NULL;
    inf_err err = {0};
    spec_mlp_config sc = {.dir = sdir, .target_vocab = V, .target_hidden = D};
    if (spec_mlp_create(&sc, &sp, &err))
        fail_msg("spec_mlp_create: %s", err.msg);
    smp_ctx *smp = NULL;
    assert_int_equal(smp_create(V, &smp, &err), INF_OK);
    const float logits[K + 1][V] = {{0.2f, 1.1f, -0.4f, 0.9f, 0.5f, -0.2f},
                                    {0.6f, -0.3f, 0.8f, 0.1f, 1.0f, 0.0f},
                                    {-0.5f, 0.4f, 0.3f, 1.2f, 0.2f, 0.7f},
                                    {0.0f, 0.0f, 0.5f, -0.5f, 0.3f, 0.9f}};
    float hidden[D];
    unsigned hs = 5;
    for (int i = 0; i < D; i++)
        hidden[i] = mlp_fix_gauss(&hs);
    for (int mode = 0; mode < 2; mode++) {
        smp_params par = smp_params_default();
        par.temperature = mode ? 0.7f : 1.0f;
        par.top_k = mode ? 4 : 0;
        par.seed = 3 + (uint64_t)mode;
        float p[K + 1][V], q[K * V], scratch[V];
        for (int j = 0; j <= K; j++)
            smp_probs(smp, &par, logits[j], p[j]);
        smp_rng rng;
        smp_rng_seed(&rng, 41 + (uint64_t)mode);
        int32_t toks[8] = {1};
        spec_seq seq = {.tokens = toks, .n_tokens = 1, .n_prompt = 1, .hidden = hidden};
        spec_seq *seqs = &seq;
        static int count[V][V];
        memset(count, 0, sizeof count);
        int accepted_any = 0;
        for (int n = 0; n < N; n++) {
            int32_t emitted[2];
            int n_em = 0;
            while (n_em < 2) { /* a round proposes from the position reached */
                int k = K - n_em, kk = k;
                int32_t d[K];
                assert_int_equal(sp->ops->propose(sp, &seqs, 1, &par, K, &kk, d, q, &err),
                                 INF_OK);
                assert_int_equal(kk, k);
                spec_result r = spec_verify(k, d, &p[n_em][0], q, V, &rng, scratch);
                accepted_any += r.accepted > 0;
                for (int i = 0; i < r.accepted && n_em < 2; i++)
                    emitted[n_em++] = d[i];
                if (n_em < 2)
                    emitted[n_em++] = r.next;
                toks[0] = emitted[n_em - 1];
            }
            count[emitted[0]][emitted[1]]++;
        }
        double x = 0;
        int cells = 0;
        for (int a = 0; a < V; a++)
            for (int b = 0; b < V; b++) {
                double e = (double)N * p[0][a] * p[1][b];
                if (e == 0) { /* outside top-k: never emitted */
                    assert_int_equal(count[a][b], 0);
                    continue;
                }
                x += (count[a][b] - e) * (count[a][b] - e) / e;
                cells++;
            }
        print_message("mode %d: chi-square %.1f over %d cells (0.999 quantile %.1f), %d rounds "
                      "accepted a draft\n", mode, x, cells, chi2_999(cells - 1), accepted_any);
        assert_true(accepted_any > N / 10); /* the drafts were really used */
        if (x > chi2_999(cells - 1))
            fail_msg("mode %d: chi-square %.1f > %.1f", mode, x, chi2_999(cells - 1));
        sp->ops->release(sp, &seq);
    }
    smp_destroy(smp);
    sp->ops->destroy(sp);
}

/* A host "device" for the proposer's device path (spec_mlp_device, what
 * cuda/mlp.c gives it on a GPU): stage i over n rows from the weights in
 * double, the state kept between stages as a device keeps it. It records
 * its calls: the rows, and the tokens each stage was fed. */
typedef struct host_dev {
    spec_mlp_weights w;
    double s[8][64], t[64];
    int calls, rows[8];
    int32_t fed[8][8];   /* [stage][row] */
} host_dev;

static int hd_stage(void *user, int i, int n, const float *s0, const int32_t *tok, float *logits,
                    inf_err *err)
{
    (void)err;
    host_dev *h = user;
    const spec_mlp_stage_w *w = &h->w.stage[i];
    int E = h->w.emb_dim, I = h->w.inner, in = i == 0 ? E : I;
    assert_true(n <= 8 && i < 8 && E <= 64 && I <= 64);
    h->rows[h->calls++] = n;
    for (int r = 0; r < n; r++) {
        h->fed[i][r] = tok[r];
        if (i == 0)
            for (int c = 0; c < E; c++)
                h->s[r][c] = s0[(size_t)r * E + c];
        double ss = 0;
        for (int j = 0; j < I; j++) {
            double acc = 0;
            for (int c = 0; c < in; c++)
                acc += (double)w->proj[(size_t)j * in + c] * h->s[r][c];
            h->t[j] = acc * h->w.sw + (double)w->emb[(size_t)tok[r] * I + j] * h->w.ew;
            ss += h->t[j] * h->t[j];
        }
        double inv = 1.0 / sqrt(ss / I + 1e-6);
        for (int j = 0; j < I; j++) {
            double v = h->t[j] * inv * w->ln_w[j] + w->ln_b[j];
            h->s[r][j] = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
        }
        for (int v = 0; v < h->w.vocab; v++) {
            double acc = 0;
            for (int j = 0; j < I; j++)
                acc += (double)w->head[(size_t)v * I + j] * h->s[r][j];
            logits[(size_t)r * h->w.vocab + v] = (float)acc;
        }
    }
    return INF_OK;
}

static void hd_destroy(void *user) { (void)user; }

/* The proposer's device path (every drafting sequence's stage j in one
 * call, each row's token picked on the host and fed to stage j + 1) drafts
 * what the host path drafts, greedy and sampled, for sequences of different
 * k, one without a hidden state among them; tied and untied. */
static void test_spec_mlp_device_path_drafts_as_host(void **state)
{
    (void)state;
    enum { V = 40, D = 16, I = 24, K = 3, NS = 4 };
    const char *tmp = getenv("INFERD_TEST_TMP");
    for (int tied = 0; tied < 2; tied++) {
        char sdir[700];
        snprintf(sdir, sizeof sdir, "%s/mlp_spec_dev%d", tmp ? tmp : "/tmp", tied);
        mlp_fix_write(sdir, V, D, I, K, tied, 1.0f, 7);
        spec_proposer *sp[2] = {NULL, NULL};
        inf_err err = {0};
        spec_mlp_config sc = {.dir = sdir, .target_vocab = V, .target_hidden = D};
        for (int d = 0; d < 2; d++)
            if (spec_mlp_create(&sc, &sp[d], &err))
                fail_msg("spec_mlp_create: %s", err.msg);
        static host_dev hd;
        memset(&hd, 0, sizeof hd);
        spec_mlp_weights_of(sp[1], &hd.w);
        spec_mlp_device dev = {.user = &hd, .stage = hd_stage, .destroy = hd_destroy};
        spec_mlp_set_device(sp[1], &dev);
        float hidden[NS][D];
        unsigned hs = 11 + (unsigned)tied;
        for (int i = 0; i < NS; i++)
            for (int c = 0; c < D; c++)
                hidden[i][c] = mlp_fix_gauss(&hs);
        int32_t toks[NS][2] = {{1, 5}, {1, 9}, {1, 17}, {1, 33}};
        smp_params par[NS];
        for (int i = 0; i < NS; i++) {
            par[i] = smp_params_default();
            par[i].temperature = i % 2 ? 0.8f : 0.0f;
            par[i].seed = 100 + (uint64_t)i;
        }
        int32_t drafts[2][NS * K];
        float probs[2][NS * K * V];
        int k[2][NS];
        spec_seq seq[2][NS];
        for (int d = 0; d < 2; d++) {
            spec_seq *ptr[NS];
            for (int i = 0; i < NS; i++) {
                seq[d][i] = (spec_seq){.tokens = toks[i], .n_tokens = 2, .n_prompt = 1,
                                       .hidden = i == 2 ? NULL : hidden[i]};
                ptr[i] = &seq[d][i];
                k[d][i] = i == 3 ? 1 : K + 2; /* capped at n_predict */
            }
            memset(drafts[d], 0xff, sizeof drafts[d]);
            assert_int_equal(sp[d]->ops->propose(sp[d], ptr, NS, par, K, k[d], drafts[d],
                                                 probs[d], &err), INF_OK);
        }
        int want_k[NS] = {K, K, 0, 1};
        for (int i = 0; i < NS; i++) {
            assert_int_equal(k[0][i], want_k[i]);
            assert_int_equal(k[1][i], want_k[i]);
            for (int j = 0; j < want_k[i]; j++) {
                assert_int_equal(drafts[1][i * K + j], drafts[0][i * K + j]);
                if (par[i].temperature > 0)
                    for (int v = 0; v < V; v++)
                        assert_true(fabsf(probs[1][(i * K + j) * V + v] -
                                          probs[0][(i * K + j) * V + v]) < 1e-5f);
            }
        }
        /* one call per stage, over the three sequences with a hidden state;
         * stage j + 1 was fed stage j's drafts */
        assert_int_equal(hd.calls, K);
        for (int j = 0; j < K; j++)
            assert_int_equal(hd.rows[j], 3);
        int row_of[NS] = {0, 1, -1, 2};
        for (int i = 0; i < NS; i++) {
            if (row_of[i] < 0)
                continue;
            assert_int_equal(hd.fed[0][row_of[i]], toks[i][1]);
            for (int j = 1; j < want_k[i]; j++)
                assert_int_equal(hd.fed[j][row_of[i]], drafts[0][i * K + j - 1]);
        }
        for (int d = 0; d < 2; d++) {
            for (int i = 0; i < NS; i++)
                sp[d]->ops->release(sp[d], &seq[d][i]);
            sp[d]->ops->destroy(sp[d]);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_mlp_lossless_and_drafting),
        cmocka_unit_test(test_spec_mlp_adaptive_disabling),
        cmocka_unit_test(test_spec_mlp_draft_length),
        cmocka_unit_test(test_spec_mlp_verify_preserves_target_distribution),
        cmocka_unit_test(test_spec_mlp_device_path_drafts_as_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
