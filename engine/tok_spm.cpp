/* tok_spm: the SentencePiece implementation behind tok.h, over the C++
 * library (the only C++ in inferd). It fills the generic vocabulary table
 * (what each piece stands for: U+2581 as a space, <0xNN> as its byte) and
 * encodes and decodes through sentencepiece. Every extern "C" function
 * catches whatever the library (or std::) throws and turns it into an
 * INF_ERR_* code, so no exception ever crosses into C. */
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

extern "C" {
#include "tok_int.h"
}

namespace spm = sentencepiece;

namespace {

struct spm_impl {
    spm::SentencePieceProcessor sp;
};

const spm::SentencePieceProcessor &sp_of(const tok *t)
{
    return static_cast<const spm_impl *>(t->impl)->sp;
}

/* Called only from inside a catch block: names the in-flight exception. */
int caught(inf_err *err, const char *where)
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

/* The byte a "<0xXX>" piece stands for, or -1. */
int piece_byte(const std::string &p)
{
    if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>')
        return -1;
    char *end = nullptr;
    long v = strtol(p.c_str() + 3, &end, 16);
    return end == p.c_str() + 5 && v >= 0 && v <= 255 ? (int)v : -1;
}

/* What a piece stands for on its own: the word marker U+2581 as a space. */
std::string piece_bytes(const std::string &p)
{
    std::string s;
    for (size_t i = 0; i < p.size(); i++) {
        if (i + 2 < p.size() && (unsigned char)p[i] == 0xE2 && (unsigned char)p[i + 1] == 0x96 &&
            (unsigned char)p[i + 2] == 0x81) {
            s += ' ';
            i += 2;
        } else {
            s += p[i];
        }
    }
    return s;
}

int spm_encode(const tok *t, const char *text, size_t len, int flags, int32_t **ids,
               size_t *n, inf_err *err)
{
    try {
        /* After a special token a leading space is the word start itself:
         * dropping it lets the dummy prefix stand for it (see tok.h). */
        if ((flags & TOK_AFTER_SPECIAL) && len > 0 && text[0] == ' ') {
            text++;
            len--;
        }
        std::vector<int> v;
        if (len > 0) {
            auto st = sp_of(t).Encode(absl::string_view(text, len), &v);
            if (!st.ok())
                return inf_fail(err, INF_ERR_INVALID, "tok_encode: %s", st.message());
        }
        int32_t *o = (int32_t *)malloc((v.size() ? v.size() : 1) * sizeof *o);
        if (!o)
            return inf_fail(err, INF_ERR_NOMEM, "tok_encode: out of memory");
        for (size_t i = 0; i < v.size(); i++)
            o[i] = v[i];
        *ids = o;
        *n = v.size();
        return INF_OK;
    } catch (...) {
        return caught(err, "tok_encode");
    }
}

/* sentencepiece's Decode of ids[0:n] appended to out. */
int spm_decode_run(const tok *t, const int32_t *ids, size_t n, std::string *out, inf_err *err)
{
    std::vector<int> v(ids, ids + n);
    std::string s;
    auto st = sp_of(t).Decode(v, &s);
    if (!st.ok())
        return inf_fail(err, INF_ERR_FORMAT, "tok: decode failed: %s", st.message());
    *out += s;
    return INF_OK;
}

/* Control pieces go, as sentencepiece's Decode drops them, unless
 * keep_special: then the text is what Hugging Face's fast tokenizer (the
 * tokenizer.json converted from this model, which vLLM runs) gives: each
 * control piece's text in place, the pieces between them decoded, and the
 * word marker of a piece right after a control piece kept as a space (only
 * the text's first one is the dummy prefix that decoding drops). */
int spm_decode(const tok *t, const int32_t *ids, size_t n, int keep_special, char **text,
               size_t *len, inf_err *err)
{
    try {
        std::string s;
        int rc = INF_OK;
        for (size_t i = 0; i < n && !rc;) {
            if (keep_special && (t->flags[ids[i]] & TOK_F_SPECIAL)) {
                s += t->blob + t->piece[ids[i]];
                i++;
                continue;
            }
            size_t j = i;
            while (j < n && !(keep_special && (t->flags[ids[j]] & TOK_F_SPECIAL)))
                j++;
            size_t at = s.size();
            rc = spm_decode_run(t, ids + i, j - i, &s, err);
            /* sentencepiece drops the marker of a run's first piece: put it
             * back unless the run starts the text. */
            const char *b = t->blob + t->bytes[ids[i]];
            size_t nb = t->n_bytes[ids[i]];
            if (!rc && at > 0 && nb > 0 && b[0] == ' ' &&
                s.compare(at, nb - 1, b + 1, nb - 1) == 0 && s.compare(at, nb, b, nb) != 0)
                s.insert(at, 1, ' ');
            i = j;
        }
        if (rc)
            return rc;
        char *o = (char *)malloc(s.size() + 1);
        if (!o)
            return inf_fail(err, INF_ERR_NOMEM, "tok_decode: out of memory");
        memcpy(o, s.data(), s.size());
        o[s.size()] = '\0';
        *text = o;
        *len = s.size();
        return INF_OK;
    } catch (...) {
        return caught(err, "tok_decode");
    }
}

void spm_destroy(void *impl)
{
    delete static_cast<spm_impl *>(impl);
}

const tok_ops spm_ops = {spm_encode, spm_decode, nullptr, spm_destroy};

} // namespace

extern "C" int tok_spm_open(const char *blob, size_t len, const char *path, tok **out,
                            inf_err *err)
{
    *out = nullptr;
    tok *t = nullptr;
    try {
        std::unique_ptr<spm_impl> impl(new spm_impl);
        auto st = impl->sp.LoadFromSerializedProto(absl::string_view(blob, len));
        if (!st.ok())
            return inf_fail(err, INF_ERR_FORMAT, "tok: %s is not a SentencePiece model: %s",
                            path, st.message());
        int n = impl->sp.GetPieceSize();
        if (n <= 0)
            return inf_fail(err, INF_ERR_FORMAT, "tok: %s has no pieces", path);
        int rc = tok__new(n, &t, err);
        if (rc)
            return rc;
        for (int i = 0; i < n && !rc; i++) {
            std::string p = impl->sp.IdToPiece(i);
            int b = impl->sp.IsByte(i) ? piece_byte(p) : -1;
            unsigned fl = (impl->sp.IsControl(i) ? TOK_F_SPECIAL : 0) | (b >= 0 ? TOK_F_BYTE : 0);
            char one = (char)b;
            std::string bytes = b >= 0 ? std::string(&one, 1) : piece_bytes(p);
            rc = tok__set(t, i, p.data(), p.size(), bytes.data(), bytes.size(), fl, err);
        }
        if (rc) {
            tok__free(t);
            return rc;
        }
        t->bos = impl->sp.bos_id();
        t->eos = impl->sp.eos_id();
        /* A model may name an id past its vocabulary: treat that as absent. */
        if (t->bos >= n)
            t->bos = -1;
        if (t->eos >= n)
            t->eos = -1;
        t->add_bos = 1;
        t->add_eos = 0;
        t->special_splits_bytes = 1;
        t->kind = "sentencepiece";
        t->ops = &spm_ops;
        t->impl = impl.release();
        *out = t;
        return INF_OK;
    } catch (...) {
        tok__free(t);
        return caught(err, "tok_create");
    }
}
