/* The structured parts of the JSON Schema converter: objects (properties in
 * their given order, required first, each optional at most once, extra keys
 * that cannot repeat a declared one), arrays (prefixItems, items, counts),
 * numeric bounds as digit-range grammars, $ref and allOf. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram_json_int.h"

#define MAX_PROPS 256  /* optional properties (the rules grow as n^2)  */
#define MAX_PREFIX 64  /* prefixItems (each nests one group deeper)    */
#define MAX_COUNT 10000

static const char *done(gj *c, inf_buf *b, const char *hint)
{
    const char *r = NULL;
    if (b->oom)
        c->oom = 1;
    else if (!c->failed)
        r = gj__rule(c, hint, b->p ? b->p : "\"\"");
    if (!r && !c->failed)
        c->oom = 1;
    free(b->p);
    return r;
}

/* Path push/pop around visiting a child schema. */
static const char *child(gj *c, const cJSON *s, const char *seg1, const char *seg2,
                         const char *hint)
{
    size_t plen = strlen(c->path);
    snprintf(c->path + plen, sizeof c->path - plen, "/%s%s%s", seg1, seg2 ? "/" : "", seg2 ? seg2 : "");
    const char *r = gj__visit(c, s, hint);
    c->path[plen] = 0;
    return r;
}

/* ---------------------------------------------------------------- objects */

/* A trie of the declared keys, for a key rule that is none of them. */
typedef struct ktrie {
    struct ktrie *kid[256];
    int end;
} ktrie;

static void ktrie_free(ktrie *t)
{
    if (!t)
        return;
    for (int i = 0; i < 256; i++)
        ktrie_free(t->kid[i]);
    free(t);
}

/* Rule text for the rest of a key (raw JSON-safe characters, no escapes, so
 * a key cannot spell a declared one through \u) that avoids ending at any
 * declared key's end. */
static const char *not_keys(gj *c, const ktrie *t, const char *hint)
{
    inf_buf b = {0}, cls = {0};
    int alts = 0;
    for (int i = 0x20; i < 0x7F; i++) {
        /* only raw ASCII key characters are followed; a declared key's
         * other characters are never generated here (the class below
         * leaves them out), so no extra key can spell it */
        if (!t->kid[i] || i == '"' || i == '\\')
            continue;
        const char *sub = not_keys(c, t->kid[i], hint);
        if (!sub) {
            free(b.p);
            free(cls.p);
            return NULL;
        }
        inf_buf_printf(&b, "%s\"\\x%02X\" %s", alts++ ? " | " : "", i, sub);
        inf_buf_printf(&cls, "\\x%02X", i);
    }
    /* a character no key continues with: then anything */
    inf_buf_printf(&b, "%s[^\"\\\\\\x00-\\x1F\\x7F\\x80-\\U0010FFFF%s] [^\"\\\\\\x00-\\x1F\\x7F]*",
                   alts ? " | " : "", cls.p ? cls.p : "");
    if (!t->end)
        inf_buf_printf(&b, " | \"\"");
    free(cls.p);
    return done(c, &b, hint);
}

static char *key_lit(gj *c, const char *key)
{
    cJSON *k = cJSON_CreateString(key);
    char *j = k ? cJSON_PrintUnformatted(k) : NULL;
    cJSON_Delete(k);
    inf_buf b = {0};
    if (j)
        gram_src__lit(&b, j, strlen(j));
    free(j);
    if (!j || b.oom) {
        free(b.p);
        c->oom = 1;
        return NULL;
    }
    return b.p;
}

