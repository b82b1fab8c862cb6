/* tools/aah_jinja.c — aah-jinja: renders a chat template with a JSON object of variables the way aahd renders it
 * (server/jinja/jinja.h), so that a template can be checked offline and compared with python3-jinja2 (tests/test_jinja.sh).
 * Usage: aah-jinja [--max-steps N] [--max-output N] [--max-memory N] TEMPLATE VARS.json
 *        aah-jinja --cases CASES VARS.json
 * TEMPLATE is a template file, or a tokenizer_config.json whose chat_template is taken (the string, or the entry
 * named "default" of the list form). The output goes to stdout as it is, without a newline added.
 * Exit status: 0 rendered; 1 usage or unreadable input; 2 the template does not parse; 3 raise_exception;
 * 4 a limit; 5 any other render error. Errors go to stderr.
 * --cases renders many small templates in one run: CASES holds them one after another, each after a line
 * "### NAME"; a case's template is the lines up to the next such line (its last newline not included). Each case
 * prints one JSON line {"name", "rc" (the exit status above), "out" or "err"}.
 * --batch LIST renders a JSON array of {"name", "template" (a path, as TEMPLATE above), "vars"} and prints a JSON
 * line for each as --cases does (tests/jinja/render_ref.py --make-batch writes such lists). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja/jinja.h"

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
	/* integers as reals: Llama 3's config has a model_max_length of 31 digits, past what jansson reads as an integer */
	json_t *cfg = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &e);
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

static char *template_text(const char *path, size_t *len);

/* Prints the JSON line of one render (--cases, --batch). */
static void render_line(const char *name, size_t name_len, const char *src, size_t src_len, const json_t *vars,
                        const jinja_limits *lim)
{
	char err[512];
	int rc = 0;
	char *out = NULL;
	size_t out_len = 0;
	jinja_template *t = src ? jinja_parse(src, src_len, err, sizeof err) : NULL;
	if (!src) { rc = 1; snprintf(err, sizeof err, "cannot read the template"); }
	else if (!t) rc = 2;
	else {
		jinja_status st = jinja_render(t, vars, lim, &out, &out_len, err, sizeof err);
		rc = st == JINJA_OK ? 0 : st == JINJA_ERR_RAISE ? 3 : st == JINJA_ERR_LIMIT ? 4 : 5;
		jinja_free(t);
	}
	json_t *row = json_pack("{s:s%,s:i}", "name", name, name_len, "rc", rc);
	if (rc == 0) json_object_set_new(row, "out", json_stringn(out, out_len));
	else json_object_set_new(row, "err", json_string(err));
	char *line = json_dumps(row, JSON_COMPACT | JSON_ENSURE_ASCII);
	if (line) { puts(line); free(line); }
	json_decref(row);
	free(out);
}

static int run_batch(const char *path, const jinja_limits *lim)
{
	json_error_t je;
	json_t *list = json_load_file(path, 0, &je);
	if (!json_is_array(list)) {
		fprintf(stderr, "aah-jinja: %s: not a JSON array (line %d: %s)\n", path, je.line, je.text);
		json_decref(list);
		return 1;
	}
	size_t i;
	json_t *item;
	json_array_foreach(list, i, item) {
		const char *name = json_string_value(json_object_get(item, "name"));
		const char *tpath = json_string_value(json_object_get(item, "template"));
		json_t *vars = json_object_get(item, "vars");
		if (!name || !tpath || !json_is_object(vars)) {
			fprintf(stderr, "aah-jinja: %s: item %zu lacks name, template or vars\n", path, i);
			json_decref(list);
			return 1;
		}
		size_t len = 0;
		char *src = template_text(tpath, &len);
		render_line(name, strlen(name), src, len, vars, lim);
		free(src);
	}
	json_decref(list);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* Renders every case of a cases file (see the top of this file) and prints its JSON line. */
static int run_cases(const char *text, size_t len, const json_t *vars, const jinja_limits *lim)
{
	const char *p = text, *end = text + len;
	while (p < end && !(end - p >= 4 && memcmp(p, "### ", 4) == 0)) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		p = nl ? nl + 1 : end;
	}
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *name = p + 4, *name_end = nl ? nl : end;
		const char *body = nl ? nl + 1 : end, *q = body;
		while (q < end && !(end - q >= 4 && memcmp(q, "### ", 4) == 0 && (q == body || q[-1] == '\n'))) {
			const char *n2 = memchr(q, '\n', (size_t)(end - q));
			q = n2 ? n2 + 1 : end;
		}
		size_t body_len = (size_t)(q - body);
		if (body_len && body[body_len - 1] == '\n' && q < end) body_len--;
		render_line(name, (size_t)(name_end - name), body, body_len, vars, lim);
		p = q;
	}
	return fflush(stdout) == 0 ? 0 : 1;
}

