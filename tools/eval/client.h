/* tools/eval/client.h — one HTTP connection to one server (aahd, or any server with the OpenAI completions API),
 * used by one thread: JSON in, JSON out, through libcurl. It waits out 429 (and 503 with Retry-After) for as long
 * as the server says, retries a refused or dropped connection a few times, and otherwise hands back an error that
 * names the server, the path, the status and the server's own message. A fleet is several clients, one per server
 * (the runner spreads items over them). */
#ifndef AAH_EVAL_CLIENT_H
#define AAH_EVAL_CLIENT_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum eval_client_status {
	EVAL_CLIENT_OK = 0,
	EVAL_CLIENT_HTTP_ERROR,    /* the server answered an error status */
	EVAL_CLIENT_UNREACHABLE,   /* no connection, or it dropped, after the retries */
	EVAL_CLIENT_TIMEOUT,       /* no whole answer within the request timeout */
	EVAL_CLIENT_BAD_RESPONSE,  /* an answer that is not the JSON expected */
	EVAL_CLIENT_STOPPED,       /* the stop flag was raised (Ctrl-C) */
} eval_client_status;

typedef struct eval_client_error {
	eval_client_status status;
	long http_status;
	char message[1024];
} eval_client_error;

typedef struct eval_client_stats {
	atomic_llong requests, waits_429, retries;
} eval_client_stats;

typedef struct eval_client eval_client;

/* base_url: "http://host:port" (a trailing "/v1" is accepted and dropped). api_key may be NULL. stop (may be NULL)
 * aborts transfers and waits when it becomes non-zero; stats (may be NULL) is shared by all clients. The caller
 * frees with eval_client_free. curl_global_init must have run. */
eval_client *eval_client_init(const char *base_url, const char *api_key, double timeout_s, const atomic_int *stop,
                              eval_client_stats *stats);
void eval_client_free(eval_client *c);
const char *eval_client_url(const eval_client *c);

/* GET / POST (body borrowed). On EVAL_CLIENT_OK *out is the answer (the caller decrefs it). */
eval_client_status eval_client_get(eval_client *c, const char *path, json_t **out, eval_client_error *e);
eval_client_status eval_client_post(eval_client *c, const char *path, json_t *body, json_t **out, eval_client_error *e);

/* POST /tokenize {"content": text, "add_special": b}: *ids (the caller frees) and *n. */
eval_client_status eval_client_tokenize(eval_client *c, const char *text, size_t len, bool add_special, int32_t **ids,
                                        int64_t *n, eval_client_error *e);

#ifdef __cplusplus
}
#endif
#endif