const char *gj__object(gj *c, const cJSON *s, const char *hint)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) {
        gj__fail(c, "'properties' must be an object%s", NULL);
        return NULL;
    }
    if (req && !cJSON_IsArray(req)) {
        gj__fail(c, "'required' must be an array%s", NULL);
        return NULL;
    }
    int n = cJSON_GetArraySize(props), n_req_extra = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r)) {
            gj__fail(c, "'required' entries must be strings%s", NULL);
            return NULL;
        }
        if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            n_req_extra++;
    }
    /* kv rules: required ones (in properties order, then required names
     * without a schema), then optional ones */
    int cap = n + n_req_extra;
    const char **kv = calloc((size_t)cap + 1, sizeof *kv);
    int *is_req = calloc((size_t)cap + 1, sizeof *is_req);
    ktrie *keys = calloc(1, sizeof *keys);
    const char *out = NULL;
    if (!kv || !is_req || !keys) {
        c->oom = 1;
        goto done;
    }
    int n_kv = 0;
    const char *colon = gj__prim(c, "colon"), *comma = gj__prim(c, "comma");
    /* pass 0: required properties; 1: required names without a schema;
     * 2: optional properties */
    for (int pass = 0; pass < 3; pass++) {
        const cJSON *p = pass == 1 ? req : props;
        const cJSON *it;
        cJSON_ArrayForEach(it, p) {
            const char *key = pass == 1 ? it->valuestring : it->string;
            int required = 0;
            const cJSON *q;
            cJSON_ArrayForEach(q, req) required |= !strcmp(q->valuestring, key);
            if ((pass == 0 && !required) || (pass == 2 && required) ||
                (pass == 1 && cJSON_GetObjectItemCaseSensitive(props, key)))
                continue;
            char h[160];
            snprintf(h, sizeof h, "%s-%s", hint, key);
            const char *v = pass != 1 ? child(c, it, "properties", key, h) : gj__prim(c, "value");
            char *kl = v ? key_lit(c, key) : NULL;
            if (!kl)
                goto done;
            inf_buf b = {0};
            inf_buf_printf(&b, "%s %s %s", kl, colon, v);
            free(kl);
            snprintf(h, sizeof h, "%s-%s-kv", hint, key);
            if (!(kv[n_kv] = done(c, &b, h)))
                goto done;
            is_req[n_kv++] = pass != 2;
            ktrie *t = keys;
            for (const unsigned char *k = (const unsigned char *)key; *k && t; k++) {
                if (!t->kid[*k] && !(t->kid[*k] = calloc(1, sizeof *t))) {
                    c->oom = 1;
                    goto done;
                }
                t = t->kid[*k];
            }
            t->end = 1;
        }
    }
    /* additionalProperties: absent or false generate none */
    const char *add_kv = NULL;
    if (add && !cJSON_IsFalse(add)) {
        char h[160];
        snprintf(h, sizeof h, "%s-additional", hint);
        const char *v = cJSON_IsTrue(add) ? gj__prim(c, "value") : child(c, add, "additionalProperties", NULL, h);
        snprintf(h, sizeof h, "%s-additional-key", hint);
        const char *k = v ? not_keys(c, keys, h) : NULL;
        if (!k)
            goto done;
        inf_buf b = {0};
        inf_buf_printf(&b, "\"\\\"\" %s \"\\\"\" %s %s %s", k, gj__prim(c, "space"), colon, v);
        snprintf(h, sizeof h, "%s-additional-kv", hint);
        if (!(add_kv = done(c, &b, h)))
            goto done;
    }
    int first_opt = 0;
    while (first_opt < n_kv && is_req[first_opt])
        first_opt++;
    if (n_kv - first_opt > MAX_PROPS) {
        gj__fail(c, "more than 256 optional properties%s", NULL);
        goto done;
    }
    /* rest[i]: what may follow once optional i-1 (or a required one) is
     * written: ("," kv_j rest[j+1])? for j >= i, then extra keys */
    const char *rest_add = NULL;
    if (add_kv) {
        inf_buf b = {0};
        inf_buf_printf(&b, "( %s %s )*", comma, add_kv);
        char h[160];
        snprintf(h, sizeof h, "%s-rest-additional", hint);
        if (!(rest_add = done(c, &b, h)))
            goto done;
    }
    const char **rest = calloc((size_t)(n_kv + 2), sizeof *rest);
    if (!rest) {
        c->oom = 1;
        goto done;
    }
    rest[n_kv] = rest_add;
    for (int i = n_kv - 1; i >= first_opt; i--) {
        inf_buf b = {0};
        inf_buf_printf(&b, "(");
        for (int j = i; j < n_kv; j++)
            inf_buf_printf(&b, "%s %s %s %s", j > i ? " |" : "", comma, kv[j], rest[j + 1] ? rest[j + 1] : "");
        if (add_kv)
            inf_buf_printf(&b, " | %s %s %s", comma, add_kv, rest_add);
        inf_buf_printf(&b, " )?");
        char h[160];
        snprintf(h, sizeof h, "%s-rest-%d", hint, i);
        if (!(rest[i] = done(c, &b, h))) {
            free(rest);
            goto done;
        }
    }
    inf_buf b = {0};
    inf_buf_printf(&b, "\"{\" %s ", gj__prim(c, "space"));
    if (first_opt > 0) {
        inf_buf_printf(&b, "%s ", kv[0]);
        for (int i = 1; i < first_opt; i++)
            inf_buf_printf(&b, "%s %s ", comma, kv[i]);
        if (rest[first_opt])
            inf_buf_printf(&b, "%s ", rest[first_opt]);
    } else if (n_kv || add_kv) {
        inf_buf_printf(&b, "(");
        for (int j = 0; j < n_kv; j++)
            inf_buf_printf(&b, "%s %s %s", j ? " |" : "", kv[j], rest[j + 1] ? rest[j + 1] : "");
        if (add_kv)
            inf_buf_printf(&b, "%s %s %s", n_kv ? " |" : "", add_kv, rest_add);
        inf_buf_printf(&b, " )? ");
    }
    inf_buf_printf(&b, "\"}\" %s", gj__prim(c, "space"));
    out = done(c, &b, hint);
    free(rest);
