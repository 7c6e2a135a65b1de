/* Unit tests for st_ (safetensors): each test writes its own tiny files into
 * a fresh directory under $INFERD_TEST_TMP (or /tmp) and removes it after. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/st.h"
#include "tests/tdir.h"

/* ---- fixture: one temporary directory per test (tests/tdir.h) ---- */

static void pjoin(char *out, size_t cap, const char *dir, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

/* ---- writers ---- */

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(p, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

/* A file with header length hlen (as written, even if wrong), the header
 * text, then data_len bytes of data (zeros when data is NULL). */
static void write_raw(const char *path, uint64_t hlen, const char *header, const void *data, size_t data_len)
{
    size_t hl = strlen(header);
    size_t n = 8 + hl + data_len;
    unsigned char *buf = calloc(1, n);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (data)
        memcpy(buf + 8 + hl, data, data_len);
    write_bytes(path, buf, n);
    free(buf);
}

static void write_header(const char *path, const char *header, size_t data_len)
{
    write_raw(path, strlen(header), header, NULL, data_len);
}

/* One tensor for write_st: data is nbytes long (zeros when NULL). */
typedef struct wt {
    const char *name;
    const char *dtype;
    int ndim;
    int64_t shape[4];
    const void *data;
    size_t nbytes;
} wt;

/* A well-formed file holding ts back to back, with a __metadata__ entry. */
static void write_st(const char *path, const wt *ts, int n)
{
    size_t cap = 256 + (size_t)n * 256, len = 0, off = 0;
    char *h = malloc(cap);
    assert_non_null(h);
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", ts[i].name,
                                ts[i].dtype);
        for (int d = 0; d < ts[i].ndim; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "", (long long)ts[i].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", off, off + ts[i].nbytes);
        off += ts[i].nbytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    assert_true(len < cap);
    unsigned char *data = calloc(1, off + 1);
    assert_non_null(data);
    off = 0;
    for (int i = 0; i < n; i++) {
        if (ts[i].data)
            memcpy(data + off, ts[i].data, ts[i].nbytes);
        off += ts[i].nbytes;
    }
    write_raw(path, len, h, data, off);
    free(data);
    free(h);
}

/* Opens path expecting failure with code; the message must contain want1
 * and want2 (either may be NULL). */
static void expect_open_fail(const char *path, int code, const char *want1, const char *want2)
{
    st_set *s = (st_set *)1;
    inf_err err = {0, ""};
    int rc = st_open_file(path, &s, &err);
    if (rc != code || (want1 && !strstr(err.msg, want1)) || (want2 && !strstr(err.msg, want2)))
        print_error("rc %d (want %d), message: %s\n", rc, code, err.msg);
    assert_int_equal(rc, code);
    assert_int_equal(err.code, code);
    assert_null(s);
    assert_null(strchr(err.msg, '\n'));
    if (want1)
        assert_non_null(strstr(err.msg, want1));
    if (want2)
        assert_non_null(strstr(err.msg, want2));
}

static void expect_dir_fail(const char *dir, int code, const char *want1, const char *want2)
{
    st_set *s = (st_set *)1;
    inf_err err = {0, ""};
    int rc = st_open_dir(dir, &s, &err);
    if (rc != code || (want1 && !strstr(err.msg, want1)) || (want2 && !strstr(err.msg, want2)))
        print_error("rc %d (want %d), message: %s\n", rc, code, err.msg);
    assert_int_equal(rc, code);
    assert_null(s);
    assert_null(strchr(err.msg, '\n'));
    if (want1)
        assert_non_null(strstr(err.msg, want1));
    if (want2)
        assert_non_null(strstr(err.msg, want2));
}

/* ---- valid files ---- */

/* f32, f16 and bf16 tensors read back bit-exact; other dtypes map to NONE
 * with their name kept; __metadata__ is not a tensor; a 0-d scalar works. */
static void test_st_open_valid_single(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "model.safetensors");
    const float f32[6] = {1.5f, -2.25f, 0.0f, 3.0e-5f, 65504.0f, -1.0e10f};
    const uint16_t f16[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};  /* 1, -2, 2^-24, 65504 */
    const float f16_want[4] = {1.0f, -2.0f, 5.9604644775390625e-8f, 65504.0f};
    const uint16_t bf16[4] = {0x3f80, 0xc0a0, 0x3e20, 0x4049}; /* 1, -5, 0.15625, 3.140625 */
    const float bf16_want[4] = {1.0f, -5.0f, 0.15625f, 3.140625f};
    const int64_t i64[3] = {7, -8, 9};
    const float scalar = 42.0f;
    const wt ts[] = {
        {"a.f32", "F32", 2, {2, 3}, f32, sizeof f32},
        {"b.f16", "F16", 1, {4}, f16, sizeof f16},
        {"c.bf16", "BF16", 2, {2, 2}, bf16, sizeof bf16},
        {"d.i64", "I64", 1, {3}, i64, sizeof i64},
        {"e.scalar", "F32", 0, {0}, &scalar, sizeof scalar},
    };
    write_st(path, ts, 5);

    st_set *s = NULL;
    inf_err err = {0, ""};
    assert_int_equal(st_open_file(path, &s, &err), INF_OK);
    assert_int_equal(st_count(s), 5);
    assert_null(st_find(s, "__metadata__"));
    assert_null(st_find(s, "nope"));
    assert_int_equal(st_data_bytes(s), sizeof f32 + sizeof f16 + sizeof bf16 + sizeof i64 + sizeof scalar);

    const st_tensor *t = st_find(s, "a.f32");
    assert_non_null(t);
    assert_int_equal(t->dtype, INF_F32);
    assert_string_equal(t->dtype_name, "F32");
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->nbytes, sizeof f32);
    assert_string_equal(t->file, path);
    for (int i = 0; i < 6; i++) {
        float v;
        memcpy(&v, (const char *)t->data + 4 * i, 4);
        assert_true(v == f32[i]);
    }

    t = st_find(s, "b.f16");
    assert_non_null(t);
    assert_int_equal(t->dtype, INF_F16);
    for (int i = 0; i < 4; i++) {
        uint16_t h;
        memcpy(&h, (const char *)t->data + 2 * i, 2);
        assert_true(inf_f16_to_f32(h) == f16_want[i]);
    }

    t = st_find(s, "c.bf16");
    assert_non_null(t);
    assert_int_equal(t->dtype, INF_BF16);
    assert_string_equal(t->dtype_name, "BF16");
    for (int i = 0; i < 4; i++) {
        uint16_t h;
        memcpy(&h, (const char *)t->data + 2 * i, 2);
        assert_true(inf_bf16_to_f32(h) == bf16_want[i]);
    }

    t = st_find(s, "d.i64");
    assert_non_null(t);
    assert_int_equal(t->dtype, INF_DTYPE_NONE);
    assert_string_equal(t->dtype_name, "I64");
    assert_int_equal(t->nbytes, 24);
    assert_memory_equal(t->data, i64, sizeof i64);

    t = st_find(s, "e.scalar");
    assert_non_null(t);
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->nbytes, 4);

    /* st_get walks every tensor exactly once */
    int seen = 0;
    for (int i = 0; i < st_count(s); i++) {
        const st_tensor *g = st_get(s, i);
        assert_non_null(g);
        assert_ptr_equal(st_find(s, g->name), g);
        seen++;
    }
    assert_int_equal(seen, 5);
    assert_null(st_get(s, 5));
    assert_null(st_get(s, -1));
    st_destroy(s);
}

