/* The AVX-512 int4 kernel without VNNI (q4_512.h): vpmaddubsw products. */
#include "cpu/q4_512.h"

Q4TILES(0, tiles)

static void mm4(const cpu_mm4 *a, int n0, int n1)
{
    q4_run(tiles, a, n0, n1);
}

const cpu_q4k cpu_q4k_avx512 = {.name = "avx512", .mm4 = mm4, .quant = q4_quant512};
