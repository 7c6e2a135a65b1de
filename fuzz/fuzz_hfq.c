/* A quantization_config and a safetensors file through hfq_open and
 * hfq_bind (GPTQ / AWQ unpacking: shapes, dtypes, g_idx values;
 * compressed-tensors: the scheme's fields, I8 or F8_E4M3 weights or
 * pack-quantized I32 ones, scales, zero points, g_idx; quant_method fp8's
 * block scales; bitsandbytes' 4-bit codes, absmax, nested parts and JSON
 * quant_state, and 8-bit codes, SCB and weight_format). A bound tensor
 * must be readable whole, and a desc_act order (q4_perm) an order of its
 * inputs. Input:
 * u8 rows selector (its top bit: 4-bit codes kept as stored,
 * hfq_set_packed_q4), u8 cols selector (its top bit: W8A16 int8 rows,
 * hfq_set_packed_q8; bits 3-5 taken off the multiple of 8, so odd K
 * too), u16 JSON length, the config.json, then the safetensors bytes;
 * both go through memfds. The linear bound is "l.weight", rows a multiple
 * of 8 up to 64, cols 1 to 64. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/hfq.h"

static int memfd_path(const unsigned char *p, size_t n, char *path, size_t cap)
{
    int fd = memfd_create("fuzz-hfq", 0);
    if (fd < 0)
        return -1;
    if (write(fd, p, n) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 4)
        return 0;
    int64_t rows = 8 * (1 + data[0] % 8), cols = 8 * (1 + data[1] % 8) - (data[1] >> 3 & 7);
    size_t jlen = (size_t)data[2] | (size_t)data[3] << 8;
    if (jlen > size - 4)
        return 0;
    char cpath[64], spath[64];
    int cfd = memfd_path(data + 4, jlen, cpath, sizeof cpath);
    int sfd = memfd_path(data + 4 + jlen, size - 4 - jlen, spath, sizeof spath);
    hfq *q = NULL;
    st_set *st = NULL;
    inf_err err;
    if (cfd >= 0 && sfd >= 0 && hfq_open(cpath, &q, &err) == INF_OK && q &&
        st_open_file(spath, &st, &err) == INF_OK) {
        model_tensor t = {0};
        hfq_set_packed_q4(q, data[0] >> 7);
        hfq_set_packed_q8(q, data[1] >> 7);
        if (hfq_bind(q, st, "l.weight", rows, cols, &t, &err) == INF_OK) {
            if (t.rows != rows || t.cols != cols ||
                (!t.data && !(t.q8 && t.q8_scale) && !(t.q4 && t.q4_scale && t.q4_zero)))
                abort();
            volatile float acc = 0; /* ASan sees a read past what was bound */
            int64_t B = (cols + 31) / 32;
            for (int64_t i = 0; i < rows * cols; i++) {
                int64_t n = i / cols, k = i % cols, b = n * B + k / 32;
                acc += t.q8   ? (float)t.q8[i] * t.q8_scale[n]
                       : t.q4 ? inf_f16_to_f32(t.q4_scale[b]) *
                                    (float)((t.q4[i / 2] >> (4 * (k % 2)) & 15) - t.q4_zero[b])
                              : ((const float *)t.data)[i];
                if (t.q4 && t.q4_zero[b] > 16)
                    abort();
            }
            (void)acc;
            if (t.q4_perm) { /* desc_act: an order of the inputs, each once */
                unsigned char seen[64] = {0};
                for (int64_t j = 0; j < cols; j++) {
                    if (t.q4_perm[j] < 0 || t.q4_perm[j] >= cols || seen[t.q4_perm[j]])
                        abort();
                    seen[t.q4_perm[j]] = 1;
                }
            }
        }
    }
    st_destroy(st);
    hfq_free(q);
    if (cfd >= 0)
        close(cfd);
    if (sfd >= 0)
        close(sfd);
    return 0;
}