/* Data at odd offsets (after a 3-byte U8 tensor) is accepted and reads back. */
static void test_st_open_unaligned_ok(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "u.safetensors");
    const uint8_t u8[3] = {1, 2, 3};
    const float v[2] = {0.5f, -0.75f};
    const wt ts[] = {{"bytes", "U8", 1, {3}, u8, 3}, {"w", "F32", 1, {2}, v, sizeof v}};
    write_st(path, ts, 2);
    st_set *s = NULL;
    inf_err err = {0, ""};
    assert_int_equal(st_open_file(path, &s, &err), INF_OK);
    const st_tensor *t = st_find(s, "w");
    assert_non_null(t);
    float got[2];
    memcpy(got, t->data, sizeof got);
    assert_true(got[0] == 0.5f && got[1] == -0.75f);
    assert_ptr_equal((const char *)t->data, (const char *)st_find(s, "bytes")->data + 3);
    st_destroy(s);
}

/* Empty tensors (a zero dimension, zero bytes) are valid and overlap nothing. */
static void test_st_open_empty_tensor_ok(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "e.safetensors");
    write_header(path,
                 "{\"e\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[0,0]},"
                 "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                 4);
    st_set *s = NULL;
    inf_err err = {0, ""};
    assert_int_equal(st_open_file(path, &s, &err), INF_OK);
    assert_int_equal(st_find(s, "e")->nbytes, 0);
    st_destroy(s);
}

