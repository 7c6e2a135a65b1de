/* What the Hub sends the hub client: the first byte picks a response header
 * line (hub_header_line) or the API's JSON answer about a revision
 * (hub_revision_parse). */
#include <string.h>

#include "app/hub.h"

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
                if (strchr(files[i], '/') && strcmp(files[i], "model.safetensors.index.json"))
                    __builtin_trap(); /* no file outside the snapshot's top level */
            hub_files_free(files, nf);
        }
    }
    return 0;
}
