/* engine/grammar/gbnf_text.c — see gbnf_text.h. */
#include "engine/grammar/gbnf_text.h"

#include <stdio.h>

static int gbnf_escaped_cp(char *out, uint32_t cp)
{
	if (cp < 0x80)
		return snprintf(out, 12, "\\x%02X", (unsigned)cp);
	return snprintf(out, 12, cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", (unsigned)cp);
}

int gbnf_literal_cp(char *out, uint32_t cp)
{
	if (cp == '"' || cp == '\\')
		return snprintf(out, 12, "\\%c", (char)cp);
	if (cp >= 0x20 && cp < 0x7F)
		return snprintf(out, 12, "%c", (char)cp);
	if (cp == '\n' || cp == '\t' || cp == '\r')
		return snprintf(out, 12, "\\%c", cp == '\n' ? 'n' : cp == '\t' ? 't' : 'r');
	return gbnf_escaped_cp(out, cp);
}

int gbnf_class_cp(char *out, uint32_t cp)
{
	if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == ' ')
		return snprintf(out, 12, "%c", (char)cp);
	return gbnf_escaped_cp(out, cp);
}