/* st_find finds every one of many tensors, whatever order they were written. */
static void test_st_find_many_all_found(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "many.safetensors");
    enum { N = 500 };
    wt *ts = calloc(N, sizeof *ts);
    char (*names)[32] = calloc(N, sizeof *names);
    float *vals = calloc(N, sizeof *vals);
    assert_true(ts && names && vals);
    for (int i = 0; i < N; i++) {
        int k = (i * 7919) % N; /* not in name order */
        snprintf(names[i], sizeof names[i], "layer.%d.w", k);
        vals[i] = (float)k;
        ts[i] = (wt){names[i], "F32", 1, {1}, &vals[i], 4};
    }
    write_st(path, ts, N);
    st_set *s = NULL;
    inf_err err = {0, ""};
    assert_int_equal(st_open_file(path, &s, &err), INF_OK);
    assert_int_equal(st_count(s), N);
    for (int k = 0; k < N; k++) {
        char name[32];
        snprintf(name, sizeof name, "layer.%d.w", k);
        const st_tensor *t = st_find(s, name);
        assert_non_null(t);
        float v;
        memcpy(&v, t->data, 4);
        assert_true(v == (float)k);
    }
    assert_null(st_find(s, "layer.500.w"));
    st_destroy(s);
    free(vals);
    free(names);
    free(ts);
}

/* ---- malformed files: one-line messages naming the file and tensor ---- */

/* A file shorter than the 8-byte length prefix is a format error. */
static void test_st_open_short_file(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "short.safetensors");
    write_bytes(path, "\x01\x02\x03\x04\x05", 5);
    expect_open_fail(path, INF_ERR_FORMAT, "short.safetensors", "5 bytes");
}

/* A header length larger than the rest of the file is a format error. */
static void test_st_open_header_len_beyond_file(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "long.safetensors");
    write_raw(path, 4096, "{}", NULL, 0);
    expect_open_fail(path, INF_ERR_FORMAT, "long.safetensors", "4096");
}

/* A header length near 2^64 must not wrap around any size arithmetic. */
static void test_st_open_header_len_huge(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "huge.safetensors");
    write_raw(path, UINT64_MAX - 3, "{}", NULL, 0);
    expect_open_fail(path, INF_ERR_FORMAT, "huge.safetensors", "header length");
}

/* A header that is not JSON (cut short) is a format error. */
static void test_st_open_invalid_json(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "bad.safetensors");
    write_header(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],", 4);
    expect_open_fail(path, INF_ERR_FORMAT, "bad.safetensors", "not valid JSON");
}

/* A JSON header that is not an object is a format error. */
static void test_st_open_header_not_object(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "arr.safetensors");
    write_header(path, "[1,2,3]", 0);
    expect_open_fail(path, INF_ERR_FORMAT, "arr.safetensors", "not a JSON object");
}

/* Offsets reaching past the data region name the tensor and the region size. */
static void test_st_open_offsets_out_of_range(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "oob.safetensors");
    write_header(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8);
    expect_open_fail(path, INF_ERR_FORMAT, "oob.safetensors: tensor 'x'", "exceed the data region (8 bytes)");
}

