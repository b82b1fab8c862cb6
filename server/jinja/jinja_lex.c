/* server/jinja/jinja_lex.c — the Jinja2 lexer: template text, {{ }}, {% %} and {# #} tags, and the tokens inside tags,
 * with the whitespace rules Hugging Face renders under (trim_blocks, lstrip_blocks, {%- -%} and {%+ +%}), as
 * pallets/jinja's lexer.py applies them. Also the UTF-8 helpers the other parts share. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja/jinja_impl.h"

size_t ju_decode(const char *s, size_t n, uint32_t *cp)
{
	const unsigned char *u = (const unsigned char *)s;
	if (u[0] < 0x80) { *cp = u[0]; return 1; }
	if ((u[0] & 0xE0) == 0xC0 && n >= 2) { *cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F); return 2; }
	if ((u[0] & 0xF0) == 0xE0 && n >= 3) {
		*cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
		return 3;
	}
	if ((u[0] & 0xF8) == 0xF0 && n >= 4) {
		*cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) |
		      (u[3] & 0x3F);
		return 4;
	}
	*cp = u[0];
	return 1;
}

size_t ju_encode(uint32_t cp, char *out)
{
	unsigned char *o = (unsigned char *)out;
	if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
	if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | (cp >> 6)); o[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
	if (cp < 0x10000) {
		o[0] = (unsigned char)(0xE0 | (cp >> 12));
		o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (unsigned char)(0xF0 | (cp >> 18));
	o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}

size_t ju_count(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xC0) != 0x80;
	return k;
}

/* str.isspace(), which is also what Python's \s matches in a str pattern. */
bool ju_isspace(uint32_t cp)
{
	if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F))
		return true;
	if (cp < 0x80)
		return false;
	return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
	       cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF): the bytes checked, or the offset of the first bad one. */
static size_t utf8_valid_prefix(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	while (i < n) {
		unsigned char b = u[i];
		size_t k;
		uint32_t min;
		if (b < 0x80) { i++; continue; }
		if ((b & 0xE0) == 0xC0) { k = 2; min = 0x80; }
		else if ((b & 0xF0) == 0xE0) { k = 3; min = 0x800; }
		else if ((b & 0xF8) == 0xF0) { k = 4; min = 0x10000; }
		else return i;
		if (i + k > n) return i;
		for (size_t j = 1; j < k; j++)
			if ((u[i + j] & 0xC0) != 0x80) return i;
		uint32_t cp;
		ju_decode(s + i, k, &cp);
		if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
		i += k;
	}
	return n;
}

typedef struct lexer {
	const char *s;           /* normalised source */
	size_t n;
	jinja_tokens *out;
	char *err;
	size_t err_len;
	size_t lc_off;           /* a cursor for offset → line, column (offsets are asked in increasing order) */
	uint32_t lc_line, lc_col;
	int32_t balance[JINJA_MAX_PARSE_DEPTH];
	int32_t n_balance;
} lexer;

static void lex_linecol(lexer *lx, size_t off, uint32_t *line, uint32_t *col)
{
	if (off < lx->lc_off) { lx->lc_off = 0; lx->lc_line = 1; lx->lc_col = 1; }
	for (; lx->lc_off < off && lx->lc_off < lx->n; lx->lc_off++) {
		unsigned char ch = (unsigned char)lx->s[lx->lc_off];
		if (ch == '\n') { lx->lc_line++; lx->lc_col = 1; }
		else if ((ch & 0xC0) != 0x80) lx->lc_col++;
	}
	*line = lx->lc_line;
	*col = lx->lc_col;
}