done:
    free(kv);
    free(is_req);
    ktrie_free(keys);
    return out;
}

/* ----------------------------------------------------------------- arrays */

static int count_kw(gj *c, const cJSON *s, const char *kw, long dflt, long *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, kw);
    *v = dflt;
    if (!x)
        return 0;
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble != floor(x->valuedouble) ||
        x->valuedouble > MAX_COUNT)
        return gj__fail(c, "'%s' must be a whole number from 0 to 10000", kw);
    *v = (long)x->valuedouble;
    return 0;
}

const char *gj__array(gj *c, const cJSON *s, const char *hint)
{
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    long mn, mx;
    if (count_kw(c, s, "minItems", 0, &mn) || count_kw(c, s, "maxItems", -1, &mx))
        return NULL;
    if (pre && !cJSON_IsArray(pre)) {
        gj__fail(c, "'prefixItems' must be an array%s", NULL);
        return NULL;
    }
    if (cJSON_IsArray(items)) { /* draft 4 tuple form */
        gj__fail(c, "'items' as a list is not supported (use prefixItems)%s", NULL);
        return NULL;
    }
    int n_pre = cJSON_GetArraySize(pre);
    if (n_pre > MAX_PREFIX) {
        gj__fail(c, "more than 64 prefixItems%s", NULL);
        return NULL;
    }
    const char *el[MAX_PREFIX], *item = NULL;
    for (int i = 0; i < n_pre; i++) {
        char h[160], seg[16];
        snprintf(h, sizeof h, "%s-%d", hint, i);
        snprintf(seg, sizeof seg, "%d", i);
        if (!(el[i] = child(c, cJSON_GetArrayItem(pre, i), "prefixItems", seg, h)))
            return NULL;
    }
    if (!cJSON_IsFalse(items)) {
        char h[160];
        snprintf(h, sizeof h, "%s-item", hint);
        item = !items || cJSON_IsTrue(items) ? gj__prim(c, "value") : child(c, items, "items", NULL, h);
        if (!item)
            return NULL;
    }
    long most = item ? mx : (mx < 0 || mx > n_pre ? n_pre : mx);
    if (mx >= 0 && mx < mn) {
        gj__fail(c, "maxItems is below minItems%s", NULL);
        return NULL;
    }
    if (most >= 0 && mn > most) {
        gj__fail(c, "minItems asks for more items than the schema allows%s", NULL);
        return NULL;
    }
    const char *comma = gj__prim(c, "comma");
    inf_buf b = {0};
    inf_buf_printf(&b, "\"[\" %s ", gj__prim(c, "space"));
    /* position k (0-based) of at most `most`; the first has no comma */
    int open = 0;
    long k = 0;
    for (; k < n_pre && (most < 0 || k < most); k++) {
        if (k >= mn) {
            inf_buf_printf(&b, "(");
            open++;
        }
        inf_buf_printf(&b, "%s%s ", k ? comma : "", k ? " " : "");
        inf_buf_printf(&b, "%s ", el[k]);
    }
    if (item && (most < 0 || k < most)) {
        long lo = mn > k ? mn - k : 0, hi = most < 0 ? -1 : most - k;
        if (k == 0) {
            /* item ("," item){lo-1, hi-1}, optional when lo == 0 */
            if (!lo)
                inf_buf_printf(&b, "( ");
            inf_buf_printf(&b, "%s ", item);
            long l1 = lo ? lo - 1 : 0;
            if (hi < 0)
                inf_buf_printf(&b, "( %s %s ){%ld,} ", comma, item, l1);
            else if (hi - 1 > 0 || l1 > 0)
                inf_buf_printf(&b, "( %s %s ){%ld,%ld} ", comma, item, l1, hi - 1);
            if (!lo)
                inf_buf_printf(&b, ")? ");
        } else if (hi < 0) {
            inf_buf_printf(&b, "( %s %s ){%ld,} ", comma, item, lo);
        } else if (hi > 0) {
            inf_buf_printf(&b, "( %s %s ){%ld,%ld} ", comma, item, lo, hi);
        }
    }
    for (; open > 0; open--)
        inf_buf_printf(&b, ")? ");
    inf_buf_printf(&b, "\"]\" %s", gj__prim(c, "space"));
    return done(c, &b, hint);
}