/* Offsets whose end comes before their begin are refused. */
static void test_st_open_offsets_reversed(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "rev.safetensors");
    write_header(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8);
    expect_open_fail(path, INF_ERR_FORMAT, "rev.safetensors: tensor 'x'", "[8, 4]");
}

/* Offsets that are not a pair of non-negative integers are refused. */
static void test_st_open_offsets_malformed(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "neg.safetensors");
    write_header(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8);
    expect_open_fail(path, INF_ERR_FORMAT, "tensor 'x'", "data_offsets");
    write_header(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 8);
    expect_open_fail(path, INF_ERR_FORMAT, "tensor 'x'", "data_offsets");
}

/* A byte count that does not match shape x element size is refused. */
static void test_st_open_size_mismatch(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "size.safetensors");
    write_header(path, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,8]}}", 8);
    expect_open_fail(path, INF_ERR_FORMAT, "size.safetensors: tensor 'w'", "[2, 3] needs 12");
}

/* A shape whose product overflows 64 bits is a size mismatch, not a wrap. */
static void test_st_open_size_overflow(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "ovf.safetensors");
    write_header(path,
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 8);
    expect_open_fail(path, INF_ERR_FORMAT, "tensor 'w'", "needs more than");
}

/* A negative or fractional dimension is refused. */
static void test_st_open_shape_negative(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "shape.safetensors");
    write_header(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4);
    expect_open_fail(path, INF_ERR_FORMAT, "tensor 'w'", "shape[0]");
    write_header(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4);
    expect_open_fail(path, INF_ERR_FORMAT, "tensor 'w'", "shape[0]");
}

/* More than ST_MAX_DIMS dimensions is refused, naming the limit. */
static void test_st_open_shape_too_many_dims(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "dims.safetensors");
    write_header(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4);
    expect_open_fail(path, INF_ERR_UNSUPPORTED, "tensor 'w'", "9 dimensions");
}

/* Two tensors sharing bytes are refused, naming both. */
static void test_st_open_overlap(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "ovl.safetensors");
    write_header(path,
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                 12);
    expect_open_fail(path, INF_ERR_FORMAT, "ovl.safetensors: tensors 'a' [0, 8] and 'b' [4, 12]", "overlap");
}

/* A dtype string the format does not define is a format error naming it. */
static void test_st_open_unknown_dtype(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "dt.safetensors");
    write_header(path, "{\"w\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1);
    expect_open_fail(path, INF_ERR_FORMAT, "dt.safetensors: tensor 'w'", "unknown dtype 'F4'");
}

/* Known dtypes we do not compute in still have their sizes checked. */
static void test_st_open_other_dtype_size_checked(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "i64.safetensors");
    write_header(path, "{\"w\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    expect_open_fail(path, INF_ERR_FORMAT, "tensor 'w'", "needs 16");
}

/* An entry without a dtype string is refused. */
static void test_st_open_missing_dtype(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "nodt.safetensors");
    write_header(path, "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_open_fail(path, INF_ERR_FORMAT, "tensor 'w'", "dtype");
}

/* The same tensor name twice in one header is ambiguous and refused. */
static void test_st_open_duplicate_name(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "dup.safetensors");
    write_header(path,
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 8);
    expect_open_fail(path, INF_ERR_FORMAT, "dup.safetensors: tensor 'w'", "twice");
}

/* A file that is not there is an I/O error naming it. */
static void test_st_open_missing_file(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "absent.safetensors");
    expect_open_fail(path, INF_ERR_IO, "absent.safetensors", "cannot open");
}

/* ---- directories ---- */

/* DIR/model.safetensors is used when there is no index. */
static void test_st_dir_single_ok(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "model.safetensors");
    const float v = 2.0f;
    const wt ts[] = {{"w", "F32", 1, {1}, &v, 4}};
    write_st(path, ts, 1);
    char dir_slash[600];
    snprintf(dir_slash, sizeof dir_slash, "%s/", f->path); /* a trailing slash is fine */
    st_set *s = NULL;
    inf_err err = {0, ""};
    assert_int_equal(st_open_dir(dir_slash, &s, &err), INF_OK);
    assert_int_equal(st_count(s), 1);
    assert_string_equal(st_find(s, "w")->file, path);
    st_destroy(s);
}

