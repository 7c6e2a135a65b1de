/* Unit tests for hub_ without a network: which names are Hub ids, the
 * parsers of the Hub's headers and API answer, and the cache lookup (a
 * snapshot laid out as huggingface_hub lays it out is found offline, an
 * incomplete one is not). The downloads are checked end to end against a
 * mock Hub by tests/hub/check_hub.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/hub.h"
#include "app/hub_gguf.h"
#include "tests/tdir.h"

/* ORG/NAME is an id; paths, "..", extra slashes and odd bytes are not. */
static void test_hub_repo_ids(void **state)
{
    (void)state;
    assert_true(hub_is_repo_id("Qwen/Qwen2.5-0.5B-Instruct"));
    assert_true(hub_is_repo_id("meta-llama/Llama-3.2-1B"));
    assert_false(hub_is_repo_id("a/b/c"));
    assert_false(hub_is_repo_id("noslash"));
    assert_false(hub_is_repo_id("/abs/path"));
    assert_false(hub_is_repo_id("./rel"));
    assert_false(hub_is_repo_id("org/.."));
    assert_false(hub_is_repo_id("org/..x"));
    assert_false(hub_is_repo_id("org/a b"));
    assert_false(hub_is_repo_id("org/"));
    assert_false(hub_is_repo_id("tests/hub")); /* exists here: a directory wins */
    /* ORG/NAME:TAG, llama.cpp's -hf form, for GGUF files */
    assert_true(hub_is_repo_id("bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"));
    assert_true(hub_is_repo_id("org/repo:model-q8_0.gguf"));
    assert_false(hub_is_repo_id("org/repo:"));
    assert_false(hub_is_repo_id("org/repo:a/b"));
    assert_false(hub_is_repo_id("org/repo:x y"));
    assert_false(hub_is_repo_id("org:tag/x"));
    assert_false(hub_is_repo_id("org/repo:..x"));
    assert_true(hub_is_repo_id("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"));
    assert_true(hub_is_repo_id("huggingface.co/Qwen/Qwen2.5-0.5B-Instruct"));
    assert_false(hub_is_repo_id("hf.co/a/b/c"));
    assert_false(hub_is_repo_id("hf.co/"));
}

/* Header lines: ETags lose W/ and quotes; a new status line resets them. */
static void test_hub_header_lines(void **state)
{
    (void)state;
    hub_headers h;
    memset(&h, 0, sizeof h);
    const char *lines[] = {"HTTP/1.1 302 Found\r\n", "etag: W/\"abc\"\r\n",
                           "X-Linked-Etag: \"0123\"\r\n", "X-Linked-Size: 42\r\n",
                           "Content-Length: 7\r\n", "X-Repo-Commit: ffff\r\n"};
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        hub_header_line(&h, lines[i], strlen(lines[i]));
    assert_string_equal(h.etag, "abc");
    assert_string_equal(h.linked_etag, "0123");
    assert_string_equal(h.commit, "ffff");
    assert_int_equal(h.linked_size, 42);
    assert_int_equal(h.length, 7);
    hub_header_line(&h, "HTTP/1.1 200 OK\r\n", 17);
    assert_string_equal(h.etag, "");
    assert_int_equal(h.length, -1);
}

/* The API answer: the commit and only the files serving reads. */
static void test_hub_revision_parse(void **state)
{
    (void)state;
    const char *j = "{\"sha\":\"b24fabdb585ed68953e2cee9825b139bf3bc216b\",\"siblings\":["
                    "{\"rfilename\":\"config.json\"},{\"rfilename\":\"README.md\"},"
                    "{\"rfilename\":\"model-00001-of-00002.safetensors\"},"
                    "{\"rfilename\":\"onnx/model.safetensors\"},{\"rfilename\":\"tokenizer.json\"},"
                    "{\"rfilename\":\"pytorch_model.bin\"},"
                    "{\"rfilename\":\"mode..safetensors\"}]}";
    char commit[41], **files;
    int n;
    inf_err err = {0};
    assert_int_equal(hub_revision_parse(j, strlen(j), commit, &files, &n, &err), INF_OK);
    assert_string_equal(commit, "b24fabdb585ed68953e2cee9825b139bf3bc216b");
    assert_int_equal(n, 3);
    assert_string_equal(files[0], "config.json");
    assert_string_equal(files[1], "model-00001-of-00002.safetensors");
    assert_string_equal(files[2], "tokenizer.json");
    hub_files_free(files, n);
    const char *bad = "{\"sha\":\"main\",\"siblings\":[]}";
    assert_int_not_equal(hub_revision_parse(bad, strlen(bad), commit, &files, &n, &err), INF_OK);
    assert_null(files);
}

/* pick's files by name, joined with '|', for one assertion. */
static const char *picked(char *const *files, int n, const char *tag, char *buf, size_t cap,
                          inf_err *err)
{
    int pick[16], np = -1;
    buf[0] = '\0';
    if (hub_gguf_pick(files, n, tag, pick, &np, err))
        return NULL;
    for (int i = 0; i < np; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? "|" : "", files[pick[i]]);
    return buf;
}

/* Which GGUF files a tag picks from a repository's list: a whole file or
 * every part of one split, in order; Q4_K_M without a tag; the tag as a
 * word of the base name, any case; an exact file name; vision projectors
 * never; and an error naming what there is when nothing, or more than one
 * model, matches, or a split is missing a part. */
