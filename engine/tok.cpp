/* tok: the C API of tok.h over sentencepiece's C++ library.
 *
 * The only C++ in inferd. Every extern "C" function catches whatever the
 * library (or std::) throws and turns it into an INF_ERR_* code, so no
 * exception ever crosses into C. */
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>
/* cjson/ prefix: the Makefile passes pkg-config's -I/usr/include/cjson to C
 * only, and this spelling works with or without it. */
#include <cjson/cJSON.h>

extern "C" {
#include "tok.h"
}

namespace spm = sentencepiece;

struct tok {
    spm::SentencePieceProcessor sp;
    std::vector<std::string> pieces; /* [vocab] IdToPiece, cached so tok_piece
                                        can hand out stable C strings      */
    std::vector<short> byte;         /* [vocab] byte value of a <0xXX> piece,
                                        -1 for every other piece            */
    std::vector<char> control;       /* [vocab] 1 for <s>, </s>, ...        */
    int bos = -1, eos = -1;
    bool add_bos = true, add_eos = false;
};

/* Window of a stream: the ids from win[0] on, except control ids that cannot
 * matter (see tok__keep). win[0:read] has been accounted for; its decode is
 * prev. */
struct tok_stream {
    const tok *t;
    std::vector<int> win;
    int last = -1;       /* the id before the next one, kept or not  */
    size_t read = 0;
    std::string prev;    /* decode(win[0:read])                      */
    std::string cur;     /* decode(win[0:end]) in tok__advance       */
    std::string out;     /* the chunk last handed out                */
    std::vector<int> tmp; /* scratch ids for sub-range decodes      */
};

/* How many ids an initial window takes from the end of the prefix (vLLM's
 * INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET): enough context for spacing. */
static const size_t TOK_PREFIX_WINDOW = 5;

/* Whether a stream keeps id, given the id before it (-1 for none). Control
 * ids (<s>, </s>) decode to nothing and leave the leading-space rule alone;
 * their one effect is to end a run of byte pieces (bytes on either side are
 * not joined into one character), so only one right after a byte counts.
 * Leaving the rest out keeps the window small however many come. */
static bool tok__keep(const tok *t, int prev_id, int id)
{
    return !t->control[id] || (prev_id >= 0 && t->byte[prev_id] >= 0);
}

/* Called only from inside a catch block: names the in-flight exception. */
static int tok__caught(inf_err *err, const char *where)
{
    try {
        throw;
    } catch (const std::bad_alloc &) {
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", where);
    } catch (const std::exception &e) {
        return inf_fail(err, INF_ERR_FORMAT, "%s: %s", where, e.what());
    } catch (...) {
        return inf_fail(err, INF_ERR_FORMAT, "%s: unknown C++ exception", where);
    }
}

/* Reads a whole file (inf_read_file). Returns INF_OK, or INF_ERR_IO naming
 * the path; *missing (may be NULL) tells a file that does not exist from
 * one that fails. */
static int tok__read_file(const std::string &path, std::string *data,
                          bool *missing, inf_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    int gone = 0;
    int rc = inf_read_file(path.c_str(), 0, &buf, &len, missing ? &gone : NULL, err);
    if (missing)
        *missing = gone != 0;
    if (rc)
        return rc;
    data->assign(buf, len);
    free(buf);
    return INF_OK;
}

/* The byte a "<0xXX>" piece stands for, or -1. */
static short tok__piece_byte(const std::string &p)
{
    if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>')
        return -1;
    char *end = nullptr;
    long v = strtol(p.c_str() + 3, &end, 16);
    return end == p.c_str() + 5 && v >= 0 && v <= 255 ? (short)v : -1;
}

/* Parses a serialized model into a new tok with the given policy. */
static int tok__load(const std::string &blob, const std::string &path,
                     bool add_bos, bool add_eos, tok **out, inf_err *err)
{
    std::unique_ptr<tok> t(new tok);
    auto st = t->sp.LoadFromSerializedProto(blob);
    if (!st.ok())
        return inf_fail(err, INF_ERR_FORMAT, "tok: %s is not a SentencePiece model: %s",
                        path.c_str(), st.message());
    int n = t->sp.GetPieceSize();
    if (n <= 0)
        return inf_fail(err, INF_ERR_FORMAT, "tok: %s has no pieces", path.c_str());
    t->pieces.resize(n);
    t->byte.assign(n, -1);
    t->control.assign(n, 0);
    for (int i = 0; i < n; i++) {
        t->pieces[i] = t->sp.IdToPiece(i);
        if (t->sp.IsByte(i))
            t->byte[i] = tok__piece_byte(t->pieces[i]);
        t->control[i] = t->sp.IsControl(i);
    }
    t->bos = t->sp.bos_id();
    t->eos = t->sp.eos_id();
    /* A model may name an id past its vocabulary: treat that as absent. */
    if (t->bos >= n)
        t->bos = -1;
    if (t->eos >= n)
        t->eos = -1;
    t->add_bos = add_bos;
    t->add_eos = add_eos;
    *out = t.release();
    return INF_OK;
}

