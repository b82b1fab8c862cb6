/* tools/eval/cache.h — the per-item result cache: a JSONL file, one record per line, appended as each item finishes
 * (one write per line), so that an interrupted evaluation resumes where it stopped and a finished one re-renders
 * its tables without a request. Records: {"type": "item", "key", …, "result"} (keyed by server, model, regime,
 * task, item and settings), {"type": "server", "server", "model", …} (what the server said about itself), and
 * {"type": "timing", "key", "tokens", "seconds"} (one regime pass's throughput). A line cut short by a kill is
 * skipped when read. Safe to use from several threads. */
#ifndef AAH_EVAL_CACHE_H
#define AAH_EVAL_CACHE_H

#include <jansson.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eval_cache eval_cache;

/* Reads path (a missing file is an empty cache, created on the first write). NULL with err when it cannot be read
 * or appended to. */
eval_cache *eval_cache_open(const char *path, char *err, size_t errlen);
void eval_cache_close(eval_cache *c);
const char *eval_cache_path(const eval_cache *c);
int64_t eval_cache_skipped_lines(const eval_cache *c);   /* malformed lines ignored when reading */

/* An item record by key (borrowed, valid until close), or NULL. */
json_t *eval_cache_item(eval_cache *c, const char *key);
/* The last server record for a server key, or NULL. */
json_t *eval_cache_server(eval_cache *c, const char *server);
/* Sum of the timing records of a key. */
void eval_cache_timing(eval_cache *c, const char *key, double *tokens, double *seconds);

/* Appends a record (stolen) and indexes it: its "type" says which kind, "key" (items, timings) or "server"
 * (servers) what it is filed under. 0, or -1 with err when the file cannot be written. */
int eval_cache_put(eval_cache *c, json_t *record, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
