/* server/signals.h — SIGTERM and SIGINT as events: blocked in every thread (call signals_block before the first
 * thread starts) and received by the main thread with a timed wait, so no handler runs in a random thread. */
#ifndef AAH_SERVER_SIGNALS_H
#define AAH_SERVER_SIGNALS_H

/* Blocks SIGTERM and SIGINT in the calling thread (threads made after inherit it) and ignores SIGPIPE. */
void signals_block(void);
/* Waits up to timeout_ms (-1: no limit) for SIGTERM or SIGINT. Returns the signal, or 0 on timeout. */
int signals_wait(int timeout_ms);

#endif