/* One boolean of tokenizer_config.json: absent or null keeps *v. */
static int tok__json_bool(const cJSON *root, const char *key, bool *v,
                          const std::string &path, inf_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it))
        return INF_OK;
    if (!cJSON_IsBool(it))
        return inf_fail(err, INF_ERR_FORMAT, "tok: %s: %s must be true or false",
                        path.c_str(), key);
    *v = cJSON_IsTrue(it);
    return INF_OK;
}

/* Reads BOS/EOS policy from DIR/tokenizer_config.json; a missing file keeps
 * Llama's defaults. */
static int tok__read_policy(const std::string &path, bool *add_bos, bool *add_eos,
                            inf_err *err)
{
    std::string json;
    bool missing;
    int rc = tok__read_file(path, &json, &missing, err);
    if (missing)
        return INF_OK;
    if (rc)
        return rc;
    cJSON *root = cJSON_ParseWithLength(json.data(), json.size());
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return inf_fail(err, INF_ERR_FORMAT, "tok: %s is not a JSON object", path.c_str());
    }
    rc = tok__json_bool(root, "add_bos_token", add_bos, path, err);
    if (!rc)
        rc = tok__json_bool(root, "add_eos_token", add_eos, path, err);
    cJSON_Delete(root);
    return rc;
}

extern "C" int tok_create(const char *dir, tok **out, inf_err *err)
{
    if (!dir || !out)
        return inf_fail(err, INF_ERR_INVALID, "tok_create: NULL argument");
    *out = nullptr;
    try {
        std::string d(dir);
        std::string model = d + "/tokenizer.model";
        std::string blob;
        int rc = tok__read_file(model, &blob, nullptr, err);
        if (rc)
            return rc;
        bool add_bos = true, add_eos = false;
        rc = tok__read_policy(d + "/tokenizer_config.json", &add_bos, &add_eos, err);
        if (rc)
            return rc;
        return tok__load(blob, model, add_bos, add_eos, out, err);
    } catch (...) {
        return tok__caught(err, "tok_create");
    }
}

extern "C" int tok_create_file(const char *spm_path, int add_bos, int add_eos,
                               tok **out, inf_err *err)
{
    if (!spm_path || !out)
        return inf_fail(err, INF_ERR_INVALID, "tok_create_file: NULL argument");
    *out = nullptr;
    try {
        std::string path(spm_path), blob;
        int rc = tok__read_file(path, &blob, nullptr, err);
        if (rc)
            return rc;
        return tok__load(blob, path, add_bos != 0, add_eos != 0, out, err);
    } catch (...) {
        return tok__caught(err, "tok_create_file");
    }
}

extern "C" void tok_destroy(tok *t)
{
    delete t;
}

extern "C" int tok_vocab_size(const tok *t)
{
    return (int)t->pieces.size();
}

extern "C" int tok_bos_id(const tok *t)
{
    return t->bos;
}

extern "C" int tok_eos_id(const tok *t)
{
    return t->eos;
}

extern "C" int tok_adds_bos(const tok *t)
{
    return t->add_bos && t->bos >= 0;
}

extern "C" const char *tok_piece(const tok *t, int32_t id)
{
    if (id < 0 || (size_t)id >= t->pieces.size())
        return nullptr;
    return t->pieces[id].c_str();
}

extern "C" int tok_encode(const tok *t, const char *text, size_t len, int add_special,
                          int32_t **ids, int *n, inf_err *err)
{
    if (!t || !ids || !n || (!text && len))
        return inf_fail(err, INF_ERR_INVALID, "tok_encode: NULL argument");
    *ids = nullptr;
    *n = 0;
    if (len > INT_MAX / 2)
        return inf_fail(err, INF_ERR_INVALID, "tok_encode: text of %zu bytes is too long",
                        len);
    try {
        std::vector<int> v;
        auto st = t->sp.Encode(absl::string_view(text ? text : "", len), &v);
        if (!st.ok())
            return inf_fail(err, INF_ERR_INVALID, "tok_encode: %s", st.message());
        bool bos = add_special && t->add_bos && t->bos >= 0;
        bool eos = add_special && t->add_eos && t->eos >= 0;
        size_t total = v.size() + bos + eos;
        int32_t *o = (int32_t *)malloc((total ? total : 1) * sizeof *o);
        if (!o)
            return inf_fail(err, INF_ERR_NOMEM, "tok_encode: out of memory");
        size_t k = 0;
        if (bos)
            o[k++] = t->bos;
        for (int id : v)
            o[k++] = id;
        if (eos)
            o[k++] = t->eos;
        *ids = o;
        *n = (int)total;
        return INF_OK;
    } catch (...) {
        return tok__caught(err, "tok_encode");
    }
}

