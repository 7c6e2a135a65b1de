#include "app/sdn.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct sdn {
    int fd;                  /* -1: not under systemd                       */
    struct sockaddr_un addr;
    socklen_t addr_len;
    uint64_t watchdog_usec;
};

int sdn_create(sdn **out, inf_err *err)
{
    sdn *n = calloc(1, sizeof *n);
    if (!n)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    n->fd = -1;
    const char *path = getenv("NOTIFY_SOCKET");
    if (path && *path) {
        size_t len = strlen(path);
        if ((path[0] != '/' && path[0] != '@') || len >= sizeof n->addr.sun_path) {
            free(n);
            return inf_fail(err, INF_ERR_INVALID, "NOTIFY_SOCKET '%s' is not a socket path", path);
        }
        n->addr.sun_family = AF_UNIX;
        memcpy(n->addr.sun_path, path, len);
        if (path[0] == '@') /* abstract namespace */
            n->addr.sun_path[0] = '\0';
        n->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
        n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    }
    const char *wd = getenv("WATCHDOG_USEC"), *wpid = getenv("WATCHDOG_PID");
    if (wd && (!wpid || atol(wpid) == (long)getpid()))
        n->watchdog_usec = strtoull(wd, NULL, 10);
    *out = n;
    return INF_OK;
}

void sdn_destroy(sdn *n)
{
    if (!n)
        return;
    if (n->fd >= 0)
        close(n->fd);
    free(n);
}

void sdn_send(sdn *n, const char *fmt, ...)
{
    if (!n || n->fd < 0)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (len > 0)
        sendto(n->fd, msg, (size_t)len < sizeof msg ? (size_t)len : sizeof msg - 1, MSG_NOSIGNAL,
               (const struct sockaddr *)&n->addr, n->addr_len);
}

uint64_t sdn_watchdog_usec(const sdn *n) { return n ? n->watchdog_usec : 0; }
