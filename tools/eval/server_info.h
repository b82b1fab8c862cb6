/* tools/eval/server_info.h — what the evaluation needs to know about the server it evaluates (or the fleet of
 * servers serving one model): the model's name, its regimes, its context length, its batch size, the tokenizer's
 * prefix (BOS, else EOS) and EOS text, and whether it is aahd (echo with max_tokens 0, the aah object). Read from
 * GET /v1/models and GET /tokenizer_info, or from the cache's record of an earlier run. */
#ifndef AAH_EVAL_SERVER_INFO_H
#define AAH_EVAL_SERVER_INFO_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "tools/eval/client.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eval_server {
	char *key;              /* the servers' URLs as given, joined by "," (the cache files results under it) */
	char *model;
	char **regimes;         /* (n_regimes) */
	int32_t n_regimes;
	char *default_regime;   /* NULL for a server without AAH regimes */
	int64_t max_model_len;
	int32_t max_batch;      /* summed over the fleet; 0 when the servers do not say */
	int32_t prefix_token;   /* -1 when unknown */
	char *eos_text;         /* NULL when unknown */
	bool aahd;
	bool live;              /* asked in this run (else read from the cache) */
} eval_server;

/* Asks each of the n servers; they must serve the same model. 0, or -1 with err (naming the server). */
int eval_server_fetch(eval_server *s, eval_client *const *clients, int32_t n, const char *key, char *err,
                      size_t errlen);
json_t *eval_server_record(const eval_server *s);   /* the cache record (new reference) */
int eval_server_from_record(eval_server *s, const json_t *rec);   /* 0, or -1 when the record is not usable */
bool eval_server_same(const eval_server *a, const eval_server *b);   /* same model, regimes and lengths */
int32_t eval_server_regime(const eval_server *s, const char *name);   /* index, or -1 */
void eval_server_free(eval_server *s);

#ifdef __cplusplus
}
#endif
#endif
