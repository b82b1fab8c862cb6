/* tools/eval/cache.c — the JSONL result cache (see cache.h). Records live in three jansson objects used as hash
 * maps (items by key, servers by server key, timings summed by key); appends are one write(2) of a whole line on an
 * O_APPEND descriptor, under the cache's mutex. */
#include "tools/eval/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/eval/util.h"

struct eval_cache {
	char *path;
	int fd;
	pthread_mutex_t mu;
	json_t *items, *servers, *timings;   /* key → record; key → [tokens, seconds] */
	int64_t skipped;
	bool need_newline;                   /* the file ends inside a line (a kill mid-write) */
};

static void index_record(eval_cache *c, json_t *rec)
{
	const char *type = json_string_value(json_object_get(rec, "type"));
	const char *key = json_string_value(json_object_get(rec, "key"));
	if (type && !strcmp(type, "item") && key) {
		json_object_set(c->items, key, rec);
	} else if (type && !strcmp(type, "server")) {
		const char *s = json_string_value(json_object_get(rec, "server"));
		if (s)
			json_object_set(c->servers, s, rec);
	} else if (type && !strcmp(type, "timing") && key) {
		json_t *t = json_object_get(c->timings, key);
		double tok = json_number_value(json_object_get(rec, "tokens"));
		double sec = json_number_value(json_object_get(rec, "seconds"));
		if (t) {
			tok += json_number_value(json_array_get(t, 0));
			sec += json_number_value(json_array_get(t, 1));
		}
		json_object_set_new(c->timings, key, json_pack("[f,f]", tok, sec));
	} else {
		c->skipped++;
	}
}

eval_cache *eval_cache_open(const char *path, char *err, size_t errlen)
{
	eval_cache *c = xcalloc(1, sizeof *c);
	c->path = xstrdup(path);
	c->items = json_object();
	c->servers = json_object();
	c->timings = json_object();
	pthread_mutex_init(&c->mu, NULL);
	FILE *f = fopen(path, "rb");
	if (f) {
		size_t len;
		fclose(f);
		char *data = eval_read_file(path, &len, err, errlen);
		if (!data) {
			eval_cache_close(c);
			return NULL;
		}
		size_t at = 0;
		while (at < len) {
			char *nl = memchr(data + at, '\n', len - at);
			size_t end = nl ? (size_t)(nl - data) : len;
			if (end > at) {
				json_t *rec = json_loadb(data + at, end - at, JSON_ALLOW_NUL, NULL);
				if (json_is_object(rec))
					index_record(c, rec);
				else
					c->skipped++;
				json_decref(rec);
			}
			at = end + 1;
		}
		c->need_newline = len > 0 && data[len - 1] != '\n';
		free(data);
	} else if (errno != ENOENT) {
		snprintf(err, errlen, "cannot read the cache %s: %m", path);
		eval_cache_close(c);
		return NULL;
	}
	c->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (c->fd < 0) {
		snprintf(err, errlen, "cannot write the cache %s: %m", path);
		c->fd = -1;
		eval_cache_close(c);
		return NULL;
	}
	return c;
}

void eval_cache_close(eval_cache *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	json_decref(c->items);
	json_decref(c->servers);
	json_decref(c->timings);
	pthread_mutex_destroy(&c->mu);
	free(c->path);
	free(c);
}

const char *eval_cache_path(const eval_cache *c)
{
	return c->path;
}

int64_t eval_cache_skipped_lines(const eval_cache *c)
{
	return c->skipped;
}

json_t *eval_cache_item(eval_cache *c, const char *key)
{
	pthread_mutex_lock(&c->mu);
	json_t *r = json_object_get(c->items, key);
	pthread_mutex_unlock(&c->mu);
	return r;
}

json_t *eval_cache_server(eval_cache *c, const char *server)
{
	pthread_mutex_lock(&c->mu);
	json_t *r = json_object_get(c->servers, server);
	pthread_mutex_unlock(&c->mu);
	return r;
}

void eval_cache_timing(eval_cache *c, const char *key, double *tokens, double *seconds)
{
	pthread_mutex_lock(&c->mu);
	json_t *t = json_object_get(c->timings, key);
	*tokens = t ? json_number_value(json_array_get(t, 0)) : 0;
	*seconds = t ? json_number_value(json_array_get(t, 1)) : 0;
	pthread_mutex_unlock(&c->mu);
}

int eval_cache_put(eval_cache *c, json_t *record, char *err, size_t errlen)
{
	char *line = json_dumps(record, JSON_COMPACT | JSON_REAL_PRECISION(17));
	if (!line) {
		snprintf(err, errlen, "cannot encode a cache record");
		json_decref(record);
		return -1;
	}
	strbuf b = {0};
	pthread_mutex_lock(&c->mu);
	if (c->need_newline)
		sb_add(&b, "\n", 1);
	sb_adds(&b, line);
	sb_add(&b, "\n", 1);
	free(line);
	size_t off = 0;
	int rc = 0;
	while (off < b.len) {
		ssize_t w = write(c->fd, b.s + off, b.len - off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			snprintf(err, errlen, "cannot write the cache %s: %m", c->path);
			rc = -1;
			break;
		}
		off += (size_t)w;
	}
	if (rc == 0) {
		c->need_newline = false;
		index_record(c, record);
	}
	pthread_mutex_unlock(&c->mu);
	sb_free(&b);
	json_decref(record);
	return rc;
}
