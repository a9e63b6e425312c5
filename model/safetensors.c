/* safetensors reader (mmap, validated up front) and crash-safe writer. */
#include "qac_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qac_util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; qac assumes a little-endian host"
#endif

struct qac_safetensors {
    char *label;
    const unsigned char *base; /* whole file */
    size_t len;
    const unsigned char *data; /* data buffer after the header */
    size_t data_len;
    int mapped;
    json_t *root;              /* owns the name and dtype strings */
    json_t *metadata;          /* borrowed from root, may be NULL */
    qac_st_tensor *tensors;    /* by data offset */
    int n;
    int *by_name;              /* indices sorted by name */
};

static const struct {
    const char *name;
    qac_st_dtype dtype;
    size_t size;
} dtype_table[] = {
    {"F32", QAC_ST_F32, 4},   {"F16", QAC_ST_F16, 2},       {"BF16", QAC_ST_BF16, 2},
    {"F64", QAC_ST_F64, 8},   {"I64", QAC_ST_I64, 8},       {"I32", QAC_ST_I32, 4},
    {"I16", QAC_ST_I16, 2},   {"I8", QAC_ST_I8, 1},         {"U8", QAC_ST_U8, 1},
    {"U16", QAC_ST_U16, 2},   {"U32", QAC_ST_U32, 4},       {"U64", QAC_ST_U64, 8},
    {"BOOL", QAC_ST_BOOL, 1}, {"F8_E4M3", QAC_ST_F8_E4M3, 1}, {"F8_E5M2", QAC_ST_F8_E5M2, 1},
};
#define N_DTYPES ((int)(sizeof dtype_table / sizeof dtype_table[0]))

const char *qac_st_dtype_name(qac_st_dtype d) {
    for (int i = 0; i < N_DTYPES; i++)
        if (dtype_table[i].dtype == d) return dtype_table[i].name;
    return "unknown";
}

size_t qac_st_dtype_size(qac_st_dtype d) {
    for (int i = 0; i < N_DTYPES; i++)
        if (dtype_table[i].dtype == d) return dtype_table[i].size;
    return 0;
}

static qac_st_dtype dtype_from_name(const char *s) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(dtype_table[i].name, s) == 0) return dtype_table[i].dtype;
    return QAC_ST_UNKNOWN;
}

/* ---- half conversions (bit-exact with torch / c10) ---- */

