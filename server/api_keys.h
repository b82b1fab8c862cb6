/* server/api_keys.h — the named API keys of `api_keys` (a file) beside the single `api_key`: which key a request
 * carries decides whether it may in, and, with the prefix cache per key (prefix_cache_scope = key), whose cached
 * prompts it may reuse (docs/prefix_cache.md: tenants). */
#ifndef AAH_SERVER_API_KEYS_H
#define AAH_SERVER_API_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#define API_KEY_NAME_MAX 64       /* bytes of a key's name: [A-Za-z0-9._-] */
#define API_KEY_MAX 256           /* bytes of a key: printable ASCII, no space */
#define API_KEYS_MAX 4096         /* keys in one file */

typedef struct api_key {
	char name[API_KEY_NAME_MAX + 1];
	char key[API_KEY_MAX + 1];
} api_key;

typedef struct api_keys {
	api_key *k;
	int n;
} api_keys;

/* Parses text (len bytes) in the file's format: one `NAME KEY` per line, separated by spaces or tabs; blank lines and
 * lines starting with # are skipped. Names and keys are unique. Returns 0, or -1 with "line N: message" in err (the
 * message never quotes a key). Free with api_keys_free (also after a failure). */
int api_keys_parse(api_keys *out, const char *text, size_t len, char *err, size_t err_len);
/* Reads and parses path (at most 1 MiB). Returns 0, or -1 with "path: …" in err. */
int api_keys_load(api_keys *out, const char *path, char *err, size_t err_len);
/* Adds one key (the single api_key, named "default" unless that name is taken). Returns 0, or -1 (duplicate key,
 * out of memory) with a message. */
int api_keys_add(api_keys *ks, const char *name, const char *key, char *err, size_t err_len);
void api_keys_free(api_keys *ks);

/* The name of the key that header (an Authorization value, http_credentials.h; NULL when absent) carries, or NULL.
 * Every key is compared, each in constant time, so the time taken says nothing of which key nearly matched. */
const char *api_keys_match(const api_keys *ks, const char *header);

#endif