/* ---------------------------------------------------------------- numbers */

#define MAX_MAG 9999999999999999LL /* 16 digits, as the number rules allow */

/* Writes the integers with len digits from x to y (decimal strings of equal
 * length, x <= y) as GBNF. */
static void same_len(inf_buf *b, const char *x, const char *y, int n)
{
    if (!n)
        return;
    if (x[0] == y[0]) {
        inf_buf_printf(b, "\"%c\" ", x[0]);
        same_len(b, x + 1, y + 1, n - 1);
        return;
    }
    int x_zeros = 1, y_nines = 1;
    for (int i = 1; i < n; i++) {
        x_zeros &= x[i] == '0';
        y_nines &= y[i] == '9';
    }
    char nines[20], zeros[20];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    int from = x[0] - '0', to = y[0] - '0', alts = 0;
    inf_buf_printf(b, "(");
    if (!x_zeros) {
        inf_buf_printf(b, " \"%c\" ", x[0]);
        same_len(b, x + 1, nines, n - 1);
        from++;
        alts++;
    }
    if (!y_nines)
        to--;
    if (from <= to) {
        inf_buf_printf(b, "%s [%d-%d]", alts++ ? " |" : "", from, to);
        if (n > 1)
            inf_buf_printf(b, " [0-9]{%d}", n - 1);
        inf_buf_put(b, " ", 1);
    }
    if (!y_nines) {
        inf_buf_printf(b, "%s \"%c\" ", alts ? " |" : "", y[0]);
        same_len(b, zeros, y + 1, n - 1);
    }
    inf_buf_printf(b, ") ");
}