uint16_t qac_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00;      /* NaN: canonical quiet NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00;     /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {                           /* below 2^-14: subnormal */
        if (ax < 0x33000000u) return sign;            /* <= 2^-25 rounds to zero */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e, q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = (ax - 0x38000000u) >> 13, rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float qac_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else {
            uint32_t e = 113;
            while (!(man & 0x400)) { man <<= 1; e--; }
            bits = sign | (e << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
    else bits = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t qac_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

float qac_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* ---- reader ---- */

static uint64_t read_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int cmp_offset(const void *a, const void *b) {
    const qac_st_tensor *x = a, *y = b;
    const unsigned char *px = x->data, *py = y->data;
    if (px != py) return px < py ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}
static int cmp_name_idx(const void *a, const void *b, void *ctx) {
    const qac_st_tensor *t = ctx;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

static qac_status get_uint(json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return QAC_ERR_FORMAT;
    *out = (uint64_t)json_integer_value(v);
    return QAC_OK;
}

static qac_status parse_entry(qac_safetensors *st, const char *name, json_t *v, qac_st_tensor *t) {
    const char *L = st->label;
    if (!json_is_object(v))
        return qac_set_error(QAC_ERR_FORMAT, "%s: entry \"%s\" is not a JSON object", L, name);
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
           *offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return qac_set_error(QAC_ERR_FORMAT, "%s: tensor \"%s\" has no string \"dtype\"", L, name);
    if (!json_is_array(shape))
        return qac_set_error(QAC_ERR_FORMAT, "%s: tensor \"%s\" has no \"shape\" array", L, name);
    if (!json_is_array(offs) || json_array_size(offs) != 2)
        return qac_set_error(QAC_ERR_FORMAT, "%s: tensor \"%s\" needs \"data_offsets\": [begin, end]", L, name);
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype_name = json_string_value(dt);
    t->dtype = dtype_from_name(t->dtype_name);
    size_t nd = json_array_size(shape);
    if (nd > QAC_ST_MAX_DIMS)
        return qac_set_error(QAC_ERR_FORMAT, "%s: tensor \"%s\" has %zu dimensions (at most %d)", L, name, nd,
                             QAC_ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    int overflow = 0;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        if (get_uint(json_array_get(shape, i), &d) != QAC_OK)
            return qac_set_error(QAC_ERR_FORMAT, "%s: tensor \"%s\": shape[%zu] is not a non-negative integer", L,
                                 name, i);
        t->shape[i] = (int64_t)d;
        if (d && numel > UINT64_MAX / d) overflow = 1;
        else numel *= d;
    }
    uint64_t b, e;
    if (get_uint(json_array_get(offs, 0), &b) != QAC_OK || get_uint(json_array_get(offs, 1), &e) != QAC_OK)
        return qac_set_error(QAC_ERR_FORMAT, "%s: tensor \"%s\": data_offsets are not non-negative integers", L,
                             name);
    if (b > e)
        return qac_set_error(QAC_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%llu, %llu] end before they begin",
                             L, name, (unsigned long long)b, (unsigned long long)e);
    if (e > st->data_len)
        return qac_set_error(QAC_ERR_FORMAT,
                             "%s: tensor \"%s\": data_offsets [%llu, %llu] run past the data buffer (%zu bytes; "
                             "truncated file?)",
                             L, name, (unsigned long long)b, (unsigned long long)e, st->data_len);
    size_t es = qac_st_dtype_size(t->dtype);
    if (es && (overflow || numel > UINT64_MAX / es || numel * es != e - b)) {
        char dims[160] = "";
        size_t k = 0;
        for (size_t i = 0; i < nd && k < sizeof dims - 24; i++)
            k += (size_t)snprintf(dims + k, sizeof dims - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        return qac_set_error(QAC_ERR_FORMAT,
                             "%s: tensor \"%s\": %s shape [%s] does not match data_offsets [%llu, %llu] (%llu "
                             "bytes)", L, name, t->dtype_name, dims, (unsigned long long)b, (unsigned long long)e,
                             (unsigned long long)(e - b));
    }
    if (overflow) return qac_set_error(QAC_ERR_FORMAT, "%s: tensor \"%s\": shape overflows", L, name);
    t->numel = numel;
    t->nbytes = e - b;
    t->data = st->data + b;
    return QAC_OK;
}

static qac_status parse_all(qac_safetensors *st) {
    const char *L = st->label;
    if (st->len < 8)
        return qac_set_error(QAC_ERR_FORMAT, "%s: %zu bytes is too short for a safetensors file (8-byte header "
                             "length missing)", L, st->len);
    uint64_t hlen = read_le64(st->base);
    if (hlen > st->len - 8)
        return qac_set_error(QAC_ERR_FORMAT,
                             "%s: header length %llu runs past the end of the file (%zu bytes; truncated or not "
                             "a safetensors file)", L, (unsigned long long)hlen, st->len);
    if (hlen > QAC_ST_MAX_HEADER)
        return qac_set_error(QAC_ERR_FORMAT, "%s: header length %llu exceeds the %u-byte limit", L,
                             (unsigned long long)hlen, QAC_ST_MAX_HEADER);
    if (hlen < 2 || st->base[8] != '{')
        return qac_set_error(QAC_ERR_FORMAT, "%s: header does not start with a JSON object", L);
    st->data = st->base + 8 + hlen;
    st->data_len = st->len - 8 - (size_t)hlen;
    json_error_t jerr;
    st->root = json_loadb((const char *)st->base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!st->root)
        return qac_set_error(QAC_ERR_FORMAT, "%s: corrupt JSON header at byte %d: %s", L, jerr.position, jerr.text);
    if (!json_is_object(st->root))
        return qac_set_error(QAC_ERR_FORMAT, "%s: header is not a JSON object", L);
    size_t count = json_object_size(st->root);
    st->tensors = calloc(count ? count : 1, sizeof *st->tensors);
    st->by_name = calloc(count ? count : 1, sizeof *st->by_name);
    if (!st->tensors || !st->by_name) return qac_set_error(QAC_ERR_NOMEM, "%s: out of memory", L);
    const char *key;
    json_t *v;
    json_object_foreach(st->root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v))
                return qac_set_error(QAC_ERR_FORMAT, "%s: \"__metadata__\" is not a JSON object", L);
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv))
                    return qac_set_error(QAC_ERR_FORMAT, "%s: __metadata__ value \"%s\" is not a string", L, mk);
            }
            st->metadata = v;
            continue;
        }
        qac_status s = parse_entry(st, key, v, &st->tensors[st->n]);
        if (s) return s;
        st->n++;
    }
    qsort(st->tensors, (size_t)st->n, sizeof *st->tensors, cmp_offset);
    const qac_st_tensor *prev = NULL;
    for (int i = 0; i < st->n; i++) {
        const qac_st_tensor *t = &st->tensors[i];
        if (!t->nbytes) continue;
        if (prev && (const unsigned char *)t->data < (const unsigned char *)prev->data + prev->nbytes)
            return qac_set_error(QAC_ERR_FORMAT, "%s: tensors \"%s\" and \"%s\" overlap in the data buffer", L,
                                 prev->name, t->name);
        prev = t;
    }
    for (int i = 0; i < st->n; i++) st->by_name[i] = i;
    qsort_r(st->by_name, (size_t)st->n, sizeof *st->by_name, cmp_name_idx, st->tensors);
    return QAC_OK;
}

