/* X-Request-Id values (srv_internal.h, qac_request_id): the client's own
 * when it is valid, else a fresh one from the server's seed and counter.
 *
 * Below every file that needs one: srv_http.c (each request's id), the
 * gate and the rerank stage (ids of the requests they make up themselves).
 * It was in srv_router.c, which srv_rerank.c took it from while the router
 * took the rerank handler from srv_rerank.c. */
#include <ctype.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "srv_internal.h"

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static int request_id_valid(const char *v) {
    size_t n = 0;
    for (; v[n]; n++)
        if (n >= 128 || !(isalnum((unsigned char)v[n]) || strchr("-_.:/+=@", v[n]))) return 0;
    return n > 0;
}

void qac_request_id(qac_server *s, const char *client, char *out, size_t cap) {
    if (client && request_id_valid(client) && strlen(client) < cap) {
        memcpy(out, client, strlen(client) + 1);
        return;
    }
    uint64_t k = atomic_fetch_add(&s->rid_next, 1);
    snprintf(out, cap, "%016llx%016llx", (unsigned long long)splitmix64(s->rid_seed ^ k),
             (unsigned long long)splitmix64(~s->rid_seed + k));
}
