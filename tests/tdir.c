#include "tests/tdir.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int tdir_make(tdir *d, const char *tag)
{
    const char *base = getenv("INFERD_TEST_TMP");
    if (!base || !*base)
        base = "/tmp";
    mkdir(base, 0755); /* make test's build/tmp may not exist yet */
    snprintf(d->path, sizeof d->path, "%s/%s-XXXXXX", base, tag);
    if (!mkdtemp(d->path)) {
        fprintf(stderr, "%s: cannot make a directory under %s: %s\n", tag, base,
                strerror(errno));
        d->path[0] = '\0';
        return -1;
    }
    return 0;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

void tdir_remove(tdir *d)
{
    if (d && d->path[0])
        nftw(d->path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void tdir_join(const tdir *d, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", d->path, name);
}

int tdir_setup(void **state)
{
    tdir *d = calloc(1, sizeof *d);
    if (!d || tdir_make(d, program_invocation_short_name)) {
        free(d);
        return -1;
    }
    *state = d;
    return 0;
}

int tdir_teardown(void **state)
{
    tdir *d = *state;
    tdir_remove(d);
    free(d);
    return 0;
}
