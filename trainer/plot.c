/* Training curves as PNG: loss (raw and smoothed) and learning rate by
 * step, drawn with a 5x7 bitmap font and written as an uncompressed PNG
 * (zlib stored blocks), so no image library is needed. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_finetune.h"
#include "qac_util.h"

/* ---- PNG ---- */

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc_update(uint32_t c, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c;
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
    p[3] = (unsigned char)v;
}

static void chunk(FILE *f, const char *type, const unsigned char *data, size_t n) {
    unsigned char h[8];
    put32(h, (uint32_t)n);
    memcpy(h + 4, type, 4);
    fwrite(h, 1, 8, f);
    if (n) fwrite(data, 1, n, f);
    uint32_t c = crc_update(0xFFFFFFFFu, (const unsigned char *)type, 4);
    c = crc_update(c, data, n) ^ 0xFFFFFFFFu;
    put32(h, c);
    fwrite(h, 1, 4, f);
}

static qac_status write_png(const char *path, const unsigned char *rgb, int w, int h) {
    crc_init();
    size_t row = (size_t)w * 3 + 1, raw_n = row * (size_t)h;
    size_t nblocks = (raw_n + 65534) / 65535;
    unsigned char *z = malloc(2 + raw_n + nblocks * 5 + 4);
    if (!z) return qac_set_error(QAC_ERR_NOMEM, "plot: out of memory");
    size_t zn = 0, done = 0;
    z[zn++] = 0x78, z[zn++] = 0x01;
    uint32_t a = 1, b = 0;
    for (size_t blk = 0; blk < nblocks; blk++) {
        size_t len = raw_n - done < 65535 ? raw_n - done : 65535;
        z[zn++] = blk + 1 == nblocks; /* BFINAL, BTYPE 00 (stored) */
        z[zn++] = (unsigned char)len, z[zn++] = (unsigned char)(len >> 8);
        z[zn++] = (unsigned char)~len, z[zn++] = (unsigned char)(~len >> 8);
        for (size_t i = 0; i < len; i++, done++) {
            size_t y = done / row, x = done % row;
            unsigned char v = x == 0 ? 0 : rgb[y * (size_t)w * 3 + x - 1]; /* filter byte 0 per row */
            z[zn++] = v;
            a = (a + v) % 65521, b = (b + a) % 65521;
        }
    }
    put32(z + zn, (b << 16) | a);
    zn += 4;
    qac_atomic_file af;
    qac_status st = qac_atomic_open(&af, path);
    if (st) {
        free(z);
        return st;
    }
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char ihdr[13];
    put32(ihdr, (uint32_t)w), put32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8, ihdr[9] = 2, ihdr[10] = 0, ihdr[11] = 0, ihdr[12] = 0; /* 8-bit RGB */
    fwrite(sig, 1, 8, af.f);
    chunk(af.f, "IHDR", ihdr, 13);
    chunk(af.f, "IDAT", z, zn);
    chunk(af.f, "IEND", NULL, 0);
    free(z);
    if (ferror(af.f)) {
        qac_atomic_abort(&af);
        return qac_set_error(QAC_ERR_IO, "%s: write failed", path);
    }
    return qac_atomic_commit(&af);
}

/* ---- drawing ---- */

typedef struct canvas {
    unsigned char *px;
    int w, h;
} canvas;

static void dot(canvas *c, int x, int y, const unsigned char col[3]) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
    memcpy(c->px + ((size_t)y * c->w + x) * 3, col, 3);
}

static void line(canvas *c, double x0, double y0, double x1, double y1, const unsigned char col[3]) {
    double dx = x1 - x0, dy = y1 - y0;
    int n = (int)fmax(fabs(dx), fabs(dy)) + 1;
    for (int i = 0; i <= n; i++) dot(c, (int)lround(x0 + dx * i / n), (int)lround(y0 + dy * i / n), col);
}

static const struct glyph {
    char ch;
    unsigned char rows[7];
} font[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'.', {0, 0, 0, 0, 0, 0x0C, 0x0C}},                {'-', {0, 0, 0, 0x1F, 0, 0, 0}},
    {'+', {0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0}},       {'e', {0, 0, 0x0E, 0x11, 0x1F, 0x10, 0x0E}},
    {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}}, {'o', {0, 0, 0x0E, 0x11, 0x11, 0x11, 0x0E}},
    {'s', {0, 0, 0x0F, 0x10, 0x0E, 0x01, 0x1E}},       {'a', {0, 0, 0x0E, 0x01, 0x0F, 0x11, 0x0F}},
    {'r', {0, 0, 0x16, 0x19, 0x10, 0x10, 0x10}},       {'n', {0, 0, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0, 0x0C, 0x04, 0x04, 0x04, 0x0E}},    {'g', {0, 0, 0x0F, 0x11, 0x0F, 0x01, 0x0E}},
    {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}}, {'p', {0, 0, 0x1E, 0x11, 0x1E, 0x10, 0x10}},
    {'m', {0, 0, 0x1A, 0x15, 0x15, 0x11, 0x11}},       {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}}, {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}}, {',', {0, 0, 0, 0, 0x0C, 0x04, 0x08}},
};