/* sentencepiece's Decode over ids[0:n] (all in range) into *s. */
static int tok__decode(const tok *t, const int *ids, size_t n, std::vector<int> *tmp,
                       std::string *s, inf_err *err)
{
    tmp->assign(ids, ids + n);
    auto st = t->sp.Decode(*tmp, s);
    if (!st.ok())
        return inf_fail(err, INF_ERR_FORMAT, "tok: decode failed: %s", st.message());
    return INF_OK;
}

extern "C" int tok_decode(const tok *t, const int32_t *ids, int n, char **text,
                          size_t *len, inf_err *err)
{
    if (!t || !text || n < 0 || (!ids && n))
        return inf_fail(err, INF_ERR_INVALID, "tok_decode: bad argument");
    *text = nullptr;
    int vocab = (int)t->pieces.size();
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return inf_fail(err, INF_ERR_INVALID,
                            "tok_decode: token id %d (position %d) is out of range [0, %d)",
                            (int)ids[i], i, vocab);
    try {
        std::vector<int> tmp;
        std::string s;
        int rc = tok__decode(t, ids, (size_t)n, &tmp, &s, err);
        if (rc)
            return rc;
        char *o = (char *)malloc(s.size() + 1);
        if (!o)
            return inf_fail(err, INF_ERR_NOMEM, "tok_decode: out of memory");
        memcpy(o, s.data(), s.size());
        o[s.size()] = '\0';
        *text = o;
        if (len)
            *len = s.size();
        return INF_OK;
    } catch (...) {
        return tok__caught(err, "tok_decode");
    }
}

/* ---------------------------------------------------------------- streaming
 *
 * vLLM/TGI's scheme over a window of ids: prev is the decode of win[0:read],
 * cur that of win[0:end] where end covers every id whose text is final; the
 * new text is cur minus prev, and the window then slides to start at the old
 * read offset. Decoding a small window rather than the whole sequence keeps
 * each push's cost bounded; diffs of two decodes from the same window start
 * are exact because sentencepiece's only context effect (dropping the leading
 * space of the first non-control piece) hits both alike. */

static bool tok__is_cont(int b)
{
    return b >= 0 && (b & 0xC0) == 0x80;
}

/* How many of win's ids have final text: all of them, or all but the bytes
 * of a trailing UTF-8 character that later byte pieces may still complete.
 * Decided on the bytes themselves rather than by a trailing U+FFFD in the
 * decode: an invalid byte is final at once (a run of them cannot pile up
 * unread), and a literal U+FFFD is not held. Bytes before a lead byte decode
 * the same whatever follows it, so only the trailing character waits. */
static size_t tok__final_end(const tok *t, const std::vector<int> &win)
{
    size_t i = win.size(), conts = 0;
    while (i > 0 && conts < 3 && tok__is_cont(t->byte[win[i - 1]])) {
        i--;
        conts++;
    }
    if (i == 0)
        return win.size();
    int b = t->byte[win[i - 1]];
    if (b < 0)
        return win.size(); /* a whole piece: its text is complete UTF-8 */
    size_t need = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    return need > conts + 1 ? i - 1 : win.size();
}

/* Length of prev's common prefix with cur, moved back to the start of a
 * character of cur so that what follows is valid UTF-8 on its own. Normally
 * all of prev; less only when a prefix ended inside a character. */
static size_t tok__common(const std::string &prev, const std::string &cur)
{
    size_t c = 0, m = prev.size() < cur.size() ? prev.size() : cur.size();
    while (c < m && prev[c] == cur[c])
        c++;
    while (c > 0 && c < cur.size() && ((unsigned char)cur[c] & 0xC0) == 0x80)
        c--;
    return c;
}

/* Marks win[0:end] as read (s->cur is its decode) and slides the window's
 * start to the old read offset, or back from it as far as needed for the
 * read part to decode to something: then the leading-space rule is spent
 * inside that part and cannot touch later pieces. */