/* The integers from a to b (0 <= a <= b <= MAX_MAG) without leading zeros. */
static void uint_range(inf_buf *b, long long a, long long hi)
{
    inf_buf_printf(b, "(");
    int alts = 0;
    long long p = 1;
    for (int len = 1; len <= 16; len++, p *= 10) {
        long long lo_l = len == 1 ? 0 : p, hi_l = p * 10 - 1;
        if (lo_l < a)
            lo_l = a;
        if (hi_l > hi)
            hi_l = hi;
        if (lo_l > hi_l)
            continue;
        char x[24], y[24];
        snprintf(x, sizeof x, "%lld", lo_l);
        snprintf(y, sizeof y, "%lld", hi_l);
        inf_buf_printf(b, "%s ", alts++ ? " |" : "");
        same_len(b, x, y, len);
    }
    inf_buf_printf(b, ")");
}

typedef struct bound {
    int set, excl;
    double v;
} bound;

static int read_bound(gj *c, const cJSON *s, const char *kw, const char *ex_kw, bound *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kw);
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(s, ex_kw);
    *out = (bound){0, 0, 0};
    if (v && !cJSON_IsNumber(v))
        return gj__fail(c, "'%s' must be a number", kw);
    if (v)
        *out = (bound){1, 0, v->valuedouble};
    if (cJSON_IsBool(ex)) { /* draft 4: a flag on minimum/maximum */
        out->excl = cJSON_IsTrue(ex) && v;
    } else if (ex) {
        if (!cJSON_IsNumber(ex))
            return gj__fail(c, "'%s' must be a number", ex_kw);
        /* the tighter of the two (both may be given) */
        int lower = kw[1] == 'i';
        if (!out->set || (lower ? ex->valuedouble >= out->v : ex->valuedouble <= out->v))
            *out = (bound){1, 1, ex->valuedouble};
    }
    return 0;
}

/* Magnitudes m with lo <= m <= hi (hi < 0: unbounded), lo/hi exclusive as
 * flagged, as digits with an optional fraction (integer: none). Whole
 * bounds only. */
static int magnitude(inf_buf *b, long long lo, int lo_ex, long long hi, int hi_ex,
                     int integer)
{
    const char *frac = integer ? "" : " (\".\" decimal-part)?";
    const char *zfrac = integer ? "" : " (\".\" \"0\"{1,16})?";
    int alts = 0;
    if (integer) { /* exclusive integer bounds are inclusive ones moved by one */
        if (lo_ex)
            lo++;
        if (hi >= 0 && hi_ex)
            hi--;
        lo_ex = hi_ex = 0;
        if (hi >= 0 && lo > hi)
            return 0;
        inf_buf_put(b, "( ", 2);
        uint_range(b, lo, hi < 0 ? MAX_MAG : hi);
        inf_buf_put(b, " )", 2);
        return 1;
    }
    if (hi >= 0 && (lo > hi || (lo == hi && (lo_ex || hi_ex))))
        return 0;
    inf_buf_put(b, "( ", 2);
    if (hi >= 0 && lo == hi) {
        inf_buf_printf(b, "\"%lld\"%s", lo, zfrac);
        alts++;
    } else {
        if (lo_ex)
            inf_buf_printf(b, "\"%lld\" \".\" [0-9]{0,15} [1-9]", lo);
        else
            inf_buf_printf(b, "\"%lld\"%s", lo, frac);
        alts++;
        long long m_hi = hi < 0 ? MAX_MAG : hi - 1;
        if (lo + 1 <= m_hi) {
            inf_buf_put(b, " | ", 3);
            uint_range(b, lo + 1, m_hi);
            inf_buf_printf(b, "%s", frac);
        }
        if (hi >= 0 && !hi_ex)
            inf_buf_printf(b, " | \"%lld\"%s", hi, zfrac);
    }
    inf_buf_put(b, " )", 2);
    return alts;
}

