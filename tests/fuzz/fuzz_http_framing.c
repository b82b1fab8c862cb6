/* tests/fuzz/fuzz_http_framing.c — libFuzzer target for the front's request framing (server/http_framing): any bytes,
 * fed in pieces whose sizes the input picks, end in requests or a refusal with one of its statuses; out is never
 * overrun; and the canonical form is a fixed point — fed again to a fresh parser it gives the same events and
 * itself, so that the parser and libmicrohttpd behind it cannot disagree on where a request ends. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_framing.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/http_framing";

#define OUT_CAP (HTTP_FRAMING_OUT_MIN + 512)

/* Runs data through f in pieces of `step` bytes (0: whole); the canonical bytes go to out (at most OUT_CAP; a full
 * out is "forwarded" by keeping its length in *total and starting over, so only its first OUT_CAP bytes are kept).
 * Returns the event string ("H", "E", "X"). */
static size_t run(http_framing *f, const uint8_t *data, size_t size, size_t step, char *out, size_t *kept, char *ev,
                  size_t ev_cap)
{
	http_framing_init(f, 4096);
	static char buf[OUT_CAP];
	size_t used = 0, ne = 0, len = 0;
	*kept = 0;
	for (int guard = 0; guard < 1 << 20; guard++) {
		size_t avail = size - used;
		if (step && avail > step)
			avail = step;
		http_framing_event e;
		size_t before = len;
		size_t k = http_framing_feed(f, (const char *)data + used, avail, buf, sizeof buf, &len, &e);
		if (len > sizeof buf || len < before || k > avail)
			abort();
		used += k;
		if (e == HTTP_FRAMING_HEAD || e == HTTP_FRAMING_END || e == HTTP_FRAMING_ERROR) {
			if (ne + 1 < ev_cap)
				ev[ne++] = e == HTTP_FRAMING_HEAD ? 'H' : e == HTTP_FRAMING_END ? 'E' : 'X';
		}
		/* forward what there is: keep the first OUT_CAP bytes for the fixed-point check */
		size_t room = OUT_CAP - *kept;
		memcpy(out + *kept, buf, len < room ? len : room);
		*kept += len < room ? len : room;
		len = 0;
		if (e == HTTP_FRAMING_ERROR) {
			int32_t s = f->status;
			if (s != 400 && s != 413 && s != 414 && s != 431 && s != 501 && s != 505)
				abort();
			break;
		}
		if (e == HTTP_FRAMING_MORE && used == size)
			break;
	}
	ev[ne] = 0;
	return used;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static http_framing f, g;
	static char out1[OUT_CAP], out2[OUT_CAP], out3[OUT_CAP];
	char ev1[64], ev2[64], ev3[64];
	size_t k1, k2, k3;
	size_t step = size ? (size_t)data[0] % 7 : 0;   /* 0: whole; else pieces of 1 … 6 bytes */
	run(&f, data, size, 0, out1, &k1, ev1, sizeof ev1);
	run(&g, data, size, step, out2, &k2, ev2, sizeof ev2);
	/* how the bytes arrive changes nothing */
	if (strcmp(ev1, ev2) != 0 || k1 != k2 || memcmp(out1, out2, k1) != 0)
		abort();
	/* the canonical form of whole requests is a fixed point */
	if (k1 < OUT_CAP) {
		char want[64];
		size_t w = 0;
		for (size_t i = 0; ev1[i] && ev1[i] != 'X'; i++)
			want[w++] = ev1[i];
		want[w] = 0;
		run(&f, (const uint8_t *)out1, k1, 0, out3, &k3, ev3, sizeof ev3);
		if (strncmp(ev3, want, w) != 0 || strchr(ev3, 'X') || k3 != k1 || memcmp(out1, out3, k1) != 0)
			abort();
	}
	return 0;
}
