/* server/http_answer.h — an answer the HTTP front writes itself (a framing refusal, a deadline, the connection limit):
 * a whole HTTP/1.1 response with Connection: close and the API's error object as its body. */
#ifndef AAH_SERVER_HTTP_ANSWER_H
#define AAH_SERVER_HTTP_ANSWER_H

#include <stddef.h>

/* Writes the response into dst (room bytes): status line, Content-Type, Content-Length, Connection: close,
 * Retry-After when retry > 0, then {"error": {"message", "type", "param": null, "code"}}. msg may hold any bytes (a
 * client's): each outside printable ASCII becomes '?'. Returns the bytes written, or 0 (nothing) when it does not
 * fit. */
size_t http_answer_format(char *dst, size_t room, int status, const char *type, const char *code, int retry,
                          const char *msg);

#endif
