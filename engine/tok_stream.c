/* tok_stream: the incremental detokenizer, over any implementation.
 *
 * vLLM/TGI's scheme over a window of ids: prev is the decode of win[0:read],
 * cur that of win[0:end] where end covers every id whose text is final; the
 * new text is cur minus prev, and the window then slides to start at the old
 * read offset. Decoding a small window rather than the whole sequence keeps
 * each push's cost bounded; diffs of two decodes from the same window start
 * are exact because the implementations' only context effect (a decoder
 * dropping the leading space of the first piece) hits both alike. Which ids
 * are final is decided on the bytes each token stands for
 * (tok_token_bytes), so byte pieces and byte-level pieces alike are held
 * back only while they end inside a UTF-8 character. */
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

/* How many ids an initial window takes from the end of the prefix (vLLM's
 * INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET): enough context for spacing. */
#define TOK_PREFIX_WINDOW 5

struct tok_stream {
    const tok *t;
    int32_t *win;     /* the ids from the window's start on, but see keep() */
    size_t n, cap;
    int32_t last;     /* the id before the next one, kept or not (-1)       */
    size_t read;      /* win[0:read] is accounted for; its decode is prev   */
    char *prev;
    size_t prev_len;
    char *out;        /* the chunk last handed out                          */
    size_t out_len;
    int keep_special; /* TOK_KEEP_SPECIAL */
};

/* Whether a stream keeps id, given the id before it (-1 for none). Special
 * ids decode to nothing; under SentencePiece their one effect is to end a
 * run of byte pieces, so only one right after a byte counts there. Leaving
 * the rest out keeps the window small however many come. */
static int keep(const tok_stream *s, int32_t prev_id, int32_t id)
{
    const tok *t = s->t;
    if (!(t->flags[id] & TOK_F_SPECIAL) || s->keep_special)
        return 1;
    return t->special_splits_bytes && prev_id >= 0 && (t->flags[prev_id] & TOK_F_BYTE);
}

static int is_cont(unsigned char b)
{
    return (b & 0xC0) == 0x80;
}

/* Whether id's bytes begin with a continuation byte. */
static int starts_inside(const tok *t, int32_t id)
{
    return t->n_bytes[id] > 0 && is_cont((unsigned char)t->blob[t->bytes[id]]);
}

/* How many of win's ids have final text: all of them, or all but those
 * holding a trailing UTF-8 character that later ids may still complete. An
 * invalid byte is final at once (a run of them cannot pile up unread), and
 * a literal U+FFFD is not held. Bytes before a lead byte decode the same
 * whatever follows it, so only the trailing character waits. */
static size_t final_end(const tok *t, const int32_t *win, size_t n)
{
    size_t conts = 0;
    for (size_t i = n; i-- > 0;) {
        int32_t id = win[i];
        if (t->flags[id] & TOK_F_SPECIAL)
            return n; /* ends a byte run, or is kept as its (whole) text */
        const unsigned char *b = (const unsigned char *)t->blob + t->bytes[id];
        for (size_t j = t->n_bytes[id]; j-- > 0;) {
            if (is_cont(b[j])) {
                if (++conts > 3)
                    return n;
                continue;
            }
            size_t need = (b[j] & 0xE0) == 0xC0 ? 2 : (b[j] & 0xF0) == 0xE0 ? 3
                          : (b[j] & 0xF8) == 0xF0 ? 4 : 1;
            if (need <= conts + 1)
                return n;
            /* Hold from id i, and from earlier ids while i's bytes go on a
             * character one of them began (a byte-level piece can end one
             * character and begin the next): the read part must end on a
             * character boundary, or the next window would start inside one. */
            while (i > 0 && starts_inside(t, win[i]))
                i--;
            return i;
        }
    }
    return n;
}

/* Length of prev's common prefix with cur, moved back to the start of a
 * character of cur so that what follows is valid UTF-8 on its own. Normally
 * all of prev; less only when a prefix ended inside a character. */
