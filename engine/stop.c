/* stop: stop strings over streamed text (see stop.h for the rules).
 *
 * State between feeds is only the held-back text (fewer than L bytes, L the
 * longest stop string). No occurrence can start before it: every earlier
 * position was emitted because no stop string could start there. So each feed
 * searches pending = held ++ text, which is why its cost does not depend on
 * how much text came before.
 *
 * pending is not contiguous (held lives in win, text is the caller's), but
 * every comparison needs at most L bytes: win holds held ++ the first L-1
 * bytes of text, so a range starting inside held lies in win, and a range
 * that does not fit in win starts inside text (stop__span). */
#include "stop.h"

#include <stdlib.h>
#include <string.h>

struct stop {
    int n;              /* stop strings, empty ones included               */
    char **strs;        /* [n] copies, NUL-terminated                     */
    size_t *lens;       /* [n] byte lengths                               */
    size_t max_len;     /* L: the longest length; 0 = pass-through         */
    int include;        /* emit the matched string too                    */
    char *win;          /* [2 * (L - 1)] held ++ head of the current text  */
    size_t held;        /* bytes of win[] held back between feeds          */
    int matched;        /* index of the matched string, -1 while none      */
};

stop_config stop_config_default(void)
{
    stop_config c = {NULL, 0, 0};
    return c;
}

int stop_create(const stop_config *cfg, stop **out, inf_err *err)
{
    if (!cfg || !out || cfg->n < 0 || (cfg->n > 0 && !cfg->strs))
        return inf_fail(err, INF_ERR_INVALID, "stop_create: bad argument");
    *out = NULL;
    for (int i = 0; i < cfg->n; i++)
        if (!cfg->strs[i])
            return inf_fail(err, INF_ERR_INVALID, "stop_create: stop string %d is NULL", i);
    stop *s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->n = cfg->n;
    s->include = cfg->include_in_output != 0;
    s->matched = -1;
    if (s->n > 0) {
        s->strs = calloc((size_t)s->n, sizeof *s->strs);
        s->lens = calloc((size_t)s->n, sizeof *s->lens);
        if (!s->strs || !s->lens)
            goto nomem;
    }
    for (int i = 0; i < s->n; i++) {
        s->lens[i] = strlen(cfg->strs[i]);
        s->strs[i] = malloc(s->lens[i] + 1);
        if (!s->strs[i])
            goto nomem;
        memcpy(s->strs[i], cfg->strs[i], s->lens[i] + 1);
        if (s->lens[i] > s->max_len)
            s->max_len = s->lens[i];
    }
    if (s->max_len > 1) {
        s->win = malloc(2 * (s->max_len - 1));
        if (!s->win)
            goto nomem;
    }
    *out = s;
    return INF_OK;
nomem:
    stop_destroy(s);
    return inf_fail(err, INF_ERR_NOMEM, "stop_create: out of memory");
}

void stop_destroy(stop *s)
{
    if (!s)
        return;
    for (int i = 0; s->strs && i < s->n; i++)
        free(s->strs[i]);
    free(s->strs);
    free(s->lens);
    free(s->win);
    free(s);
}

void stop_reset(stop *s)
{
    s->held = 0;
    s->matched = -1;
}

size_t stop_max_hold(const stop *s)
{
    return s->max_len ? s->max_len - 1 : 0;
}

int stop_matched(const stop *s)
{
    return s->matched;
}

size_t stop_held(const stop *s)
{
    return s->held;
}

const char *stop_str(const stop *s, int i)
{
    return i >= 0 && i < s->n ? s->strs[i] : NULL;
}

/* One feed's view of pending = win[0:held] ++ text[0:len]. */
typedef struct stop__pending {
    const char *win;  /* held ++ text[0:min(len, L-1)]  */
    size_t win_len;
    const char *text; /* the caller's new text          */
    size_t held;      /* where text starts in pending   */
    size_t len;       /* pending's length               */
} stop__pending;

