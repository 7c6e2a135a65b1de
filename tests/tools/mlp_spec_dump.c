/* mlp_spec_dump: the MLP speculator's stages on one hidden state and token,
 * for comparison with the numpy reference (tests/ref/mlp_spec_ref.py).
 *
 *   mlp_spec_dump --model DIR --hidden FILE --token T --k K --out FILE
 *                 [--target-vocab V] [--target-hidden D] [--repeat N]
 *
 * FILE holds the hidden state as raw float32; --out gets the stages' logits
 * as float32 [k][vocab]; the greedy tokens are printed, one line. A
 * checkpoint the loader refuses is exit 1 with its message. --repeat N runs
 * the k stages N more times and prints their mean time on stderr
 * ("us_per_proposal X"), the speculator's own cost for scripts/bench_spec. */
#include <stdio.h>
#include <stdlib.h>

#include "engine/spec_mlp.h"
#include "app/args.h"

int main(int argc, char **argv)
{
    const char *dir = NULL, *hid = NULL, *out = NULL;
    int token = 0, k = 1, tv = 0, th = 0, repeat = 0, help = 0;
    const arg_spec specs[] = {
        {"model", ARG_STR, &dir, "DIR", "speculator directory"},
        {"hidden", ARG_STR, &hid, "FILE", "hidden state, raw float32"},
        {"token", ARG_INT, &token, "T", "the token sampled at that position"},
        {"k", ARG_INT, &k, "K", "stages to run"},
        {"out", ARG_STR, &out, "FILE", "logits output"},
        {"target-vocab", ARG_INT, &tv, "V", "the target's vocabulary"},
        {"target-hidden", ARG_INT, &th, "D", "the target's hidden size"},
        {"repeat", ARG_INT, &repeat, "N", "time N more runs of the k stages"},
    };
    inf_err err = {0};
    if (args_parse(specs, 8, argc - 1, argv + 1, &help, &err) || !dir || (!help && (!hid || !out))) {
        fprintf(stderr, "mlp_spec_dump: %s\n", err.msg[0] ? err.msg : "--model, --hidden, --out");
        return 2;
    }
    spec_proposer *p = NULL;
    spec_mlp_config c = {.dir = dir, .target_vocab = tv, .target_hidden = th};
    if (spec_mlp_create(&c, &p, &err)) {
        fprintf(stderr, "mlp_spec_dump: %s\n", err.msg);
        return 1;
    }
    int rc = 1;
    FILE *f = fopen(hid, "rb");
    float *h = NULL, *lg = NULL;
    int32_t toks[32];
    long n = 0;
    if (f && !fseek(f, 0, SEEK_END) && (n = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET) &&
        (h = malloc((size_t)n)) && fread(h, 1, (size_t)n, f) == (size_t)n && k >= 1 &&
        k <= spec_mlp_n_predict(p)) {
        size_t V = (size_t)spec_mlp_vocab(p);
        lg = malloc(sizeof(float) * (size_t)k * V);
        FILE *o = lg ? fopen(out, "wb") : NULL;
        if (o)
            spec_mlp_run(p, h, token, k, toks, lg);
        if (o && repeat > 0) {
            double t0 = inf_now();
            for (int i = 0; i < repeat; i++)
                spec_mlp_run(p, h, token, k, toks, NULL);
            fprintf(stderr, "us_per_proposal %.2f\n", (inf_now() - t0) * 1e6 / repeat);
        }
        if (o && fwrite(lg, sizeof(float), (size_t)k * V, o) == (size_t)k * V) {
            for (int i = 0; i < k; i++)
                printf("%d%s", toks[i], i + 1 < k ? " " : "\n");
            rc = 0;
        }
        if (o)
            fclose(o);
    }
    if (rc)
        fprintf(stderr, "mlp_spec_dump: cannot read %s, write %s, or k %d is outside 1..n_predict\n",
                hid, out, k);
    if (f)
        fclose(f);
    free(h);
    free(lg);
    p->ops->destroy(p);
    return rc;
}