static const char *INDEX2 =
    "{\"metadata\":{\"total_size\":28},\"weight_map\":{"
    "\"a\":\"model-00001-of-00002.safetensors\","
    "\"b\":\"model-00001-of-00002.safetensors\","
    "\"c\":\"model-00002-of-00002.safetensors\"}}";

/* Two shards: a and b in the first, c (bf16) in the second. */
static void write_two_shards(const char *dir)
{
    char path[600];
    const float a[2] = {1.0f, 2.0f}, b[3] = {3.0f, 4.0f, 5.0f};
    const uint16_t c[2] = {0x3f80, 0x4000};
    const wt s1[] = {{"a", "F32", 1, {2}, a, sizeof a}, {"b", "F32", 1, {3}, b, sizeof b}};
    const wt s2[] = {{"c", "BF16", 1, {2}, c, sizeof c}};
    pjoin(path, sizeof path, dir, "model-00001-of-00002.safetensors");
    write_st(path, s1, 2);
    pjoin(path, sizeof path, dir, "model-00002-of-00002.safetensors");
    write_st(path, s2, 1);
}

/* An index with two shards opens both; each tensor points into its shard. */
static void test_st_dir_sharded_ok(void **state)
{
    tdir *f = *state;
    char path[600];
    write_two_shards(f->path);
    pjoin(path, sizeof path, f->path, "model.safetensors.index.json");
    write_bytes(path, INDEX2, strlen(INDEX2));
    st_set *s = NULL;
    inf_err err = {0, ""};
    int rc = st_open_dir(f->path, &s, &err);
    if (rc)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, INF_OK);
    assert_int_equal(st_count(s), 3);
    assert_int_equal(st_data_bytes(s), 8 + 12 + 4);
    assert_non_null(strstr(st_find(s, "a")->file, "model-00001-of-00002.safetensors"));
    assert_non_null(strstr(st_find(s, "b")->file, "model-00001-of-00002.safetensors"));
    const st_tensor *c = st_find(s, "c");
    assert_non_null(strstr(c->file, "model-00002-of-00002.safetensors"));
    uint16_t h;
    memcpy(&h, (const char *)c->data + 2, 2);
    assert_true(inf_bf16_to_f32(h) == 2.0f);
    float b2;
    memcpy(&b2, (const char *)st_find(s, "b")->data + 8, 4);
    assert_true(b2 == 5.0f);
    st_destroy(s);
}

/* An index naming a shard file that is not there: I/O error naming both. */
static void test_st_dir_index_missing_shard(void **state)
{
    tdir *f = *state;
    char path[600];
    write_two_shards(f->path);
    pjoin(path, sizeof path, f->path, "model-00002-of-00002.safetensors");
    remove(path);
    pjoin(path, sizeof path, f->path, "model.safetensors.index.json");
    write_bytes(path, INDEX2, strlen(INDEX2));
    expect_dir_fail(f->path, INF_ERR_IO, "model-00002-of-00002.safetensors", "model.safetensors.index.json");
}

/* An index naming a tensor its shard does not hold: names tensor and shard. */
static void test_st_dir_index_tensor_absent(void **state)
{
    tdir *f = *state;
    char path[600];
    write_two_shards(f->path);
    pjoin(path, sizeof path, f->path, "model.safetensors.index.json");
    const char *idx = "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
                      "\"z\":\"model-00002-of-00002.safetensors\"}}";
    write_bytes(path, idx, strlen(idx));
    expect_dir_fail(f->path, INF_ERR_FORMAT, "tensor 'z'", "model-00002-of-00002.safetensors");
}

