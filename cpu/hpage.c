#include "cpu/hpage.h"

#include <stdint.h>
#include <sys/mman.h>

/* Whole 4 KiB pages. */
static size_t pages(size_t n)
{
    return (n + 4095) & ~(size_t)4095;
}

void *cpu_hpage_alloc(size_t n)
{
    const size_t huge = (size_t)2 << 20;
    n = pages(n);
    uint8_t *p = mmap(NULL, n + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    size_t head = (huge - (uintptr_t)p % huge) % huge;
    if (head)
        munmap(p, head);
    if (huge - head)
        munmap(p + head + n, huge - head);
    p += head;
    (void)madvise(p, n, MADV_HUGEPAGE); /* a hint; 4 KiB pages work too */
    return p;
}

void cpu_hpage_free(void *p, size_t n)
{
    if (p)
        munmap(p, pages(n));
}