/* A template file's text, or a tokenizer_config.json's chat_template. Caller frees. */
static char *template_text(const char *path, size_t *len)
{
	char *text = read_file(path, len);
	if (!text) return NULL;
	size_t clen;
	char *from_cfg = config_template(text, *len, &clen);
	if (from_cfg) { free(text); text = from_cfg; *len = clen; }
	return text;
}

static int usage(void)
{
	fprintf(stderr, "usage: aah-jinja [--max-steps N] [--max-output N] [--max-memory N] TEMPLATE VARS.json\n"
	                "       aah-jinja --cases CASES VARS.json\n       aah-jinja --batch LIST.json\n");
	return 1;
}

int main(int argc, char **argv)
{
	jinja_limits lim = { 0 };
	static const struct option opts[] = {
		{ "max-steps", required_argument, NULL, 's' }, { "max-output", required_argument, NULL, 'o' },
		{ "max-memory", required_argument, NULL, 'm' }, { "help", no_argument, NULL, 'h' },
		{ "cases", required_argument, NULL, 'c' }, { "batch", required_argument, NULL, 'b' }, { NULL, 0, NULL, 0 },
	};
	const char *cases = NULL, *batch = NULL;
	int ch;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		char *end;
		errno = 0;
		if (ch == 'c') { cases = optarg; continue; }
		if (ch == 'b') { batch = optarg; continue; }
		unsigned long long v = ch == 'h' || ch == '?' ? 0 : strtoull(optarg, &end, 10);
		if (ch == 'h' || ch == '?' || errno || *end || v == 0) return usage();
		if (ch == 's') lim.max_steps = v;
		else if (ch == 'o') lim.max_output = (size_t)v;
		else lim.max_memory = (size_t)v;
	}
	if (batch) return argc == optind ? run_batch(batch, &lim) : usage();
	if (argc - optind != (cases ? 1 : 2)) return usage();
	size_t tlen, vlen;
	char *text = read_file(cases ? cases : argv[optind], &tlen);
	if (!text) { fprintf(stderr, "aah-jinja: cannot read %s: %s\n", argv[optind], strerror(errno)); return 1; }
	size_t clen;
	char *from_cfg = cases ? NULL : config_template(text, tlen, &clen);
	if (from_cfg) { free(text); text = from_cfg; tlen = clen; }
	const char *vpath = argv[cases ? optind : optind + 1];
	char *vtext = read_file(vpath, &vlen);
	if (!vtext) { fprintf(stderr, "aah-jinja: cannot read %s: %s\n", vpath, strerror(errno)); free(text); return 1; }
	json_error_t je;
	json_t *vars = json_loadb(vtext, vlen, JSON_ALLOW_NUL, &je);
	free(vtext);
	if (!vars || !json_is_object(vars)) {
		fprintf(stderr, "aah-jinja: %s: not a JSON object (line %d: %s)\n", vpath, je.line, je.text);
		json_decref(vars);
		free(text);
		return 1;
	}
	if (cases) {
		int rc = run_cases(text, tlen, vars, &lim);
		free(text);
		json_decref(vars);
		return rc;
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