static qac_status finish_open(qac_safetensors *st, qac_safetensors **out) {
    qac_status s = parse_all(st);
    if (s) {
        qac_safetensors_close(st);
        return s;
    }
    *out = st;
    return QAC_OK;
}

qac_status qac_safetensors_open_memory(qac_safetensors **out, const void *data, size_t len, const char *label) {
    *out = NULL;
    qac_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->label = strdup(label ? label : "<memory>"))) {
        free(st);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    st->base = data;
    st->len = len;
    return finish_open(st, out);
}

qac_status qac_safetensors_open(qac_safetensors **out, const char *path) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "open %s: %s", path,
                             strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        qac_status s = qac_set_error(QAC_ERR_IO, "%s: not a regular file", path);
        close(fd);
        return s;
    }
    qac_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->label = strdup(path))) {
        free(st);
        close(fd);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    st->len = (size_t)sb.st_size;
    if (st->len > 0) {
        void *p = mmap(NULL, st->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            qac_status s = qac_set_error(QAC_ERR_IO, "mmap %s: %s", path, strerror(errno));
            close(fd);
            qac_safetensors_close(st);
            return s;
        }
        st->base = p;
        st->mapped = 1;
        madvise(p, st->len, MADV_SEQUENTIAL);
    }
    close(fd);
    return finish_open(st, out);
}

void qac_safetensors_close(qac_safetensors *st) {
    if (!st) return;
    if (st->mapped) munmap((void *)st->base, st->len);
    if (st->root) json_decref(st->root);
    free(st->tensors);
    free(st->by_name);
    free(st->label);
    free(st);
}

int qac_safetensors_count(const qac_safetensors *st) { return st->n; }

const qac_st_tensor *qac_safetensors_get(const qac_safetensors *st, int i) {
    return i >= 0 && i < st->n ? &st->tensors[i] : NULL;
}

