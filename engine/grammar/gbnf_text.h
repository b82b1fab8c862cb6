/* engine/grammar/gbnf_text.h — writing GBNF source. Depends on nothing, so that a front end's command-line test can
 * link it alone. */
#ifndef AAH_GRAMMAR_GBNF_TEXT_H
#define AAH_GRAMMAR_GBNF_TEXT_H

#include <stdint.h>

/* Writing GBNF: code point cp as it stands inside a "…" literal, or inside a […] class, into out (room for 11 bytes
 * and a NUL); returns the bytes written. The one spelling every front end (JSON Schema, regex, tool calls) uses:
 * - in a literal, printable ASCII as itself but '"' and '\\', which take a backslash; \n, \t and \r by name;
 * - in a class, only letters, digits and the space as themselves, so that no character with a meaning there (] \\ ^ -)
 *   or to a careless reader (" #) is ever bare;
 * - anything else as \xHH below 0x80, \uHHHH in the BMP, \UHHHHHHHH beyond (in GBNF \xHH is a code point, not a
 *   byte). */
int gbnf_literal_cp(char *out, uint32_t cp);
int gbnf_class_cp(char *out, uint32_t cp);

#endif
