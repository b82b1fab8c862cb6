/* tests/fuzz/fuzz_eval_cache.c — libFuzzer target for aah-eval's cache reader and the records it holds: any bytes as
 * a cache file (cut lines, wrong types, unknown records) open, index and answer lookups; a server record read from
 * it is turned back into a server description; an appended record lands on a line of its own. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/eval/cache.h"
#include "tools/eval/server_info.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/eval_cache";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[] = "/tmp/aah-fuzz-cache-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		unlink(path);
		return 0;
	}
	close(fd);
	char err[512];
	eval_cache *c = eval_cache_open(path, err, sizeof err);
	if (c) {
		eval_cache_item(c, "00000000000000000000000000000000");
		json_t *s = eval_cache_server(c, "http://127.0.0.1:8080");
		if (s) {
			eval_server srv;
			if (eval_server_from_record(&srv, s) == 0) {
				eval_server_regime(&srv, "full_attention");
				json_decref(eval_server_record(&srv));
				eval_server_free(&srv);
			}
		}
		double tok, sec;
		eval_cache_timing(c, "k", &tok, &sec);
		eval_cache_put(c, json_pack("{s:s,s:s,s:{}}", "type", "item", "key", "fuzz", "result"), err, sizeof err);
		if (!eval_cache_item(c, "fuzz"))
			abort();
		eval_cache_close(c);
		/* reading it again finds the record appended, however the file ended */
		c = eval_cache_open(path, err, sizeof err);
		if (!c || !eval_cache_item(c, "fuzz"))
			abort();
		eval_cache_close(c);
	}
	unlink(path);
	return 0;
}
