/* Helpers for harnesses whose parser reads files: the input goes into a
 * memfd (a file that lives in memory) or into a private scratch directory
 * made once per fuzzing process, so nothing outside it is touched. */
#ifndef INFERD_FUZZ_FILE_H
#define INFERD_FUZZ_FILE_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* data in a memfd; path gets "/proc/self/fd/N". Returns the fd (close it),
 * or -1. */
static inline int fuzz_memfd(const unsigned char *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("fuzz", 0);
    if (fd < 0)
        return -1;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return -1;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

static char fuzz__dir[256];

/* The scratch directory goes when the process exits normally. */
static inline void fuzz__cleanup(void)
{
    DIR *d = opendir(fuzz__dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", fuzz__dir, e->d_name);
        if (e->d_name[0] != '.')
            unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(fuzz__dir);
}

/* The process's scratch directory (under $TMPDIR, else /dev/shm where it
 * can write, else /tmp), made once. */
static inline const char *fuzz_dir(void)
{
    char *dir = fuzz__dir;
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        if (!t || !*t)
            t = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof fuzz__dir, "%s/inferd-fuzz-XXXXXX", t);
        if (!mkdtemp(dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz__cleanup);
    }
    return dir;
}

/* Writes data to fuzz_dir()/name; 0 on success. */
static inline int fuzz_write(const char *name, const void *data, size_t size)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = size ? fwrite(data, 1, size, f) : 0;
    return fclose(f) || w != size ? -1 : 0;
}

/* Removes fuzz_dir()/name if it is there. */
static inline void fuzz_unlink(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    unlink(path);
}

#endif