/* text at (x, y) top-left, scale s; returns the width drawn */
static int text(canvas *c, int x, int y, const char *s, int sc, const unsigned char col[3]) {
    int x0 = x;
    for (; *s; s++, x += 6 * sc) {
        for (size_t g = 0; g < sizeof font / sizeof font[0]; g++) {
            if (font[g].ch != *s) continue;
            for (int r = 0; r < 7; r++)
                for (int k = 0; k < 5; k++)
                    if (font[g].rows[r] & (0x10 >> k))
                        for (int a = 0; a < sc; a++)
                            for (int b = 0; b < sc; b++) dot(c, x + k * sc + a, y + r * sc + b, col);
        }
    }
    return x - x0;
}

static const unsigned char BLACK[3] = {0, 0, 0}, GREY[3] = {225, 225, 225}, LIGHT[3] = {160, 190, 230},
                           BLUE[3] = {20, 60, 170}, ORANGE[3] = {220, 110, 0};

/* A round tick spacing (1, 2 or 5 times a power of ten) giving about four
 * intervals over [lo, hi]; at least `min_step` (1 for steps). */
static double tick_step(double lo, double hi, double min_step) {
    double raw = (hi - lo) / 4, p = pow(10, floor(log10(raw))), f = raw / p;
    double step = (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
    return step < min_step ? min_step : step;
}

/* Ticks at the multiples of a round step inside [lo, hi], each labelled
 * with its own value and drawn where that value lies: x (vertical grid
 * lines, labels below) or y (horizontal, labels left). */
static void ticks(canvas *c, int x0, int y0, int x1, int y1, double lo, double hi, int is_x) {
    double step = tick_step(lo, hi, is_x ? 1 : 0);
    /* the significant digits that tell two ticks apart: a label is its value */
    int dstep = (int)floor(log10(step) + 1e-9);
    int digits = (int)floor(log10(fmax(fabs(lo), fabs(hi)))) - dstep + 1;
    digits = digits < 1 ? 1 : digits > 12 ? 12 : digits;
    for (double k = ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * step; k++) {
        double v = k * step;
        char lab[32];
        if (dstep >= 0) snprintf(lab, sizeof lab, "%.0f", v); /* whole steps never as 1e+03 */
        else snprintf(lab, sizeof lab, "%.*g", digits, fabs(v) < 1e-9 * step ? 0.0 : v);
        int w = (int)strlen(lab) * 12 - 2; /* 6-pixel cells at scale 2, the last without its gap */
        if (is_x) {
            int x = (int)lround(x0 + (v - lo) / (hi - lo) * (x1 - x0));
            line(c, x, y0, x, y1, GREY);
            text(c, x - w / 2, y1 + 6, lab, 2, BLACK);
        } else {
            int y = (int)lround(y1 - (v - lo) / (hi - lo) * (y1 - y0));
            line(c, x0, y, x1, y, GREY);
            text(c, x0 - 6 - w, y - 7, lab, 2, BLACK);
        }
    }
}

/* one panel: frame, grid, ticks, series; ys may be NULL */
static void panel(canvas *c, int x0, int y0, int x1, int y1, const double *xs, const double *const *ys,
                  const unsigned char *const *cols, int nseries, size_t n, const char *title) {
    double xmin = xs[0], xmax = xs[n - 1], ymin = INFINITY, ymax = -INFINITY;
    for (int s = 0; s < nseries; s++)
        for (size_t i = 0; i < n; i++)
            if (isfinite(ys[s][i])) ymin = fmin(ymin, ys[s][i]), ymax = fmax(ymax, ys[s][i]);
    if (!isfinite(ymin)) ymin = 0, ymax = 1;
    if (ymax - ymin < 1e-12 * fmax(1, fabs(ymax))) ymin -= 0.5 * fmax(fabs(ymin), 1e-9), ymax += 0.5 * fmax(fabs(ymax), 1e-9);
    if (xmax <= xmin) xmax = xmin + 1;
    double pad = 0.05 * (ymax - ymin);
    ymin -= pad, ymax += pad;
    ticks(c, x0, y0, x1, y1, ymin, ymax, 0);
    ticks(c, x0, y0, x1, y1, xmin, xmax, 1);
    line(c, x0, y0, x1, y0, BLACK), line(c, x0, y1, x1, y1, BLACK);
    line(c, x0, y0, x0, y1, BLACK), line(c, x1, y0, x1, y1, BLACK);
    for (int s = 0; s < nseries; s++)
        for (size_t i = 0; i + 1 < n || (n == 1 && i == 0); i++) {
            size_t j = n == 1 ? 0 : i + 1;
            double px0 = x0 + (xs[i] - xmin) / (xmax - xmin) * (x1 - x0), px1 = x0 + (xs[j] - xmin) / (xmax - xmin) * (x1 - x0);
            double py0 = y1 - (ys[s][i] - ymin) / (ymax - ymin) * (y1 - y0), py1 = y1 - (ys[s][j] - ymin) / (ymax - ymin) * (y1 - y0);
            line(c, px0, py0, px1, py1, cols[s]);
            if (n == 1) break;
        }
    text(c, x0 + 8, y0 + 6, title, 2, BLACK);
}

qac_status qac_plot_log(const char *log_path, const char *png_path, int width, int height) {
    if (width < 200 || height < 200) return qac_set_error(QAC_ERR_INVALID, "plot: image at least 200 x 200");
    char *data;
    size_t len;
    qac_status st = qac_read_file(log_path, &data, &len);
    if (st) return st;
    size_t n = 0, cap = 0;
    double *xs = NULL, *loss = NULL, *lr = NULL;
    long lineno = 0;
    for (char *l = data, *nl; !st && l < data + len; l = nl + 1) {
        nl = strchr(l, '\n');
        if (!nl) nl = data + len;
        lineno++;
        if (nl == l) continue;
        json_error_t err;
        json_t *o = json_loadb(l, (size_t)(nl - l), 0, &err);
        json_t *s = o ? json_object_get(o, "step") : NULL, *lo = o ? json_object_get(o, "loss") : NULL,
               *r = o ? json_object_get(o, "lr") : NULL;
        if (!json_is_number(s) || !json_is_number(lo) || !json_is_number(r)) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: expected a JSON object with numbers step, loss and lr",
                               log_path, lineno);
        } else {
            if (n == cap) {
                cap = cap ? cap * 2 : 1024;
                double *a = realloc(xs, cap * sizeof *a), *b = realloc(loss, cap * sizeof *b),
                       *c = realloc(lr, cap * sizeof *c);
                if (a) xs = a;
                if (b) loss = b;
                if (c) lr = c;
                if (!a || !b || !c) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            }
            if (!st) xs[n] = json_number_value(s), loss[n] = json_number_value(lo), lr[n++] = json_number_value(r);
        }
        json_decref(o);
    }
    free(data);
    if (!st && n == 0) st = qac_set_error(QAC_ERR_INVALID, "%s: no steps to plot", log_path);
    double *smooth = st ? NULL : malloc(n * sizeof *smooth);
    unsigned char *px = st ? NULL : malloc((size_t)width * height * 3);
    if (!st && (!smooth || !px)) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (!st) {
        /* centred moving average over ~1/25 of the run */
        long win = (long)(n / 25) | 1;
        for (size_t i = 0; i < n; i++) {
            double sum = 0;
            long cnt = 0;
            for (long j = (long)i - win / 2; j <= (long)i + win / 2; j++)
                if (j >= 0 && j < (long)n) sum += loss[j], cnt++;
            smooth[i] = sum / (double)cnt;
        }
        memset(px, 255, (size_t)width * height * 3);
        canvas c = {px, width, height};
        int left = 116, right = width - 20, split = (int)(height * 0.6);
        const double *ly[2] = {loss, smooth};
        const unsigned char *lc[2] = {LIGHT, BLUE};
        panel(&c, left, 12, right, split - 30, xs, ly, lc, 2, n, "loss");
        const double *ry[1] = {lr};
        const unsigned char *rc[1] = {ORANGE};
        panel(&c, left, split, right, height - 48, xs, ry, rc, 1, n, "learning rate");
        text(&c, (left + right) / 2 - 24, height - 20, "step", 2, BLACK);
        st = write_png(png_path, px, width, height);
    }
    free(xs), free(loss), free(lr), free(smooth), free(px);
    return st;
}
