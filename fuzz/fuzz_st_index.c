/* model.safetensors.index.json through st_open_dir, in a scratch directory
 * that also holds two small valid shards ("a.safetensors" with tensor "x",
 * "b.safetensors" with "y"), so an index can get as far as checking which
 * tensor is in which shard. */
#include "engine/st.h"
#include "fuzz/fuzz_file.h"

/* a safetensors file with one 2-element f32 tensor called name */
static int write_shard(const char *file, const char *name)
{
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr,
                     "{\"%s\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", name);
    unsigned char buf[256];
    uint64_t len = (uint64_t)n;
    memcpy(buf, &len, 8);
    memcpy(buf + 8, hdr, (size_t)n);
    memset(buf + 8 + n, 0, 8);
    return fuzz_write(file, buf, 8 + (size_t)n + 8);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static int shards;
    if (!shards) {
        if (write_shard("a.safetensors", "x") || write_shard("b.safetensors", "y"))
            abort();
        shards = 1;
    }
    if (fuzz_write("model.safetensors.index.json", data, size))
        return 0;
    st_set *s = NULL;
    inf_err err;
    if (st_open_dir(fuzz_dir(), &s, &err) == INF_OK) {
        for (int i = 0; i < st_count(s); i++)
            (void)st_get(s, i)->nbytes;
        st_destroy(s);
    }
    return 0;
}