/* An index placing a tensor in the wrong shard is refused, naming both. */
static void test_st_dir_index_wrong_shard(void **state)
{
    tdir *f = *state;
    char path[600];
    write_two_shards(f->path);
    pjoin(path, sizeof path, f->path, "model.safetensors.index.json");
    const char *idx = "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
                      "\"c\":\"model-00001-of-00002.safetensors\","
                      "\"b\":\"model-00002-of-00002.safetensors\"}}";
    write_bytes(path, idx, strlen(idx));
    expect_dir_fail(f->path, INF_ERR_FORMAT, "tensor 'c'", "not in shard 'model-00001-of-00002.safetensors'");
}

/* An index without a weight_map object is a format error naming the index. */
static void test_st_dir_index_malformed(void **state)
{
    tdir *f = *state;
    char path[600];
    pjoin(path, sizeof path, f->path, "model.safetensors.index.json");
    write_bytes(path, "{\"weight_map\": [1]}", 19);
    expect_dir_fail(f->path, INF_ERR_FORMAT, "model.safetensors.index.json", "weight_map");
    write_bytes(path, "{\"weight_map\": {\"a\": 3}}", 24);
    expect_dir_fail(f->path, INF_ERR_FORMAT, "model.safetensors.index.json", "'a'");
    /* shard names that leave the directory are refused, not opened */
    const char *escapes[] = {"{\"weight_map\": {\"a\": \"/etc/passwd\"}}",
                             "{\"weight_map\": {\"a\": \"../x.safetensors\"}}",
                             "{\"weight_map\": {\"a\": \"sub/../../x.safetensors\"}}",
                             "{\"weight_map\": {\"a\": \"..\"}}"};
    for (int i = 0; i < 4; i++) {
        write_bytes(path, escapes[i], strlen(escapes[i]));
        expect_dir_fail(f->path, INF_ERR_FORMAT, "model.safetensors.index.json",
                        "outside the checkpoint");
    }
}

/* A directory with neither file: I/O error naming the directory and both. */
static void test_st_dir_no_weights(void **state)
{
    tdir *f = *state;
    expect_dir_fail(f->path, INF_ERR_IO, f->path, "model.safetensors.index.json nor model.safetensors");
    char missing[600];
    pjoin(missing, sizeof missing, f->path, "nothere");
    expect_dir_fail(missing, INF_ERR_IO, "nothere", "directory");
}

/* NULL sets are harmless to every accessor and to st_destroy. */
static void test_st_destroy_null_safe(void **state)
{
    (void)state;
    st_destroy(NULL);
    assert_null(st_find(NULL, "x"));
    assert_int_equal(st_count(NULL), 0);
    assert_null(st_get(NULL, 0));
    assert_int_equal(st_data_bytes(NULL), 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, tdir_setup, tdir_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_st_open_valid_single),
        T(test_st_open_unaligned_ok),
        T(test_st_open_empty_tensor_ok),
        T(test_st_find_many_all_found),
        T(test_st_open_short_file),
        T(test_st_open_header_len_beyond_file),
        T(test_st_open_header_len_huge),
        T(test_st_open_invalid_json),
        T(test_st_open_header_not_object),
        T(test_st_open_offsets_out_of_range),
        T(test_st_open_offsets_reversed),
        T(test_st_open_offsets_malformed),
        T(test_st_open_size_mismatch),
        T(test_st_open_size_overflow),
        T(test_st_open_shape_negative),
        T(test_st_open_shape_too_many_dims),
        T(test_st_open_overlap),
        T(test_st_open_unknown_dtype),
        T(test_st_open_other_dtype_size_checked),
        T(test_st_open_missing_dtype),
        T(test_st_open_duplicate_name),
        T(test_st_open_missing_file),
        T(test_st_dir_single_ok),
        T(test_st_dir_sharded_ok),
        T(test_st_dir_index_missing_shard),
        T(test_st_dir_index_tensor_absent),
        T(test_st_dir_index_wrong_shard),
        T(test_st_dir_index_malformed),
        T(test_st_dir_no_weights),
        cmocka_unit_test(test_st_destroy_null_safe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