static size_t common(const char *prev, size_t pl, const char *cur, size_t cl)
{
    size_t c = 0, m = pl < cl ? pl : cl;
    while (c < m && prev[c] == cur[c])
        c++;
    while (c > 0 && c < cl && is_cont((unsigned char)cur[c]))
        c--;
    return c;
}

static int decode(const tok_stream *st, const int32_t *ids, size_t n, char **s, size_t *len,
                  inf_err *err)
{
    return st->t->ops->decode(st->t, ids, n, st->keep_special, s, len, err);
}

static int push_id(tok_stream *s, int32_t id, inf_err *err)
{
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 16;
        int32_t *p = realloc(s->win, c * sizeof *p);
        if (!p)
            return inf_fail(err, INF_ERR_NOMEM, "tok_stream: out of memory");
        s->win = p;
        s->cap = c;
    }
    s->win[s->n++] = id;
    return INF_OK;
}

/* Marks win[0:end] as read (cur is its decode, taken over) and slides the
 * window's start to the old read offset, or back from it as far as needed
 * for the read part to decode to something: then the leading-space rule is
 * spent inside that part and cannot touch later pieces. */
static int commit(tok_stream *s, size_t end, char *cur, size_t cur_len, inf_err *err)
{
    size_t start = s->read;
    char *head = NULL;
    size_t head_len = 0;
    while (start > 0) {
        free(head);
        head = NULL;
        int rc = decode(s, s->win + start, end - start, &head, &head_len, err);
        if (rc) {
            free(cur);
            return rc;
        }
        if (head_len)
            break;
        start--;
    }
    free(s->prev);
    if (start == 0) {
        free(head);
        s->prev = cur;
        s->prev_len = cur_len;
    } else {
        free(cur);
        memmove(s->win, s->win + start, (s->n - start) * sizeof *s->win);
        s->n -= start;
        s->prev = head;
        s->prev_len = head_len;
    }
    s->read = end - start;
    return INF_OK;
}

int tok_stream_create(const tok *t, const int32_t *prefix, int n_prefix, tok_stream **out,
                      inf_err *err)
{
    return tok_stream_create_ex(t, prefix, n_prefix, 0, out, err);
}

int tok_stream_create_ex(const tok *t, const int32_t *prefix, int n_prefix, unsigned flags,
                         tok_stream **out, inf_err *err)
{
    if (!t || !out || n_prefix < 0 || (!prefix && n_prefix))
        return inf_fail(err, INF_ERR_INVALID, "tok_stream_create: bad argument");
    *out = NULL;
    for (int i = 0; i < n_prefix; i++)
        if (prefix[i] < 0 || prefix[i] >= t->vocab)
            return inf_fail(err, INF_ERR_INVALID,
                            "tok_stream_create: prefix token id %d (position %d) is out "
                            "of range [0, %d)", (int)prefix[i], i, t->vocab);
    tok_stream *s = calloc(1, sizeof *s);
    if (!s)
        return inf_fail(err, INF_ERR_NOMEM, "tok_stream: out of memory");
    s->t = t;
    s->keep_special = (flags & TOK_KEEP_SPECIAL) != 0;
    /* The prefix's last few kept ids give the context for spacing; take
     * more while the window would start inside a character or decodes to
     * nothing (then it holds no context), all of it when it is short. The
     * window is built backwards at the top of a buffer, then moved down. */
    int i = n_prefix, conts = 0, done = 0, rc = INF_OK;
    size_t cap = 16, k = 0;
    int32_t *rev = malloc(cap * sizeof *rev);
    if (!rev)
        rc = inf_fail(err, INF_ERR_NOMEM, "tok_stream: out of memory");
    while (!rc && i > 0 && !done) {
        int32_t id = prefix[--i];
        if (!keep(s, i > 0 ? prefix[i - 1] : -1, id))
            continue;
        if (k == cap) {
            int32_t *p = realloc(rev, 2 * cap * sizeof *p);
            if (!p) {
                rc = inf_fail(err, INF_ERR_NOMEM, "tok_stream: out of memory");
                break;
            }
            rev = p;
            cap *= 2;
        }
        rev[k++] = id;
        int cont = t->n_bytes[id] > 0 && is_cont((unsigned char)t->blob[t->bytes[id]]);
        if (k < TOK_PREFIX_WINDOW || (cont && conts++ < 3))
            continue;
        /* Decode the candidate window (rev reversed) to see if it has text. */
        free(s->win);
        s->win = NULL;
        s->n = s->cap = 0;
        for (size_t j = k; j-- > 0 && !rc;)
            rc = push_id(s, rev[j], err);
        free(s->prev);
        s->prev = NULL;
        if (!rc)
            rc = decode(s, s->win, s->n, &s->prev, &s->prev_len, err);
        done = !rc && s->prev_len > 0;
    }
    if (!rc && !done) {
        free(s->win);
        s->win = NULL;
        s->n = s->cap = 0;
        for (size_t j = k; j-- > 0 && !rc;)
            rc = push_id(s, rev[j], err);
        free(s->prev);
        s->prev = NULL;
        if (!rc)
            rc = decode(s, s->win, s->n, &s->prev, &s->prev_len, err);
    }
    free(rev);
    if (rc) {
        tok_stream_destroy(s);
        return rc;
    }
    /* All of the prefix counts as read, even a character it leaves
     * unfinished: its U+FFFDs are the prompt's, never streamed. */
    s->read = s->n;
    s->last = n_prefix ? prefix[n_prefix - 1] : -1;
    *out = s;
    return INF_OK;
}

