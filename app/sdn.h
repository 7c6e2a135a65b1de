/* sdn_: systemd's service notification protocol, spoken directly (a datagram
 * to $NOTIFY_SOCKET; "@" names an abstract socket) so inferd needs no
 * libsystemd. Outside systemd every call does nothing. */
#ifndef INFERD_SDN_H
#define INFERD_SDN_H

#include <stdint.h>

#include "engine/common.h"

typedef struct sdn sdn;

/* Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID. Fails only for a
 * malformed NOTIFY_SOCKET or out of memory. */
int sdn_create(sdn **out, inf_err *err);
void sdn_destroy(sdn *n); /* NULL-safe */

/* Sends one notification, e.g. "READY=1" or "STATUS=loading 40%". */
void sdn_send(sdn *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The watchdog period systemd asked for (WatchdogSec), in microseconds,
 * or 0 when there is none or it is meant for another process. */
uint64_t sdn_watchdog_usec(const sdn *n);

#endif
