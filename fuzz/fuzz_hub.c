/* What the Hub sends the hub client: the first byte picks a response header
 * line (hub_header_line) or the API's JSON answer about a revision
 * (hub_revision_parse, and the GGUF model a tag picks from its files). */
#include <stdlib.h>
#include <string.h>

#include "app/hub.h"
#include "app/hub_gguf.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    if (data[0] & 1) {
        hub_headers h;
        memset(&h, 0, sizeof h);
        hub_header_line(&h, s, n);
        if (memchr(h.etag, '\0', sizeof h.etag) == NULL ||
            memchr(h.linked_etag, '\0', sizeof h.linked_etag) == NULL)
            __builtin_trap(); /* a header value must stay a string */
    } else {
        char commit[41];
        char **files;
        int nf;
        inf_err err;
        if (hub_revision_parse(s, n, commit, &files, &nf, &err) == 0) {
            for (int i = 0; i < nf; i++)
                if ((strchr(files[i], '/') && !hub_gguf_name(files[i])) ||
                    strstr(files[i], "..") || files[i][0] == '/')
                    __builtin_trap(); /* no file outside the snapshot (GGUFs: in folders) */
            /* whatever it picks is one model: its files, the first to load */
            int *pick = malloc(sizeof *pick * (size_t)(nf ? nf : 1)), np = 0;
            const char *tags[] = {NULL, "Q4_K_M", "q8_0", "model.gguf"};
            for (int t = 0; pick && t < 4; t++)
                if (hub_gguf_pick(files, nf, tags[t], pick, &np, &err) == 0)
                    for (int i = 0; i < np; i++)
                        if (pick[i] < 0 || pick[i] >= nf || !hub_gguf_name(files[pick[i]]))
                            __builtin_trap();
            free(pick);
            hub_files_free(files, nf);
        }
    }
    return 0;
}
