/* tests/fuzz/replay.c — a plain driver for the libFuzzer targets, so `make test` exercises them without clang:
 * runs every file of the target's corpus, then deterministic mutations of each (bit flips, truncations,
 * byte insertions, random bytes). `make fuzz` builds the real coverage-guided fuzzers. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern const char *fuzz_corpus_dir;   /* defined by each target, relative to the repository root */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void)
{
	uint64_t x = rng_state;
	x ^= x << 13; x ^= x >> 7; x ^= x << 17;
	return rng_state = x;
}

static void run_mutations(const uint8_t *seed, size_t n, int rounds)
{
	size_t cap = n + 64;
	uint8_t *buf = malloc(cap);
	for (int r = 0; r < rounds; r++) {
		size_t len = n;
		memcpy(buf, seed, n);
		int edits = 1 + (int)(rng_next() % 8);
		for (int e = 0; e < edits; e++) {
			switch (rng_next() % 5) {
			case 0: if (len) buf[rng_next() % len] ^= (uint8_t)(1u << (rng_next() % 8)); break;
			case 1: if (len) len = rng_next() % len; break;
			case 2: if (len < cap) { size_t at = len ? rng_next() % len : 0;
					memmove(buf + at + 1, buf + at, len - at); buf[at] = (uint8_t)rng_next(); len++; } break;
			case 3: if (len) buf[rng_next() % len] = (uint8_t)"0123456789{}[]\",:-e.\xff\x80"[rng_next() % 22]; break;
			default: if (len) buf[rng_next() % len] = (uint8_t)rng_next(); break;
			}
		}
		LLVMFuzzerTestOneInput(buf, len);
	}
	free(buf);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : fuzz_corpus_dir;
	int rounds = argc > 2 ? atoi(argv[2]) : 2000;
	DIR *d = opendir(dir);
	if (!d) { fprintf(stderr, "replay: cannot open corpus %s\n", dir); return 1; }
	struct dirent *de;
	int files = 0;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.') continue;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		FILE *f = fopen(path, "rb");
		if (!f) continue;
		fseek(f, 0, SEEK_END);
		long n = ftell(f);
		fseek(f, 0, SEEK_SET);
		uint8_t *data = malloc(n > 0 ? (size_t)n : 1);
		size_t got = fread(data, 1, (size_t)n, f);
		fclose(f);
		LLVMFuzzerTestOneInput(data, got);
		run_mutations(data, got, rounds);
		free(data);
		files++;
	}
	closedir(d);
	for (int r = 0; r < 200; r++) {   /* pure noise as well */
		uint8_t noise[256];
		size_t len = rng_next() % sizeof noise;
		for (size_t i = 0; i < len; i++) noise[i] = (uint8_t)rng_next();
		LLVMFuzzerTestOneInput(noise, len);
	}
	printf("replay %s: %d corpus files, %d mutations each: no crash\n", dir, files, rounds);
	return files > 0 ? 0 : 1;
}
