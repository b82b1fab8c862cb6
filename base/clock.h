/* base/clock.h — the one monotonic clock that durations, rates and deadlines are measured on. base/ holds the leaf
 * helpers every folder may use; it includes nothing of ours. */
#ifndef AAH_BASE_CLOCK_H
#define AAH_BASE_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds on CLOCK_MONOTONIC (an arbitrary origin: only differences mean anything). */
double aah_now_s(void);

#ifdef __cplusplus
}
#endif
#endif