void tok_stream_destroy(tok_stream *s)
{
    if (!s)
        return;
    free(s->win);
    free(s->prev);
    free(s->out);
    free(s);
}

/* Puts the text of the ids that became final (all of them when force) in
 * s->out and marks them read. */
static int advance(tok_stream *s, int force, inf_err *err)
{
    s->out_len = 0;
    size_t end = force ? s->n : final_end(s->t, s->win, s->n);
    if (end <= s->read)
        return INF_OK;
    char *cur = NULL;
    size_t cur_len = 0;
    int rc = decode(s, s->win, end, &cur, &cur_len, err);
    if (rc)
        return rc;
    size_t c = common(s->prev, s->prev_len, cur, cur_len);
    free(s->out);
    s->out = malloc(cur_len - c + 1);
    if (!s->out) {
        free(cur);
        return inf_fail(err, INF_ERR_NOMEM, "tok_stream: out of memory");
    }
    memcpy(s->out, cur + c, cur_len - c);
    s->out[cur_len - c] = '\0';
    s->out_len = cur_len - c;
    return commit(s, end, cur, cur_len, err);
}

int tok_stream_push(tok_stream *s, int32_t id, const char **text, size_t *len, inf_err *err)
{
    if (!s || !text || !len)
        return inf_fail(err, INF_ERR_INVALID, "tok_stream_push: NULL argument");
    *text = "";
    *len = 0;
    if (id < 0 || id >= s->t->vocab)
        return inf_fail(err, INF_ERR_INVALID,
                        "tok_stream_push: token id %d is out of range [0, %d)", (int)id,
                        s->t->vocab);
    int32_t prev_id = s->last;
    s->last = id;
    if (!keep(s, prev_id, id))
        return INF_OK;
    int rc = push_id(s, id, err);
    if (!rc)
        rc = advance(s, 0, err);
    if (rc)
        return rc;
    *text = s->out_len ? s->out : "";
    *len = s->out_len;
    return INF_OK;
}

int tok_stream_flush(tok_stream *s, const char **text, size_t *len, inf_err *err)
{
    if (!s || !text || !len)
        return inf_fail(err, INF_ERR_INVALID, "tok_stream_flush: NULL argument");
    *text = "";
    *len = 0;
    int rc = advance(s, 1, err);
    if (rc)
        return rc;
    *text = s->out_len ? s->out : "";
    *len = s->out_len;
    return INF_OK;
}