const char *gj__number(gj *c, const cJSON *s, const char *hint, int integer)
{
    bound lo, hi;
    if (read_bound(c, s, "minimum", "exclusiveMinimum", &lo) ||
        read_bound(c, s, "maximum", "exclusiveMaximum", &hi))
        return NULL;
    if (!lo.set && !hi.set)
        return gj__prim(c, integer ? "integer" : "number");
    if (integer) { /* whole bounds: ceil/floor of any number */
        if (lo.set) {
            double v = lo.excl ? floor(lo.v) + 1 : ceil(lo.v);
            lo = (bound){1, 0, v};
        }
        if (hi.set) {
            double v = hi.excl ? ceil(hi.v) - 1 : floor(hi.v);
            hi = (bound){1, 0, v};
        }
    } else if ((lo.set && lo.v != floor(lo.v)) || (hi.set && hi.v != floor(hi.v))) {
        gj__fail(c, "number bounds that are not whole numbers are not supported%s", NULL);
        return NULL;
    }
    if ((lo.set && fabs(lo.v) >= 1e16) || (hi.set && fabs(hi.v) >= 1e16)) {
        gj__fail(c, "bounds beyond 16 digits are not supported%s", NULL);
        return NULL;
    }
    if (!integer)
        gj__prim(c, "decimal-part");
    inf_buf b = {0};
    int alts = 0;
    inf_buf_put(&b, "( ", 2);
    /* x >= 0 */
    if (!hi.set || hi.v > 0 || (hi.v == 0 && !hi.excl)) {
        long long l = lo.set && lo.v > 0 ? (long long)lo.v : 0;
        int lx = lo.set && lo.v >= 0 ? lo.excl : 0;
        alts += magnitude(&b, l, lx, hi.set ? (long long)hi.v : -1, hi.set && hi.excl, integer);
    }
    /* x < 0: magnitude m = -x */
    if (!lo.set || lo.v < 0) {
        long long l = hi.set && hi.v < 0 ? (long long)-hi.v : 0;
        int lx = hi.set && hi.v < 0 ? hi.excl : 1;
        if (integer && !(hi.set && hi.v < 0))
            l = 1, lx = 0;
        inf_buf sub = {0};
        if (magnitude(&sub, l, lx, lo.set ? (long long)-lo.v : -1, lo.set && lo.excl, integer)) {
            inf_buf_printf(&b, "%s\"-\" %s", alts ? " | " : "", sub.p);
            alts++;
        }
        if (sub.oom)
            b.oom = 1;
        free(sub.p);
    }
    inf_buf_printf(&b, " ) %s", gj__prim(c, "space"));
    if (!alts) {
        free(b.p);
        gj__fail(c, "no %s satisfies these bounds", integer ? "integer" : "number");
        return NULL;
    }
    return done(c, &b, hint);
}

/* ------------------------------------------------------------ $ref, allOf */

/* The schema a local JSON pointer ("#", "#/$defs/a") names, or NULL. */
const cJSON *gj__resolve(const cJSON *root, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const cJSON *cur = root;
    const char *p = ref + 1;
    while (*p == '/' && cur) {
        p++;
        char seg[256];
        size_t k = 0;
        for (; *p && *p != '/' && k < sizeof seg - 1; p++) {
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
                seg[k++] = p[1] == '0' ? '~' : '/';
                p++;
            } else {
                seg[k++] = *p;
            }
        }
        seg[k] = 0;
        if (cJSON_IsArray(cur)) {
            char *e;
            long i = strtol(seg, &e, 10);
            cur = *seg && !*e ? cJSON_GetArrayItem(cur, (int)i) : NULL;
        } else {
            cur = cJSON_GetObjectItemCaseSensitive(cur, seg);
        }
    }
    return *p ? NULL : cur;
}