static int lex_fail(lexer *lx, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int lex_fail(lexer *lx, size_t off, const char *fmt, ...)
{
	uint32_t line, col;
	lex_linecol(lx, off, &line, &col);
	int k = snprintf(lx->err, lx->err_len, "line %u, column %u: ", line, col);
	if (k >= 0 && (size_t)k < lx->err_len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(lx->err + k, lx->err_len - (size_t)k, fmt, ap);
		va_end(ap);
	}
	return -1;
}

static jinja_token *lex_push(lexer *lx, jinja_tok_kind kind, size_t off, const char *s, size_t len)
{
	jinja_tokens *t = lx->out;
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		jinja_token *v = realloc(t->v, cap * sizeof *v);
		if (!v) { lex_fail(lx, off, "out of memory"); return NULL; }
		t->v = v;
		t->cap = cap;
	}
	jinja_token *tok = &t->v[t->n++];
	memset(tok, 0, sizeof *tok);
	tok->kind = kind;
	lex_linecol(lx, off, &tok->line, &tok->col);
	tok->s = s;
	tok->len = len;
	return tok;
}

/* The whitespace character at s[i], or 0 bytes when there is none. */
static size_t space_at(const char *s, size_t n, size_t i)
{
	if (i >= n) return 0;
	uint32_t cp;
	size_t k = ju_decode(s + i, n - i, &cp);
	return ju_isspace(cp) ? k : 0;
}

static size_t skip_spaces(const char *s, size_t n, size_t i)
{
	size_t k;
	while ((k = space_at(s, n, i)) > 0)
		i += k;
	return i;
}

/* text.rstrip(): the length without trailing whitespace. */
static size_t rstrip_len(const char *s, size_t n)
{
	while (n > 0) {
		size_t b = n - 1;
		while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
		uint32_t cp;
		ju_decode(s + b, n - b, &cp);
		if (!ju_isspace(cp)) break;
		n = b;
	}
	return n;
}

static bool is_name_start(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }
static bool is_name_char(char ch) { return is_name_start(ch) || is_digit(ch); }

/* Digits with single underscores between them, as (\d+_)*\d+ reads them: the end, or i when none. */
static size_t scan_digits(const char *s, size_t n, size_t i)
{
	if (i >= n || !is_digit(s[i])) return i;
	while (i < n && is_digit(s[i])) {
		i++;
		if (i + 1 < n && s[i] == '_' && is_digit(s[i + 1])) i++;
	}
	return i;
}

/* A string literal at s[i] (a quote): its decoded value as Python's unicode-escape decodes it. */
static int lex_string(lexer *lx, size_t i, size_t *end)
{
	char q = lx->s[i];
	size_t j = i + 1;
	while (j < lx->n && lx->s[j] != q) {
		if (lx->s[j] == '\\' && j + 1 < lx->n) j++;
		j++;
	}
	if (j >= lx->n) return lex_fail(lx, i, "unterminated string");
	size_t raw_len = j - (i + 1);
	char *v = malloc(raw_len + 1);
	if (!v) return lex_fail(lx, i, "out of memory");
	const char *r = lx->s + i + 1;
	size_t o = 0;
	for (size_t k = 0; k < raw_len; k++) {
		if (r[k] != '\\' || k + 1 >= raw_len) { v[o++] = r[k]; continue; }
		char e = r[++k];
		uint32_t cp = 0;
		int hex = 0;
		switch (e) {
		case '\n': continue;              /* a backslash-newline joins lines */
		case '\\': v[o++] = '\\'; continue;
		case '\'': v[o++] = '\''; continue;
		case '"': v[o++] = '"'; continue;
		case 'a': v[o++] = '\a'; continue;
		case 'b': v[o++] = '\b'; continue;
		case 'f': v[o++] = '\f'; continue;
		case 'n': v[o++] = '\n'; continue;
		case 'r': v[o++] = '\r'; continue;
		case 't': v[o++] = '\t'; continue;
		case 'v': v[o++] = '\v'; continue;
		case 'x': hex = 2; break;
		case 'u': hex = 4; break;
		case 'U': hex = 8; break;
		case 'N':
			free(v);
			return lex_fail(lx, i, "\\N{...} escapes are not supported");
		default:
			if (e >= '0' && e <= '7') {   /* up to three octal digits */
				int d = 0;
				while (d < 3 && k < raw_len && r[k] >= '0' && r[k] <= '7') { cp = cp * 8 + (uint32_t)(r[k] - '0'); k++; d++; }
				k--;
				o += ju_encode(cp, v + o);
				continue;
			}
			v[o++] = '\\';                 /* an unknown escape stays as it is */
			v[o++] = e;
			continue;
		}
		for (int d = 0; d < hex; d++) {
			char h = k + 1 + (size_t)d < raw_len ? r[k + 1 + d] : 0;
			int x = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 :
			        h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
			if (x < 0) { free(v); return lex_fail(lx, i, "truncated \\%c escape in a string", e); }
			cp = cp * 16 + (uint32_t)x;
		}
		k += (size_t)hex;
		if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
			free(v);
			return lex_fail(lx, i, "escape \\%c in a string is not a character", e);
		}
		o += ju_encode(cp, v + o);   /* never longer than the escape it replaces */
	}
	v[o] = 0;
	jinja_token *t = lex_push(lx, JT_STRING, i, v, o);
	if (!t) { free(v); return -1; }
	*end = j + 1;
	return 0;
}

