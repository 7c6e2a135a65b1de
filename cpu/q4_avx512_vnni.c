/* The AVX-512 int4 kernel with VNNI's vpdpbusd (q4_512.h); built with
 * -mavx512vnni, apart from code that must run on CPUs without it. */
#include "cpu/q4_512.h"

Q4TILES(1, tiles)

static void mm4(const cpu_mm4 *a, int n0, int n1)
{
    q4_run(tiles, a, n0, n1);
}

const cpu_q4k cpu_q4k_avx512_vnni = {.name = "avx512-vnni", .mm4 = mm4, .quant = q4_quant512};