/* pending[i : i + n] as one contiguous range; n <= L and i + n <= len. */
static const char *stop__span(const stop__pending *p, size_t i, size_t n)
{
    return i + n <= p->win_len ? p->win + i : p->text + (i - p->held);
}

/* The earliest occurrence in pending (shortest first on an equal start):
 * returns the string's index and sets *at, or returns -1. */
static int stop__earliest(const stop *s, const stop__pending *p, size_t *at)
{
    for (size_t i = 0; i < p->len; i++) {
        int best = -1;
        for (int k = 0; k < s->n; k++) {
            size_t n = s->lens[k];
            if (n == 0 || n > p->len - i || (best >= 0 && n >= s->lens[best]))
                continue;
            const char *q = stop__span(p, i, n);
            if (q[0] == s->strs[k][0] && memcmp(q, s->strs[k], n) == 0)
                best = k;
        }
        if (best >= 0) {
            *at = i;
            return best;
        }
    }
    return -1;
}

/* Where the longest suffix of pending that is a proper prefix of some stop
 * string starts; p->len when there is none. */
static size_t stop__hold_start(const stop *s, const stop__pending *p)
{
    size_t lo = p->len > s->max_len - 1 ? p->len - (s->max_len - 1) : 0;
    for (size_t j = lo; j < p->len; j++) {
        size_t m = p->len - j;
        const char *q = stop__span(p, j, m);
        for (int k = 0; k < s->n; k++)
            if (s->lens[k] > m && memcmp(q, s->strs[k], m) == 0)
                return j;
    }
    return p->len;
}

/* Copies pending[0:end] to out. */
static void stop__emit(const stop__pending *p, size_t end, char *out)
{
    size_t a = end < p->held ? end : p->held;
    if (a)
        memcpy(out, p->win, a);
    if (end > a)
        memcpy(out + a, p->text, end - a);
}

size_t stop_feed(stop *s, const char *text, size_t len, char *out, int *matched)
{
    if (matched)
        *matched = -1;
    if (s->matched >= 0)
        return 0;
    if (s->max_len == 0) {
        if (len)
            memcpy(out, text, len);
        return len;
    }
    size_t take = len < s->max_len - 1 ? len : s->max_len - 1;
    if (take)
        memcpy(s->win + s->held, text, take);
    stop__pending p = {s->win, s->held + take, text, s->held, s->held + len};

    size_t at = 0;
    int k = stop__earliest(s, &p, &at);
    size_t h = stop__hold_start(s, &p);
    if (k >= 0 && at <= h) {
        /* Final: any earlier start either failed already or would be held. */
        size_t end = at + (s->include ? s->lens[k] : 0);
        stop__emit(&p, end, out);
        s->matched = k;
        s->held = 0;
        if (matched)
            *matched = k;
        return end;
    }
    stop__emit(&p, h, out);
    /* The new held text: inside win when text was short, else inside text. */
    size_t keep = p.len - h;
    if (keep && p.len <= p.win_len)
        memmove(s->win, s->win + h, keep);
    else if (keep)
        memcpy(s->win, text + (h - p.held), keep);
    s->held = keep;
    return h;
}

size_t stop_flush(stop *s, char *out, int *matched)
{
    if (matched)
        *matched = -1;
    if (s->matched >= 0)
        return 0;
    /* No more text: an occurrence held back because a longer one starting
     * earlier might still complete ("c" inside a held "bc" with "bcd" a stop
     * string) is now final. */
    stop__pending p = {s->win, s->held, NULL, s->held, s->held};
    size_t at = 0, end = s->held;
    int k = s->held ? stop__earliest(s, &p, &at) : -1;
    if (k >= 0) {
        end = at + (s->include ? s->lens[k] : 0);
        s->matched = k;
        if (matched)
            *matched = k;
    }
    stop__emit(&p, end, out);
    s->held = 0;
    return end;
}
