/* server/api_keys.c — the named API keys file (see api_keys.h). */
#include "server/api_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_credentials.h"

static bool name_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
	       c == '-';
}

int api_keys_add(api_keys *ks, const char *name, const char *key, char *err, size_t err_len)
{
	for (int i = 0; i < ks->n; i++) {
		if (!strcmp(ks->k[i].key, key)) {
			snprintf(err, err_len, "the key of '%s' is also the key of '%s'", name, ks->k[i].name);
			return -1;
		}
		if (!strcmp(ks->k[i].name, name)) {
			snprintf(err, err_len, "the name '%s' is given twice", name);
			return -1;
		}
	}
	if (ks->n >= API_KEYS_MAX) {
		snprintf(err, err_len, "more than %d keys", API_KEYS_MAX);
		return -1;
	}
	api_key *k = realloc(ks->k, (size_t)(ks->n + 1) * sizeof *k);
	if (!k) {
		snprintf(err, err_len, "out of memory");
		return -1;
	}
	ks->k = k;
	snprintf(k[ks->n].name, sizeof k[ks->n].name, "%s", name);
	snprintf(k[ks->n].key, sizeof k[ks->n].key, "%s", key);
	ks->n++;
	return 0;
}

int api_keys_parse(api_keys *out, const char *text, size_t len, char *err, size_t err_len)
{
	memset(out, 0, sizeof *out);
	size_t at = 0;
	for (int line = 1; at < len; line++) {
		size_t end = at;
		while (end < len && text[end] != '\n')
			end++;
		size_t e = end;
		if (e > at && text[e - 1] == '\r')
			e--;
		size_t p = at;
		at = end + 1;
		while (p < e && (text[p] == ' ' || text[p] == '\t'))
			p++;
		if (p == e || text[p] == '#')
			continue;
		char name[API_KEY_NAME_MAX + 1], key[API_KEY_MAX + 1];
		size_t n = 0;
		for (; p < e && text[p] != ' ' && text[p] != '\t'; p++) {
			if (!name_char(text[p]) || n == API_KEY_NAME_MAX) {
				snprintf(err, err_len, "line %d: a name is 1 to %d of A-Z a-z 0-9 . _ -", line, API_KEY_NAME_MAX);
				return -1;
			}
			name[n++] = text[p];
		}
		name[n] = 0;
		while (p < e && (text[p] == ' ' || text[p] == '\t'))
			p++;
		size_t k = 0;
		for (; p < e && text[p] != ' ' && text[p] != '\t'; p++) {
			unsigned char c = (unsigned char)text[p];
			if (c < 0x21 || c > 0x7e || k == API_KEY_MAX) {
				snprintf(err, err_len, "line %d: the key of '%s' must be 1 to %d printable ASCII characters", line,
				         name, API_KEY_MAX);
				return -1;
			}
			key[k++] = (char)c;
		}
		key[k] = 0;
		while (p < e && (text[p] == ' ' || text[p] == '\t'))
			p++;
		if (k == 0 || p != e) {
			snprintf(err, err_len, "line %d: want 'NAME KEY'", line);
			return -1;
		}
		char why[192];
		if (api_keys_add(out, name, key, why, sizeof why) != 0) {
			snprintf(err, err_len, "line %d: %s", line, why);
			return -1;
		}
	}
	return 0;
}

int api_keys_load(api_keys *out, const char *path, char *err, size_t err_len)
{
	memset(out, 0, sizeof *out);
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, err_len, "%s: cannot open it", path);
		return -1;
	}
	enum { CAP = 1 << 20 };
	char *buf = malloc(CAP + 1);
	size_t n = buf ? fread(buf, 1, CAP + 1, f) : 0;
	bool bad = ferror(f);
	fclose(f);
	if (!buf || bad || n > CAP) {
		snprintf(err, err_len, "%s: %s", path, !buf ? "out of memory" : bad ? "read error" : "larger than 1 MiB");
		free(buf);
		return -1;
	}
	char why[256];
	int rc = api_keys_parse(out, buf, n, why, sizeof why);
	free(buf);
	if (rc == 0 && out->n == 0) {
		snprintf(why, sizeof why, "no key in it");
		rc = -1;
	}
	if (rc != 0)
		snprintf(err, err_len, "%s: %s", path, why);
	return rc;
}

void api_keys_free(api_keys *ks)
{
	free(ks->k);
	memset(ks, 0, sizeof *ks);
}

const char *api_keys_match(const api_keys *ks, const char *header)
{
	const char *found = NULL;
	for (int i = 0; i < ks->n; i++)
		if (http_credentials_match(header, ks->k[i].key) && !found)
			found = ks->k[i].name;
	return found;
}