const qac_st_tensor *qac_safetensors_find(const qac_safetensors *st, const char *name) {
    int lo = 0, hi = st->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const qac_st_tensor *t = &st->tensors[st->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *qac_safetensors_metadata(const qac_safetensors *st, const char *key) {
    return st->metadata ? json_string_value(json_object_get(st->metadata, key)) : NULL;
}

qac_status qac_safetensors_read_f32(const qac_st_tensor *t, float *out) {
    const unsigned char *p = t->data;
    size_t n = (size_t)t->numel;
    switch (t->dtype) {
    case QAC_ST_F32:
        memcpy(out, p, n * 4);
        return QAC_OK;
    case QAC_ST_F16:
    case QAC_ST_BF16: {
        int bf = t->dtype == QAC_ST_BF16;
        for (size_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
            out[i] = bf ? qac_bf16_to_f32(h) : qac_f16_to_f32(h);
        }
        return QAC_OK;
    }
    case QAC_ST_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            out[i] = (float)d;
        }
        return QAC_OK;
    default:
        return qac_set_error(QAC_ERR_UNSUPPORTED, "tensor \"%s\" has dtype %s (expected F32, F16 or BF16)",
                             t->name, t->dtype_name);
    }
}

void qac_safetensors_release(const qac_safetensors *st, const qac_st_tensor *t) {
    if (!st->mapped || !t->nbytes) return;
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t b = (uintptr_t)t->data, e = b + (uintptr_t)t->nbytes;
    b = (b + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1); /* only pages wholly inside t */
    e &= ~((uintptr_t)pg - 1);
    if (e > b) madvise((void *)b, e - b, MADV_DONTNEED);
}

/* ---- writer ---- */

static qac_status write_tensor_data(FILE *f, const qac_st_write_tensor *t, uint64_t numel) {
    size_t es = qac_st_dtype_size(t->dtype);
    if (!t->data) return fwrite(t->raw, es, (size_t)numel, f) == (size_t)numel ? QAC_OK : QAC_ERR_IO;
    if (t->dtype == QAC_ST_F32)
        return fwrite(t->data, 4, (size_t)numel, f) == (size_t)numel ? QAC_OK : QAC_ERR_IO;
    enum { CHUNK = 1 << 15 };
    unsigned char buf[2 * CHUNK];
    for (uint64_t i = 0; i < numel; i += CHUNK) {
        size_t m = numel - i < CHUNK ? (size_t)(numel - i) : CHUNK;
        for (size_t j = 0; j < m; j++) {
            uint16_t h = t->dtype == QAC_ST_F16 ? qac_f32_to_f16(t->data[i + j]) : qac_f32_to_bf16(t->data[i + j]);
            buf[2 * j] = (unsigned char)(h & 0xff);
            buf[2 * j + 1] = (unsigned char)(h >> 8);
        }
        if (fwrite(buf, 2, m, f) != m) return QAC_ERR_IO;
    }
    return QAC_OK;
}

qac_status qac_safetensors_write(const char *path, const qac_st_write_tensor *tensors, int n,
                                 const char *const *metadata) {
    if (n < 0 || (n > 0 && !tensors)) return qac_set_error(QAC_ERR_INVALID, "%s: bad tensor list", path);
    json_t *root = json_object();
    uint64_t *numel = calloc((size_t)(n ? n : 1), sizeof *numel);
    qac_status s = QAC_OK;
    if (!root || !numel) {
        s = qac_set_error(QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (metadata && metadata[0]) {
        json_t *md = json_object();
        for (int i = 0; metadata[i] && metadata[i + 1]; i += 2)
            json_object_set_new(md, metadata[i], json_string(metadata[i + 1]));
        json_object_set_new(root, "__metadata__", md);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const qac_st_write_tensor *t = &tensors[i];
        size_t es = qac_st_dtype_size(t->dtype);
        if (!t->name || !*t->name || strncmp(t->name, "__", 2) == 0) {
            s = qac_set_error(QAC_ERR_INVALID, "%s: tensor %d has an invalid name", path, i);
            goto done;
        }
        if (json_object_get(root, t->name)) {
            s = qac_set_error(QAC_ERR_INVALID, "%s: duplicate tensor name \"%s\"", path, t->name);
            goto done;
        }
        if (!es || (t->data && t->dtype != QAC_ST_F32 && t->dtype != QAC_ST_F16 && t->dtype != QAC_ST_BF16) ||
            (!t->data && !t->raw) || t->ndim < 0 || t->ndim > QAC_ST_MAX_DIMS) {
            s = qac_set_error(QAC_ERR_INVALID, "%s: tensor \"%s\": bad dtype, data or ndim", path, t->name);
            goto done;
        }
        uint64_t m = 1;
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || (t->shape[d] && m > UINT64_MAX / 16 / (uint64_t)t->shape[d])) {
                json_decref(shape);
                s = qac_set_error(QAC_ERR_INVALID, "%s: tensor \"%s\": bad shape", path, t->name);
                goto done;
            }
            m *= (uint64_t)t->shape[d];
            json_array_append_new(shape, json_integer(t->shape[d]));
        }
        numel[i] = m;
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(qac_st_dtype_name(t->dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets",
                            json_pack("[II]", (json_int_t)off, (json_int_t)(off + m * es)));
        json_object_set_new(root, t->name, e);
        off += m * es;
    }
    char *hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!hdr) {
        s = qac_set_error(QAC_ERR_NOMEM, "%s: cannot serialise the header", path);
        goto done;
    }
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;
    qac_atomic_file af;
    if ((s = qac_atomic_open(&af, path)) != QAC_OK) {
        free(hdr);
        goto done;
    }
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)(((uint64_t)padded >> (8 * i)) & 0xff);
    int ok = fwrite(lenbuf, 1, 8, af.f) == 8 && fwrite(hdr, 1, hl, af.f) == hl;
    for (size_t i = hl; ok && i < padded; i++) ok = fputc(' ', af.f) != EOF;
    free(hdr);
    for (int i = 0; ok && i < n; i++) ok = write_tensor_data(af.f, &tensors[i], numel[i]) == QAC_OK;
    if (!ok) {
        s = qac_set_error(QAC_ERR_IO, "write %s: %s", af.tmp_path, strerror(errno));
        qac_atomic_abort(&af);
        goto done;
    }
    s = qac_atomic_commit(&af);
done:
    json_decref(root);
    free(numel);
    return s;
}
