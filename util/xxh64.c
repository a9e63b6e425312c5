/* XXH64 (the xxHash specification), streaming. */
#include <string.h>

#include "qac_util.h"

#define XXP1 0x9E3779B185EBCA87ULL
#define XXP2 0xC2B2AE3D27D4EB4FULL
#define XXP3 0x165667B19E3779F9ULL
#define XXP4 0x85EBCA77C2B2AE63ULL
#define XXP5 0x27D4EB2F165667C5ULL

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t rd64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static uint32_t rd32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t xx_round(uint64_t acc, uint64_t in) { return rotl64(acc + in * XXP2, 31) * XXP1; }
static uint64_t xx_merge(uint64_t h, uint64_t v) { return (h ^ xx_round(0, v)) * XXP1 + XXP4; }

void qac_xxh64_init(qac_xxh64 *s) {
    memset(s, 0, sizeof *s);
    s->v[0] = XXP1 + XXP2;
    s->v[1] = XXP2;
    s->v[2] = 0;
    s->v[3] = 0 - XXP1;
}

void qac_xxh64_update(qac_xxh64 *s, const void *data, size_t len) {
    const unsigned char *p = data, *end = p + len;
    s->total += len;
    if (s->memsize + len < 32) {
        if (len) memcpy(s->mem + s->memsize, p, len);
        s->memsize += len;
        return;
    }
    if (s->memsize) {
        size_t fill = 32 - s->memsize;
        memcpy(s->mem + s->memsize, p, fill);
        for (int i = 0; i < 4; i++) s->v[i] = xx_round(s->v[i], rd64(s->mem + 8 * i));
        p += fill;
        s->memsize = 0;
    }
    while (end - p >= 32) {
        for (int i = 0; i < 4; i++) s->v[i] = xx_round(s->v[i], rd64(p + 8 * i));
        p += 32;
    }
    if (p < end) {
        memcpy(s->mem, p, (size_t)(end - p));
        s->memsize = (size_t)(end - p);
    }
}

uint64_t qac_xxh64_digest(const qac_xxh64 *s) {
    uint64_t h;
    if (s->total >= 32) {
        h = rotl64(s->v[0], 1) + rotl64(s->v[1], 7) + rotl64(s->v[2], 12) + rotl64(s->v[3], 18);
        for (int i = 0; i < 4; i++) h = xx_merge(h, s->v[i]);
    } else h = XXP5;
    h += s->total;
    const unsigned char *p = s->mem, *end = p + s->memsize;
    for (; end - p >= 8; p += 8) h = rotl64(h ^ xx_round(0, rd64(p)), 27) * XXP1 + XXP4;
    if (end - p >= 4) {
        h = rotl64(h ^ ((uint64_t)rd32(p) * XXP1), 23) * XXP2 + XXP3;
        p += 4;
    }
    for (; p < end; p++) h = rotl64(h ^ (*p * XXP5), 11) * XXP1;
    h ^= h >> 33;
    h *= XXP2;
    h ^= h >> 29;
    h *= XXP3;
    h ^= h >> 32;
    return h;
}
