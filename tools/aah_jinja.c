/* tools/aah_jinja.c — aah-jinja: renders a chat template with a JSON object of variables the way aahd renders it
 * (server/jinja.h), so that a template can be checked offline and compared with python3-jinja2 (tests/test_jinja.sh).
 * Usage: aah-jinja [--max-steps N] [--max-output N] [--max-memory N] TEMPLATE VARS.json
 * TEMPLATE is a template file, or a tokenizer_config.json whose chat_template is taken (the string, or the entry
 * named "default" of the list form). The output goes to stdout as it is, without a newline added.
 * Exit status: 0 rendered; 1 usage or unreadable input; 2 the template does not parse; 3 raise_exception;
 * 4 a limit; 5 any other render error. Errors go to stderr. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja.h"

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f) return NULL;
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		size_t k = fread(buf + n, 1, cap - n, f);
		n += k;
		if (k == 0) break;
		if (n == cap) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) { free(buf); buf = NULL; break; }
			buf = nb;
			cap *= 2;
		}
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) { free(buf); return NULL; }
	*len = n;
	return buf;
}

/* The chat_template of a tokenizer_config.json text, or NULL when it is not one (a plain template file). */
static char *config_template(const char *text, size_t len, size_t *out_len)
{
	json_error_t e;
	json_t *cfg = json_loadb(text, len, 0, &e);
	if (!cfg || !json_is_object(cfg)) { json_decref(cfg); return NULL; }
	json_t *t = json_object_get(cfg, "chat_template");
	const char *s = NULL;
	size_t n = 0;
	if (json_is_string(t)) { s = json_string_value(t); n = json_string_length(t); }
	else if (json_is_array(t)) {
		size_t i;
		json_t *row;
		json_array_foreach(t, i, row) {
			json_t *name = json_object_get(row, "name"), *tpl = json_object_get(row, "template");
			if (json_is_string(name) && !strcmp(json_string_value(name), "default") && json_is_string(tpl)) {
				s = json_string_value(tpl);
				n = json_string_length(tpl);
			}
		}
	}
	char *r = NULL;
	if (s && (r = malloc(n + 1))) { memcpy(r, s, n); r[n] = 0; *out_len = n; }
	json_decref(cfg);
	return r;
}

static int usage(void)
{
	fprintf(stderr, "usage: aah-jinja [--max-steps N] [--max-output N] [--max-memory N] TEMPLATE VARS.json\n");
	return 1;
}

int main(int argc, char **argv)
{
	jinja_limits lim = { 0 };
	static const struct option opts[] = {
		{ "max-steps", required_argument, NULL, 's' }, { "max-output", required_argument, NULL, 'o' },
		{ "max-memory", required_argument, NULL, 'm' }, { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		char *end;
		errno = 0;
		unsigned long long v = ch == 'h' || ch == '?' ? 0 : strtoull(optarg, &end, 10);
		if (ch == 'h' || ch == '?' || errno || *end || v == 0) return usage();
		if (ch == 's') lim.max_steps = v;
		else if (ch == 'o') lim.max_output = (size_t)v;
		else lim.max_memory = (size_t)v;
	}
	if (argc - optind != 2) return usage();
	size_t tlen, vlen;
	char *text = read_file(argv[optind], &tlen);
	if (!text) { fprintf(stderr, "aah-jinja: cannot read %s: %s\n", argv[optind], strerror(errno)); return 1; }
	size_t clen;
	char *from_cfg = config_template(text, tlen, &clen);
	if (from_cfg) { free(text); text = from_cfg; tlen = clen; }
	char *vtext = read_file(argv[optind + 1], &vlen);
	if (!vtext) { fprintf(stderr, "aah-jinja: cannot read %s: %s\n", argv[optind + 1], strerror(errno)); free(text); return 1; }
	json_error_t je;
	json_t *vars = json_loadb(vtext, vlen, JSON_ALLOW_NUL, &je);
	free(vtext);
	if (!vars || !json_is_object(vars)) {
		fprintf(stderr, "aah-jinja: %s: not a JSON object (line %d: %s)\n", argv[optind + 1], je.line, je.text);
		json_decref(vars);
		free(text);
		return 1;
	}
	char err[512];
	jinja_template *t = jinja_parse(text, tlen, err, sizeof err);
	free(text);
	if (!t) {
		fprintf(stderr, "aah-jinja: %s: %s\n", argv[optind], err);
		json_decref(vars);
		return 2;
	}
	char *out;
	size_t out_len;
	jinja_status st = jinja_render(t, vars, &lim, &out, &out_len, err, sizeof err);
	jinja_free(t);
	json_decref(vars);
	if (st != JINJA_OK) {
		fprintf(stderr, "aah-jinja: %s%s\n", st == JINJA_ERR_RAISE ? "raise_exception: " : "", err);
		return st == JINJA_ERR_RAISE ? 3 : st == JINJA_ERR_LIMIT ? 4 : 5;
	}
	int rc = fwrite(out, 1, out_len, stdout) == out_len && fflush(stdout) == 0 ? 0 : 1;
	free(out);
	return rc;
}