static void test_hub_gguf_pick(void **state)
{
    (void)state;
    char *files[] = {"README.md", "m-Q4_0.gguf", "m-Q8_0.gguf", "m-Q4_K_M-00002-of-00002.gguf",
                     "m-Q4_K_M-00001-of-00002.gguf", "mmproj-m-f16.gguf",
                     "Q5_K_M/m-Q5_K_M-00001-of-00002.gguf", "m-Q4_K_M_L.gguf", "m.safetensors"};
    const int n = sizeof files / sizeof *files;
    char buf[512];
    inf_err err = {0};
    assert_string_equal(picked(files, n, NULL, buf, sizeof buf, &err),
                        "m-Q4_K_M-00001-of-00002.gguf|m-Q4_K_M-00002-of-00002.gguf");
    assert_string_equal(picked(files, n, "q8_0", buf, sizeof buf, &err), "m-Q8_0.gguf");
    assert_string_equal(picked(files, n, "m-Q4_0.gguf", buf, sizeof buf, &err), "m-Q4_0.gguf");
    assert_string_equal(picked(files, n, "Q4_K_M_L", buf, sizeof buf, &err), "m-Q4_K_M_L.gguf");
    assert_null(picked(files, n, "Q4_K", buf, sizeof buf, &err));
    assert_non_null(strstr(err.msg, "no GGUF file matches the tag 'Q4_K'"));
    assert_non_null(strstr(err.msg, "m-Q4_0.gguf"));
    assert_null(strstr(err.msg, "mmproj"));
    assert_null(picked(files, n, "Q5_K_M", buf, sizeof buf, &err));
    assert_non_null(strstr(err.msg, "split in 2 files but part 2 is not there"));
    assert_null(picked(files, n, "mmproj-m-f16.gguf", buf, sizeof buf, &err));
    char *two[] = {"a-Q4_0.gguf", "b/a-Q4_0.gguf", "x-F16.gguf"};
    assert_null(picked(two, 3, "Q4_0", buf, sizeof buf, &err));
    assert_non_null(strstr(err.msg, "more than one GGUF model"));
    assert_string_equal(picked(two + 2, 1, NULL, buf, sizeof buf, &err), "x-F16.gguf");
    assert_null(picked(two, 3, NULL, buf, sizeof buf, &err));
    char *none[] = {"config.json", "model.safetensors"};
    assert_null(picked(none, 2, NULL, buf, sizeof buf, &err));
    assert_non_null(strstr(err.msg, "no GGUF file"));
}

static void put(const char *dir, const char *name, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A snapshot in the cache is used without a request (the endpoint is a
 * closed port and HF_HUB_OFFLINE is off); without its weights it is not,
 * except for a tokenizer alone (tokenizer_only), which needs only its own
 * files. */
static void test_hub_cache_lookup(void **state)
{
    tdir *d = *state;
    char repo[700], p[1024], q[1100];
    snprintf(repo, sizeof repo, "%s/models--org--m", d->path);
    const char *commit = "0123456789012345678901234567890123456789";
    snprintf(p, sizeof p, "%s/refs", repo);
    assert_int_equal(mkdir(repo, 0755), 0);
    assert_int_equal(mkdir(p, 0755), 0);
    put(p, "main", commit);
    snprintf(p, sizeof p, "%s/blobs", repo);
    assert_int_equal(mkdir(p, 0755), 0);
    put(p, "c0ffee", "{}");
    snprintf(p, sizeof p, "%s/snapshots", repo);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/snapshots/%s", repo, commit);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(q, sizeof q, "%s/config.json", p);
    assert_int_equal(symlink("../../blobs/c0ffee", q), 0);

    hub_config c;
    hub_config_from_env(&c);
    c.cache = d->path;
    c.endpoint = "http://127.0.0.1:9";
    c.token = NULL;
    c.offline = 1;
    char *dir = NULL;
    inf_err err = {0};
    /* no weights yet: offline, that is a clear error */
    assert_int_not_equal(hub_resolve(&c, "org/m", &dir, &err), INF_OK);
    assert_non_null(strstr(err.msg, "HF_HUB_OFFLINE"));
    /* a tokenizer alone needs tokenizer.json or tokenizer.model, not weights */
    c.tokenizer_only = 1;
    assert_int_not_equal(hub_resolve(&c, "org/m", &dir, &err), INF_OK);
    put(p, "tokenizer.json", "{}");
    assert_int_equal(hub_resolve(&c, "org/m", &dir, &err), INF_OK);
    assert_string_equal(dir, p);
    free(dir);
    c.tokenizer_only = 0;
    assert_int_not_equal(hub_resolve(&c, "org/m", &dir, &err), INF_OK);
    put(p, "model.safetensors", "x");
    c.offline = 0;
    assert_int_equal(hub_resolve(&c, "org/m", &dir, &err), INF_OK);
    assert_string_equal(dir, p);
    free(dir);
    /* a revision that is a commit needs no ref */
    c.revision = commit;
    assert_int_equal(hub_resolve(&c, "org/m", &dir, &err), INF_OK);
    free(dir);
    /* a directory that exists is itself; an id is its snapshot */
    const char *path;
    assert_int_equal(hub_local_path(&c, d->path, &path, &dir, &err), INF_OK);
    assert_ptr_equal(path, d->path);
    assert_null(dir);
    assert_int_equal(hub_local_path(&c, "org/m", &path, &dir, &err), INF_OK);
    assert_string_equal(path, p);
    assert_ptr_equal(path, dir);
    free(dir);
    /* not in the cache, and the Hub unreachable */
    c.revision = "main";
    assert_int_not_equal(hub_resolve(&c, "org/other", &dir, &err), INF_OK);
    assert_non_null(strstr(err.msg, "cannot reach the Hub"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hub_repo_ids),
        cmocka_unit_test(test_hub_header_lines),
        cmocka_unit_test(test_hub_revision_parse),
        cmocka_unit_test(test_hub_gguf_pick),
        cmocka_unit_test_setup_teardown(test_hub_cache_lookup, tdir_setup, tdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
