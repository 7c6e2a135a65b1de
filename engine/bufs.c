/* bufs: see bufs.h. */
#include "bufs.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

void *bufs_keep(bufs *b, size_t n, int is_code)
{
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        void **p = realloc(b->p, sizeof *p * (size_t)cap);
        if (!p)
            return NULL;
        b->p = p;
        unsigned char *c = realloc(b->is_code, (size_t)cap);
        if (!c)
            return NULL;
        b->is_code = c;
        size_t *z = realloc(b->sizes, sizeof *z * (size_t)cap);
        if (!z)
            return NULL;
        b->sizes = z;
        b->cap = cap;
    }
    void *p = inf_alloc_big(n);
    if (p) {
        b->is_code[b->n] = (unsigned char)is_code;
        b->sizes[b->n] = n;
        b->p[b->n++] = p;
    }
    return p;
}

void bufs_drop_at(bufs *b, const void *const *at, int n)
{
    for (int i = 0; b && i < b->n; i++)
        for (int j = 0; b->is_code[i] && j < n; j++) {
            uintptr_t s = (uintptr_t)b->p[i], p = (uintptr_t)at[j];
            if (at[j] && p >= s && p - s < (b->sizes[i] ? b->sizes[i] : 1)) {
                free(b->p[i]);
                b->p[i] = NULL;
                b->is_code[i] = 0;
            }
        }
}

void bufs_free(bufs *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->n; i++)
        free(b->p[i]);
    free(b->p);
    free(b->sizes);
    free(b->is_code);
    memset(b, 0, sizeof *b);
}
