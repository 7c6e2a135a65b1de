/* chat_ids: a chat rendered by a model's own template and tokenized, as the
 * server does for /v1/chat/completions, for comparing two sources of the
 * same tokenizer (a Hugging Face directory and a GGUF file carrying it).
 *
 *   chat_ids MODEL MESSAGES.json
 *
 * MODEL is a directory or a GGUF file; MESSAGES.json a list of messages.
 * Prints the rendered prompt (markers spelled as the model's tokens) on
 * the first line as hex, then the ids, space-separated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/common.h"
#include "engine/tmpl.h"
#include "engine/tok.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: chat_ids MODEL MESSAGES.json\n");
        return 2;
    }
    inf_err e = {0};
    tok *t = NULL;
    tmpl *tm = NULL;
    char *msgs = NULL, *text = NULL;
    int32_t *ids = NULL;
    int n = 0, rc = 1;
    tmpl_out o;
    tmpl_out_init(&o);
    if (inf_read_file(argv[2], 0, &msgs, NULL, NULL, &e) || tok_create(argv[1], &t, &e) ||
        tmpl_from_config(argv[1], NULL, &tm, NULL, 0, &e))
        goto done;
    tmpl_chat chat = {.messages_json = msgs, .add_generation_prompt = 1};
    size_t len = 0;
    if (tmpl_render_chat(tm, &chat, &o, &e) || tmpl_out_string(tm, &o, &text, &len, &e) ||
        tmpl_tokens(tm, &o, t, &ids, &n, &e))
        goto done;
    for (size_t i = 0; i < len; i++)
        printf("%02x", (unsigned char)text[i]);
    putchar('\n');
    for (int i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "chat_ids: %s\n", e.msg);
    free(ids);
    free(text);
    free(msgs);
    tmpl_out_free(&o);
    tmpl_destroy(tm);
    tok_destroy(t);
    return rc;
}