const char *gj__ref(gj *c, const cJSON *ref, const char *hint)
{
    if (!cJSON_IsString(ref)) {
        gj__fail(c, "'$ref' must be a string%s", NULL);
        return NULL;
    }
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref->valuestring))
            return c->refs[i].name;
    const cJSON *target = gj__resolve(c->root, ref->valuestring);
    if (!target) {
        gj__fail(c, ref->valuestring[0] == '#' ? "'$ref' %s does not resolve"
                                               : "only local '$ref's (\"#/...\") are supported, not %s",
                 ref->valuestring);
        return NULL;
    }
    const char *slash = strrchr(ref->valuestring, '/');
    const char *name = gj__rule(c, slash && slash[1] ? slash + 1 : hint, NULL);
    if (!name || (c->n_refs == c->cap_refs &&
                  !(c->refs = realloc(c->refs, sizeof *c->refs * (size_t)(c->cap_refs = c->cap_refs ? 2 * c->cap_refs : 8))))) {
        c->oom = 1;
        return NULL;
    }
    c->refs[c->n_refs].ref = strdup(ref->valuestring);
    c->refs[c->n_refs].name = name;
    if (!c->refs[c->n_refs].ref) {
        c->oom = 1;
        return NULL;
    }
    c->n_refs++;
    char saved[sizeof c->path];
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref->valuestring);
    const char *body = gj__visit(c, target, name);
    memcpy(c->path, saved, sizeof saved);
    if (!body)
        return NULL;
    gj__set(c, name, body);
    return c->oom ? NULL : name;
}

/* allOf over object schemas: one object with every part's properties and
 * required names. */
const char *gj__all_of(gj *c, const cJSON *s, const cJSON *all, const char *hint)
{
    if (!cJSON_IsArray(all) || !cJSON_GetArraySize(all)) {
        gj__fail(c, "'allOf' must be a non-empty array%s", NULL);
        return NULL;
    }
    cJSON *m = cJSON_CreateObject(), *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
    const char *r = NULL;
    if (!m || !props || !req) {
        c->oom = 1;
        goto out;
    }
    const cJSON *parts[2] = {s, NULL};
    const cJSON *part;
    cJSON_ArrayForEach(part, all) {
        parts[1] = part;
        for (int k = 0; k < 2; k++) {
            const cJSON *p = parts[k];
            for (int hops = 0; hops < 16 && cJSON_GetObjectItemCaseSensitive(p, "$ref"); hops++) {
                const cJSON *ref = cJSON_GetObjectItemCaseSensitive(p, "$ref");
                p = cJSON_IsString(ref) ? gj__resolve(c->root, ref->valuestring) : NULL;
            }
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type");
            const cJSON *pp = cJSON_GetObjectItemCaseSensitive(p, "properties");
            if (k == 1 && (!cJSON_IsObject(p) || (ty && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "object"))) ||
                           cJSON_GetObjectItemCaseSensitive(p, "anyOf") || cJSON_GetObjectItemCaseSensitive(p, "oneOf"))) {
                gj__fail(c, "'allOf' is supported only over object schemas%s", NULL);
                goto out;
            }
            const cJSON *it;
            cJSON_ArrayForEach(it, pp) {
                cJSON_DeleteItemFromObjectCaseSensitive(props, it->string);
                cJSON_AddItemToObject(props, it->string, cJSON_Duplicate(it, 1));
            }
            cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(p, "required"))
                if (cJSON_IsString(it))
                    cJSON_AddItemToArray(req, cJSON_CreateString(it->valuestring));
        }
    }
    cJSON_AddStringToObject(m, "type", "object");
    cJSON_AddItemToObject(m, "properties", props);
    cJSON_AddItemToObject(m, "required", req);
    props = req = NULL;
    r = child(c, m, "allOf", NULL, hint);
out:
    cJSON_Delete(m);
    cJSON_Delete(props);
    cJSON_Delete(req);
    return r;
}