static int tok__commit(tok_stream *s, size_t end, inf_err *err)
{
    const tok *t = s->t;
    size_t start = s->read;
    std::string head;
    while (start > 0) {
        int rc = tok__decode(t, s->win.data() + start, end - start, &s->tmp, &head, err);
        if (rc)
            return rc;
        if (!head.empty())
            break;
        start--;
    }
    if (start == 0) {
        s->prev.swap(s->cur);
    } else {
        s->win.erase(s->win.begin(), s->win.begin() + start);
        s->prev.swap(head);
    }
    s->read = end - start;
    return INF_OK;
}

extern "C" int tok_stream_create(const tok *t, const int32_t *prefix, int n_prefix,
                                 tok_stream **out, inf_err *err)
{
    if (!t || !out || n_prefix < 0 || (!prefix && n_prefix))
        return inf_fail(err, INF_ERR_INVALID, "tok_stream_create: bad argument");
    *out = nullptr;
    int vocab = (int)t->pieces.size();
    for (int i = 0; i < n_prefix; i++)
        if (prefix[i] < 0 || prefix[i] >= vocab)
            return inf_fail(err, INF_ERR_INVALID,
                            "tok_stream_create: prefix token id %d (position %d) is out "
                            "of range [0, %d)", (int)prefix[i], i, vocab);
    try {
        std::unique_ptr<tok_stream> s(new tok_stream);
        s->t = t;
        /* The prefix's last few kept ids give the context for spacing; take
         * more while the window would start inside a character or decodes to
         * nothing (then it holds no context), all of it when it is short. */
        int i = n_prefix, conts = 0;
        bool done = false;
        while (i > 0 && !done) {
            int id = prefix[--i];
            if (!tok__keep(t, i > 0 ? prefix[i - 1] : -1, id))
                continue;
            s->win.insert(s->win.begin(), id);
            if (s->win.size() < TOK_PREFIX_WINDOW || (tok__is_cont(t->byte[id]) && conts++ < 3))
                continue;
            int rc = tok__decode(t, s->win.data(), s->win.size(), &s->tmp, &s->prev, err);
            if (rc)
                return rc;
            done = !s->prev.empty();
        }
        if (!done) {
            int rc = tok__decode(t, s->win.data(), s->win.size(), &s->tmp, &s->prev, err);
            if (rc)
                return rc;
        }
        /* All of the prefix counts as read, even a character it leaves
         * unfinished: its U+FFFDs are the prompt's, never streamed. */
        s->read = s->win.size();
        s->last = n_prefix ? prefix[n_prefix - 1] : -1;
        *out = s.release();
        return INF_OK;
    } catch (...) {
        return tok__caught(err, "tok_stream_create");
    }
}

extern "C" void tok_stream_destroy(tok_stream *s)
{
    delete s;
}

/* Puts the text of the ids that became final (all of them when force) in
 * s->out and marks them read. */
static int tok__advance(tok_stream *s, bool force, inf_err *err)
{
    s->out.clear();
    size_t end = force ? s->win.size() : tok__final_end(s->t, s->win);
    if (end <= s->read)
        return INF_OK;
    int rc = tok__decode(s->t, s->win.data(), end, &s->tmp, &s->cur, err);
    if (rc)
        return rc;
    s->out.assign(s->cur, tok__common(s->prev, s->cur), std::string::npos);
    return tok__commit(s, end, err);
}

extern "C" int tok_stream_push(tok_stream *s, int32_t id, const char **text, size_t *len,
                               inf_err *err)
{
    if (!s || !text || !len)
        return inf_fail(err, INF_ERR_INVALID, "tok_stream_push: NULL argument");
    *text = "";
    *len = 0;
    int vocab = (int)s->t->pieces.size();
    if (id < 0 || id >= vocab)
        return inf_fail(err, INF_ERR_INVALID,
                        "tok_stream_push: token id %d is out of range [0, %d)", (int)id,
                        vocab);
    int prev_id = s->last;
    s->last = id;
    if (!tok__keep(s->t, prev_id, id))
        return INF_OK;
    try {
        s->win.push_back(id);
        int rc = tok__advance(s, false, err);
        if (rc)
            return rc;
        *text = s->out.data();
        *len = s->out.size();
        return INF_OK;
    } catch (...) {
        return tok__caught(err, "tok_stream_push");
    }
}

extern "C" int tok_stream_flush(tok_stream *s, const char **text, size_t *len,
                                inf_err *err)
{
    if (!s || !text || !len)
        return inf_fail(err, INF_ERR_INVALID, "tok_stream_flush: NULL argument");
    *text = "";
    *len = 0;
    try {
        int rc = tok__advance(s, true, err);
        if (rc)
            return rc;
        *text = s->out.data();
        *len = s->out.size();
        return INF_OK;
    } catch (...) {
        return tok__caught(err, "tok_stream_flush");
    }
}
