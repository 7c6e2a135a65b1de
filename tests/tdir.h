/* tdir_: the C tests' temporary directories. Each is fresh, under
 * $INFERD_TEST_TMP (make test points it into build/) or /tmp, and removed
 * with everything in it. As a cmocka fixture (tdir_setup / tdir_teardown)
 * *state is a tdir; or call tdir_make / tdir_remove by hand. */
#ifndef INFERD_TEST_TDIR_H
#define INFERD_TEST_TDIR_H

#include <stddef.h>

typedef struct tdir {
    char path[512];
} tdir;

/* Makes a fresh directory named after tag (e.g. the test binary) in d->path;
 * 0, or -1 with the reason on stderr. */
int tdir_make(tdir *d, const char *tag);

/* Removes d->path and everything under it; NULL-safe. */
void tdir_remove(tdir *d);

/* d->path + "/" + name into out. */
void tdir_join(const tdir *d, const char *name, char *out, size_t cap);

/* cmocka fixtures: a tdir per test (or per group), named after the test
 * binary. */
int tdir_setup(void **state);
int tdir_teardown(void **state);

#endif
