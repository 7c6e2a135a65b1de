/* The AVX-512 int8 matmul with VNNI's vpdpbusd (see kern_q512.h); the only
 * file built with -mavx512vnni, so nothing else can pick up its instructions. */
#include "cpu/kern.h"
#include "cpu/kern_q512.h"

QCHUNK(1, 1, qv1) QCHUNK(1, 2, qv2) QCHUNK(1, 3, qv3)
QCHUNK(1, 4, qv4) QCHUNK(1, 5, qv5) QCHUNK(1, 6, qv6)
static const qchunk_fn qchunks_vnni[QMR] = {qv1, qv2, qv3, qv4, qv5, qv6};

void cpu_avx512_mmq_vnni(const cpu_mmq *a, int n0, int n1, int32_t *scratch)
{
    mmq_run(1, qchunks_vnni, a, n0, n1, scratch);
}
