#include "cpu/kern.h"

#include <string.h>

static int have_avx512(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq");
#else
    return 0;
#endif
}

static int have_vnni(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

static int have_bf16(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return have_avx512() && have_vnni() && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

static int have_avx2(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

const cpu_kern *cpu_kern_select(const char *name)
{
    const cpu_kern *k512 = have_vnni() ? &cpu_kern_avx512 : &cpu_kern_avx512_novnni;
    if (!name || !strcmp(name, "auto")) {
        if (have_bf16())
            return &cpu_kern_avx512_bf16;
        if (have_avx512())
            return k512;
        if (have_avx2())
            return &cpu_kern_avx2;
        return &cpu_kern_generic;
    }
    if (!strcmp(name, "avx512bf16"))
        return have_bf16() ? &cpu_kern_avx512_bf16 : NULL;
    if (!strcmp(name, "generic-bf16"))
        return &cpu_kern_generic_bf16;
    if (!strcmp(name, "avx512"))
        return have_avx512() ? k512 : NULL;
    if (!strcmp(name, "avx2"))
        return have_avx2() ? &cpu_kern_avx2 : NULL;
    if (!strcmp(name, "generic"))
        return &cpu_kern_generic;
    return NULL;
}
