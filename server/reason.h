/* rsn_: reasoning text split from the answer, as vLLM's --reasoning-parser
 * does, for message.reasoning_content (delta.reasoning_content when
 * streaming):
 *
 *   deepseek_r1  the template opens <think> in the prompt: the output is
 *                reasoning until </think> (a leading <think> is dropped);
 *                without </think> all of it is reasoning
 *   qwen3        reasoning only when the output opens with <think>
 *                (thinking disabled gives plain content); </think> ends it
 *
 * Streaming: text in, (reasoning | content, bytes) out as soon as it is
 * certain; a possible tag prefix is held back. The tags themselves are
 * never emitted. */
#ifndef INFERD_REASON_H
#define INFERD_REASON_H

#include <stddef.h>

#include "engine/common.h"

typedef enum rsn_kind { RSN_DEEPSEEK_R1, RSN_QWEN3 } rsn_kind;

/* "deepseek_r1" | "qwen3" -> kind; unknown names are INF_ERR_INVALID with
 * the known ones listed. */
int rsn_kind_parse(const char *name, rsn_kind *out, inf_err *err);

typedef void (*rsn_emit)(void *ctx, int reasoning, const char *text, size_t len);

typedef struct rsn rsn;

int rsn_create(rsn_kind kind, rsn **out, inf_err *err);
void rsn_destroy(rsn *r); /* NULL-safe */
int rsn_feed(rsn *r, const char *text, size_t len, rsn_emit emit, void *ctx);
int rsn_finish(rsn *r, rsn_emit emit, void *ctx);

#endif