static const char *const two_char_ops[] = { "//", "**", "==", "!=", "<=", ">=" };
static const char single_ops[] = "+-*/%~[](){}<>=.:|,;";

/* The tokens of one tag from s[i] up to and including its end; *end is the offset after it (and after what
 * trim_blocks or '-' strips); *line_start says whether what was consumed ends in a newline. */
static int lex_tag(lexer *lx, size_t i, bool block, size_t *end, bool *line_start)
{
	const char *s = lx->s;
	size_t n = lx->n;
	lx->n_balance = 0;
	for (;;) {
		i = skip_spaces(s, n, i);
		if (i >= n)
			return lex_fail(lx, i, "unexpected end of template: the tag has no %s", block ? "'%}'" : "'}}'");
		if (lx->n_balance == 0) {
			char c1 = s[i], c2 = i + 1 < n ? s[i + 1] : 0, c3 = i + 2 < n ? s[i + 2] : 0;
			const char *close = block ? "%}" : "}}";
			int sign = 0;
			size_t at = 0;
			if ((c1 == '-' || (block && c1 == '+')) && c2 == close[0] && c3 == close[1]) { sign = c1; at = i + 3; }
			else if (c1 == close[0] && c2 == close[1]) at = i + 2;
			if (at) {
				if (!lex_push(lx, block ? JT_BLOCK_END : JT_VAR_END, i, s + i, at - i)) return -1;
				if (sign == '-') at = skip_spaces(s, n, at);
				else if (block && sign != '+' && at < n && s[at] == '\n') at++;
				*end = at;
				*line_start = at > 0 && s[at - 1] == '\n';
				return 0;
			}
		}
		char ch = s[i];
		if (is_name_start(ch)) {
			size_t j = i;
			while (j < n && is_name_char(s[j])) j++;
			if (!lex_push(lx, JT_NAME, i, s + i, j - i)) return -1;
			i = j;
			continue;
		}
		if (is_digit(ch)) {
			size_t j = scan_digits(s, n, i);
			bool is_float = false;
			bool after_dot = i > 0 && s[i - 1] == '.';
			if (!after_dot && j + 1 < n && s[j] == '.' && is_digit(s[j + 1])) { j = scan_digits(s, n, j + 1); is_float = true; }
			if (!after_dot && j < n && (s[j] == 'e' || s[j] == 'E')) {
				size_t k = j + 1;
				if (k < n && (s[k] == '+' || s[k] == '-')) k++;
				size_t e = scan_digits(s, n, k);
				if (e > k) { j = e; is_float = true; }
			}
			char num[128];
			size_t m = 0;
			for (size_t k = i; k < j && m + 1 < sizeof num; k++)
				if (s[k] != '_') num[m++] = s[k];
			num[m] = 0;
			if (j - i >= sizeof num - 1) return lex_fail(lx, i, "number too long");
			jinja_token *t = lex_push(lx, is_float ? JT_FLOAT : JT_INT, i, s + i, j - i);
			if (!t) return -1;
			if (is_float)
				t->f = strtod(num, NULL);
			else {
				int64_t v = 0;
				for (size_t k = 0; k < m; k++) {
					if (v > (INT64_MAX - (num[k] - '0')) / 10)
						return lex_fail(lx, i, "integer %s does not fit in 64 bits", num);
					v = v * 10 + (num[k] - '0');
				}
				t->i = v;
			}
			i = j;
			continue;
		}
		if (ch == '\'' || ch == '"') {
			if (lex_string(lx, i, &i) < 0) return -1;
			continue;
		}
		size_t oplen = 0;
		for (size_t k = 0; k < sizeof two_char_ops / sizeof *two_char_ops; k++)
			if (i + 1 < n && s[i] == two_char_ops[k][0] && s[i + 1] == two_char_ops[k][1]) { oplen = 2; break; }
		if (!oplen && ch && strchr(single_ops, ch)) oplen = 1;
		if (!oplen) {
			uint32_t cp;
			ju_decode(s + i, n - i, &cp);
			if (cp < 0x20 || cp == 0x7F) return lex_fail(lx, i, "unexpected character U+%04X", (unsigned)cp);
			return lex_fail(lx, i, "unexpected character '%.*s'", (int)ju_decode(s + i, n - i, &cp), s + i);
		}
		if (oplen == 1 && (ch == '(' || ch == '[' || ch == '{')) {
			if (lx->n_balance == JINJA_MAX_PARSE_DEPTH)
				return lex_fail(lx, i, "brackets nested deeper than %d", JINJA_MAX_PARSE_DEPTH);
			lx->balance[lx->n_balance++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
		} else if (oplen == 1 && (ch == ')' || ch == ']' || ch == '}')) {
			if (lx->n_balance == 0) return lex_fail(lx, i, "unexpected '%c'", ch);
			if (lx->balance[lx->n_balance - 1] != ch)
				return lex_fail(lx, i, "unexpected '%c', expected '%c'", ch, lx->balance[lx->n_balance - 1]);
			lx->n_balance--;
		}
		if (!lex_push(lx, JT_OP, i, s + i, oplen)) return -1;
		i += oplen;
	}
}

/* {% raw %} … {% endraw %}: at s[i] a block start; if it is a raw tag, *is_raw and the text up to the endraw tag. */
static int lex_raw(lexer *lx, size_t i, bool *is_raw, size_t *text_end, size_t *end, bool *line_start)
{
	const char *s = lx->s;
	size_t n = lx->n;
	size_t j = i + 2;
	if (j < n && (s[j] == '-' || s[j] == '+')) j++;
	j = skip_spaces(s, n, j);
	*is_raw = false;
	if (!(j + 3 <= n && memcmp(s + j, "raw", 3) == 0 && (j + 3 == n || !is_name_char(s[j + 3])))) return 0;
	j = skip_spaces(s, n, j + 3);
	if (j < n && (s[j] == '-' || s[j] == '+')) j++;
	if (!(j + 2 <= n && s[j] == '%' && s[j + 1] == '}')) return 0;
	*is_raw = true;
	size_t body = j + 2;
	if (s[j - 1] == '-') body = skip_spaces(s, n, body);   /* no trim_blocks after a raw tag: lexer.py has none */
	for (size_t k = body; k + 1 < n; k++) {
		if (s[k] != '{' || s[k + 1] != '%') continue;
		size_t m = k + 2;
		bool strip = m < n && s[m] == '-';
		if (m < n && (s[m] == '-' || s[m] == '+')) m++;
		m = skip_spaces(s, n, m);
		if (!(m + 6 <= n && memcmp(s + m, "endraw", 6) == 0)) continue;
		m = skip_spaces(s, n, m + 6);
		int sign = 0;
		if (m < n && (s[m] == '-' || s[m] == '+')) sign = s[m++];
		if (!(m + 2 <= n && s[m] == '%' && s[m + 1] == '}')) continue;
		m += 2;
		*text_end = strip ? body + rstrip_len(s + body, k - body) : k;
		if (*text_end < body) *text_end = body;
		if (sign == '-') m = skip_spaces(s, n, m);
		else if (sign != '+' && m < n && s[m] == '\n') m++;
		if (!lex_push(lx, JT_TEXT, body, s + body, *text_end - body)) return -1;
		*end = m;
		*line_start = m > 0 && s[m - 1] == '\n';
		return 0;
	}
	return lex_fail(lx, i, "{%% raw %%} without {%% endraw %%}");
}

int jinja_lex(const char *src, size_t len, jinja_tokens *out, char *err, size_t err_len)
{
	memset(out, 0, sizeof *out);
	lexer lx = { .out = out, .err = err, .err_len = err_len, .lc_line = 1, .lc_col = 1 };
	if (err_len) err[0] = 0;
	/* \r\n and \r become \n, and one final newline goes (keep_trailing_newline=False), as lexer.py does. */
	char *s = malloc(len + 1);
	if (!s) { snprintf(err, err_len, "line 1, column 1: out of memory"); return -1; }
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') { s[n++] = '\n'; if (i + 1 < len && src[i + 1] == '\n') i++; }
		else s[n++] = src[i];
	}
	if (n > 0 && s[n - 1] == '\n') n--;
	s[n] = 0;
	out->src = s;
	out->src_len = n;
	lx.s = s;
	lx.n = n;
	size_t bad = utf8_valid_prefix(s, n);
	if (bad < n) return lex_fail(&lx, bad, "the template is not valid UTF-8");
	for (size_t i = 0; i < n; i++)
		if (s[i] == 0) return lex_fail(&lx, i, "the template holds a NUL byte");

	size_t pos = 0;
	bool line_starting = true;
	while (pos < n) {
		const char *open = NULL;
		for (size_t k = pos; k + 1 < n; k++)
			if (s[k] == '{' && (s[k + 1] == '{' || s[k + 1] == '%' || s[k + 1] == '#')) { open = s + k; break; }
		if (!open) {
			if (!lex_push(&lx, JT_TEXT, pos, s + pos, n - pos)) return -1;
			break;
		}
		size_t k = (size_t)(open - s);
		char kind = s[k + 1];
		char sign = k + 2 < n && (s[k + 2] == '-' || s[k + 2] == '+') ? s[k + 2] : 0;
		size_t text_len = k - pos;
		if (sign == '-')
			text_len = rstrip_len(s + pos, text_len);
		else if (sign != '+' && kind != '{') {
			/* lstrip_blocks: spaces from the start of a line up to a block or comment tag go */
			size_t l = text_len;
			while (l > 0 && s[pos + l - 1] != '\n') l--;
			if ((l > 0 || line_starting) && l < text_len && skip_spaces(s + pos, text_len, l) == text_len)
				text_len = l;
		}
		if (text_len && !lex_push(&lx, JT_TEXT, pos, s + pos, text_len)) return -1;
		if (kind == '#') {
			size_t e = k + 2 + (sign ? 1 : 0);
			while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
			if (e + 1 >= n) return lex_fail(&lx, k, "comment without '#}'");
			char esign = e > k + 2 && (s[e - 1] == '-' || s[e - 1] == '+') ? s[e - 1] : 0;
			pos = e + 2;
			if (esign == '-') pos = skip_spaces(s, n, pos);
			else if (esign != '+' && pos < n && s[pos] == '\n') pos++;
			line_starting = s[pos - 1] == '\n';
			continue;
		}
		if (kind == '%') {
			bool is_raw;
			if (lex_raw(&lx, k, &is_raw, &(size_t){ 0 }, &pos, &line_starting) < 0) return -1;
			if (is_raw) continue;
		}
		if (!lex_push(&lx, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, k, s + k, 2)) return -1;
		if (lex_tag(&lx, k + 2 + (sign ? 1 : 0), kind == '%', &pos, &line_starting) < 0) return -1;
	}
	return lex_push(&lx, JT_EOF, n, s + n, 0) ? 0 : -1;
}

void jinja_tokens_free(jinja_tokens *t)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->v[i].kind == JT_STRING) free((void *)t->v[i].s);
	free(t->v);
	free(t->src);
	memset(t, 0, sizeof *t);
}
