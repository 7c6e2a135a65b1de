/* cpu_hpage: zeroed anonymous memory on 2 MiB pages where the kernel's
 * transparent huge pages allow it (madvise), for weights streamed whole every
 * step: their far-apart streams stop costing a page walk each. */
#ifndef INFERD_CPU_HPAGE_H
#define INFERD_CPU_HPAGE_H

#include <stddef.h>

/* n bytes, 2 MiB aligned, zeroed; NULL when the mapping fails. */
void *cpu_hpage_alloc(size_t n);

/* Frees what cpu_hpage_alloc(n) returned (same n); NULL-safe. */
void cpu_hpage_free(void *p, size_t n);

#endif
