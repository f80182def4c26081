/* One compiled pass that writes a batch's CSV lines (see posixlake/csvcodec/_render.py,
 * `_native_lines`): integers, float64 values and strings are written as text here, every
 * other column arrives as the final text of its fields (already quoted, NULL as empty) or
 * as a dictionary of such texts with indices, and the fields are joined with commas and
 * the line terminator straight into the output.
 *
 * A string (K_STR) is quoted here when the codec's rule asks for it (`_NEEDS_QUOTES`, or
 * empty): a comma, a quote, CR or LF anywhere, whitespace (space, tab, VT, FF) first or
 * last, or U+FEFF first; its quotes are doubled. NULL is an empty field.
 *
 * A float64 is written as Arrow's cast to string writes it (double-conversion's shortest
 * round-trip digits, fixed notation for decimal exponents -6 to 9, "1e+10", "inf",
 * "-inf", "-0"), NaN as "NaN"; the shortest digits come from Ryu (vendored in
 * _vendor/ryu, Apache-2.0 or Boost-1.0), which finds the same digits.
 *
 * The formatting runs without the GIL, so the thread pool that renders segments renders
 * batches in parallel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ryu/d2s.c"

enum { K_INT = 0, K_UINT = 1, K_FLOAT64 = 2, K_TEXT = 3, K_DICT = 4, K_STR = 5 };

/* The bytes past the lines' bound that a field's 16-byte store may write (the output
 * holds them too). */
#define SLACK 16

/* The most bytes one integer or float64 field takes ("-9223372036854775808",
 * "-0.000001234567890123456" is 24, exponents fewer). */
#define NUMBER_MAX 25

typedef struct {
    int kind;
    int width;              /* bytes per integer value or dictionary index */
    Py_ssize_t offset;      /* the array's offset (rows) */
    const uint8_t *valid;   /* validity bitmap, or NULL when all are valid */
    const uint8_t *data;    /* values, or dictionary indices */
    Py_ssize_t text_offset; /* the offset of the text array (TEXT, DICT) */
    const int32_t *offsets; /* text offsets */
    const char *chars;      /* text bytes */
    const char *chars_end;  /* the end of the text bytes' buffer (a 16-byte load stops here) */
    Py_ssize_t dict_len;    /* DICT: the number of dictionary fields */
} column_t;

/* The number of decimal digits of v. */
static inline int digits_u64(uint64_t v) {
    int n = 1;
    for (;;) {
        if (v < 10) return n;
        if (v < 100) return n + 1;
        if (v < 1000) return n + 2;
        if (v < 10000) return n + 3;
        v /= 10000;
        n += 4;
    }
}

/* Write the pair of digits of r < 100 at p, from Ryu's DIGIT_TABLE (ryu/digit_table.h). */
static inline void put_pair(char *p, uint32_t r) { memcpy(p, DIGIT_TABLE + 2 * r, 2); }

/* Write the `length` decimal digits of v ending at out + length, four at a time (one
 * division by 10000, then two independent pairs), without calls: memcpy of a constant
 * 2 bytes is one move, where a short copy of a variable size would cost a library call. */
static inline void put_digits(char *out, uint64_t v, int length) {
    char *p = out + length;
    while (v >= 10000) {
        const uint64_t q = v / 10000;
        const uint32_t r = (uint32_t)(v - q * 10000);
        const uint32_t high = r / 100;
        v = q;
        p -= 4;
        put_pair(p, high);
        put_pair(p + 2, r - high * 100);
    }
    uint32_t w = (uint32_t)v;
    if (w >= 100) {
        const uint32_t high = w / 100;
        p -= 2;
        put_pair(p, w - high * 100);
        w = high;
    }
    if (w >= 10) {
        put_pair(p - 2, w);
    } else {
        p[-1] = (char)('0' + w);
    }
}

/* Write the decimal digits of v; return how many. */
static inline int write_u64(char *out, uint64_t v) {
    const int length = digits_u64(v);
    put_digits(out, v, length);
    return length;
}

static inline int write_i64(char *out, int64_t v) {
    if (v < 0) {
        out[0] = '-';
        return 1 + write_u64(out + 1, (uint64_t)0 - (uint64_t)v);
    }
    return write_u64(out, (uint64_t)v);
}

/* The powers of ten a short decimal is tried at: each is exact as a double. */
static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
#define SHORT_PLACES ((int)(sizeof POW10 / sizeof POW10[0]))

/* Find Ryu's digits of a finite nonzero f faster when |f| is a decimal of at most 9
 * places and under 2^50 in units of its last place, as most stored values are (a price,
 * a measurement); return false to leave it to d2d.
 *
 * Why the result is Ryu's. Ryu writes the member of f's rounding interval on the
 * coarsest grid of powers of ten that has one (the shortest digits), the one nearest f
 * if that grid has several. With a = |f|, take the finest grid 10^-k (k <= 9) on which
 * p = a * 10^k < 2^50, one multiplication and one division:
 * - It holds every member of the coarser grids (10^-j, j < k, and tens, hundreds, ...).
 * - It has at most one member: the interval reaches at most ulp(a) / 2 <= a * 2^-53 from
 *   a, so its width in units of 10^-k is under p * 2^-52 * (1 + 2^-52) < 1/4, less than
 *   the grid's spacing. So the member Ryu writes, if it lies on this grid, is that one.
 * - That member G lies within a * 10^k * 2^-53 of a * 10^k, and p is off by at most half
 *   its own ulp, p * 2^-53: p rounds to G.
 * - n = p rounded is a member exactly when n / 10^k == a: n < 2^50 and 10^k are exact
 *   doubles, and IEEE division rounds the exact quotient as parsing n * 10^-k would (half
 *   to even, which is also Ryu's rule for the interval's bounds).
 * If n is no member, there is none on this grid, so Ryu's grid is finer: d2d finds it.
 * The digits are n without its trailing zeros (moved to the exponent).
 */
static inline bool short_decimal(double f, floating_decimal_64 *v) {
    const double a = f < 0 ? -f : f;
    for (int k = SHORT_PLACES - 1; k >= 0; k--) {
        const double p = a * POW10[k];
        if (!(p < 0x1p50)) continue;
        const double n = (double)(int64_t)(p + 0.5);
        if (n == 0 || n / POW10[k] != a) return false;
        /* n < 2^50 has at most 15 trailing zeros: drop them 8, 4, 2 and 1 at a time
         * (the grid is the finest, so most values have several) */
        uint64_t m = (uint64_t)n;
        int32_t e = -k;
        if (m % 100000000 == 0) m /= 100000000, e += 8;
        if (m % 10000 == 0) m /= 10000, e += 4;
        if (m % 100 == 0) m /= 100, e += 2;
        if (m % 10 == 0) m /= 10, e += 1;
        v->mantissa = m;
        v->exponent = e;
        return true;
    }
    return false;
}

/* Write a float64 as Arrow's cast to string does (NaN as "NaN"); return the length. */
static inline int write_f64(char *out, double f) {
    const uint64_t bits = double_to_bits(f);
    const bool sign = ((bits >> (DOUBLE_MANTISSA_BITS + DOUBLE_EXPONENT_BITS)) & 1) != 0;
    const uint64_t ieee_mantissa = bits & ((1ull << DOUBLE_MANTISSA_BITS) - 1);
    const uint32_t ieee_exponent =
        (uint32_t)((bits >> DOUBLE_MANTISSA_BITS) & ((1u << DOUBLE_EXPONENT_BITS) - 1));
    int n = 0;
    if (ieee_exponent == ((1u << DOUBLE_EXPONENT_BITS) - 1u)) {
        if (ieee_mantissa != 0) {
            out[0] = 'N', out[1] = 'a', out[2] = 'N';
            return 3;
        }
        if (sign) out[n++] = '-';
        out[n] = 'i', out[n + 1] = 'n', out[n + 2] = 'f';
        return n + 3;
    }
    if (sign) out[n++] = '-';
    if (ieee_exponent == 0 && ieee_mantissa == 0) {
        out[n++] = '0';
        return n;
    }
    floating_decimal_64 v;
    if (!short_decimal(f, &v) && !d2d_small_int(ieee_mantissa, ieee_exponent, &v)) {
        v = d2d(ieee_mantissa, ieee_exponent);
    }
    /* the shortest digits never end with a zero: move such zeros to the exponent */
    for (;;) {
        const uint64_t q = v.mantissa / 10;
        if (v.mantissa - 10 * q != 0) break;
        v.mantissa = q;
        ++v.exponent;
    }
    const int length = (int)decimalLength17(v.mantissa);
    /* the value is 0.DIGITS times 10 to the power point */
    const int point = length + v.exponent;
    const int exponent = point - 1;
    if (exponent >= -6 && exponent < 10) {
        if (point <= 0) {
            out[n++] = '0';
            out[n++] = '.';
            for (int i = 0; i < -point; i++) out[n++] = '0';
            put_digits(out + n, v.mantissa, length);
            return n + length;
        }
        if (point >= length) {
            put_digits(out + n, v.mantissa, length);
            n += length;
            for (int i = 0; i < point - length; i++) out[n++] = '0';
            return n;
        }
        /* the digits one place to the right, then the integer part back over the gap */
        put_digits(out + n + 1, v.mantissa, length);
        for (int i = 0; i < point; i++) out[n + i] = out[n + i + 1];
        out[n + point] = '.';
        return n + length + 1;
    }
    put_digits(out + n + 1, v.mantissa, length);
    out[n] = out[n + 1];
    if (length > 1) {
        out[n + 1] = '.';
        n += length + 1;
    } else {
        n += 1;
    }
    out[n++] = 'e';
    if (exponent < 0) {
        out[n++] = '-';
        return n + write_u64(out + n, (uint64_t)(-exponent));
    }
    out[n++] = '+';
    return n + write_u64(out + n, (uint64_t)exponent);
}

/* Copy a short run of bytes without a library call (most fields are a few bytes): up to
 * 16 bytes as one 16-byte load and store where the source buffer (ending at `limit`)
 * holds 16 bytes from `in`; the output has SLACK bytes beyond the bound for the store. */
static inline void copy(char *out, const char *in, Py_ssize_t n, const char *limit) {
#if defined(__SSE2__)
    if (n <= 16 && limit - in >= 16) {
        _mm_storeu_si128((__m128i *)out, _mm_loadu_si128((const __m128i *)in));
        return;
    }
#else
    (void)limit;
#endif
    if (n > 32) {
        memcpy(out, in, (size_t)n);
        return;
    }
    for (Py_ssize_t i = 0; i < n; i++) out[i] = in[i];
}

/* The bytes that call for quotes anywhere in a field. */
static const bool STRUCTURAL[256] = {[','] = true, ['"'] = true, ['\r'] = true, ['\n'] = true};

static inline bool edge_space(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }

/* Whether a field of n > 0 bytes calls for quotes by its first or last bytes. */
static inline bool quoted_by_edges(const char *s, Py_ssize_t n) {
    return edge_space(s[0]) || edge_space(s[n - 1]) ||
           (n >= 3 && (uint8_t)s[0] == 0xEF && (uint8_t)s[1] == 0xBB && (uint8_t)s[2] == 0xBF);
}

/* Write one string field, quoted if it needs it; return its length. `limit` is the end
 * of the buffer holding s. */
static inline Py_ssize_t write_str(char *out, const char *s, Py_ssize_t n, const char *limit) {
#if defined(__SSE2__)
    /* a field of up to 16 bytes: its structural bytes found by four compares at once */
    if (n > 0 && n <= 16 && limit - s >= 16) {
        const __m128i v = _mm_loadu_si128((const __m128i *)s);
        const __m128i hits =
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(',')),
                                      _mm_cmpeq_epi8(v, _mm_set1_epi8('"'))),
                         _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\r')),
                                      _mm_cmpeq_epi8(v, _mm_set1_epi8('\n'))));
        const uint32_t mask = (uint32_t)_mm_movemask_epi8(hits) & ((1u << n) - 1u);
        if (mask == 0 && !quoted_by_edges(s, n)) {
            _mm_storeu_si128((__m128i *)out, v);
            return n;
        }
    }
#endif
    bool quote = n == 0 || quoted_by_edges(s, n);
    Py_ssize_t quotes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (STRUCTURAL[(uint8_t)s[i]]) {
            quote = true;
            quotes += s[i] == '"';
        }
    }
    if (!quote) {
        copy(out, s, n, limit);
        return n;
    }
    char *p = out;
    *p++ = '"';
    if (quotes == 0) {
        copy(p, s, n, limit);
        p += n;
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (s[i] == '"') *p++ = '"';
            *p++ = s[i];
        }
    }
    *p++ = '"';
    return p - out;
}

static inline int64_t read_int(const uint8_t *data, int width, Py_ssize_t i) {
    switch (width) {
    case 1: return ((const int8_t *)data)[i];
    case 2: return ((const int16_t *)data)[i];
    case 4: return ((const int32_t *)data)[i];
    default: return ((const int64_t *)data)[i];
    }
}

static inline uint64_t read_uint(const uint8_t *data, int width, Py_ssize_t i) {
    switch (width) {
    case 1: return ((const uint8_t *)data)[i];
    case 2: return ((const uint16_t *)data)[i];
    case 4: return ((const uint32_t *)data)[i];
    default: return ((const uint64_t *)data)[i];
    }
}

static inline bool is_valid(const column_t *c, Py_ssize_t i) {
    return c->valid == NULL || ((c->valid[i >> 3] >> (i & 7)) & 1);
}

/* The bytes the fields of the rows take at most (exact for texts); -1 on a bad index. */
static Py_ssize_t bound(const column_t *cols, Py_ssize_t ncols, Py_ssize_t rows) {
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k < ncols; k++) {
        const column_t *c = &cols[k];
        if (c->kind == K_TEXT) {
            total += c->offsets[c->text_offset + c->offset + rows] -
                     c->offsets[c->text_offset + c->offset];
        } else if (c->kind == K_STR) {
            /* at most every byte a quote, doubled, and two quotes around */
            total += 2 * (Py_ssize_t)(c->offsets[c->offset + rows] - c->offsets[c->offset]) + 2 * rows;
        } else if (c->kind == K_DICT) {
            for (Py_ssize_t r = 0; r < rows; r++) {
                const Py_ssize_t i = c->offset + r;
                if (!is_valid(c, i)) continue;
                const int64_t j = read_int(c->data, c->width, i);
                if (j < 0 || j >= c->dict_len) return -1;
                total += c->offsets[c->text_offset + j + 1] - c->offsets[c->text_offset + j];
            }
        } else {
            total += NUMBER_MAX * rows;
        }
    }
    return total;
}

static Py_ssize_t fill(const column_t *cols, Py_ssize_t ncols, Py_ssize_t rows,
                       const char *end, Py_ssize_t end_len, char *out) {
    char *p = out;
    for (Py_ssize_t r = 0; r < rows; r++) {
        for (Py_ssize_t k = 0; k < ncols; k++) {
            const column_t *c = &cols[k];
            if (k > 0) *p++ = ',';
            const Py_ssize_t i = c->offset + r;
            if (!is_valid(c, i)) continue;
            switch (c->kind) {
            case K_INT: p += write_i64(p, read_int(c->data, c->width, i)); break;
            case K_UINT: p += write_u64(p, read_uint(c->data, c->width, i)); break;
            case K_FLOAT64: p += write_f64(p, ((const double *)c->data)[i]); break;
            case K_STR: {
                const int32_t start = c->offsets[i];
                p += write_str(p, c->chars + start, c->offsets[i + 1] - start, c->chars_end);
                break;
            }
            case K_TEXT: {
                const int32_t start = c->offsets[c->text_offset + i];
                const int32_t size = c->offsets[c->text_offset + i + 1] - start;
                copy(p, c->chars + start, size, c->chars_end);
                p += size;
                break;
            }
            default: {
                const int64_t j = read_int(c->data, c->width, i);
                const int32_t start = c->offsets[c->text_offset + j];
                const int32_t size = c->offsets[c->text_offset + j + 1] - start;
                copy(p, c->chars + start, size, c->chars_end);
                p += size;
                break;
            }
            }
        }
        copy(p, end, end_len, end);
        p += end_len;
    }
    return p - out;
}

static int get_buffer(PyObject *obj, Py_buffer *view, int *held) {
    if (obj == Py_None) return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    *held = 1;
    return 0;
}

#define BUFFERS 4

/* lines(rows, columns, end, out=None) -> bytes | int
 *
 * columns: a sequence of (kind, width, offset, validity, data, text_offset, offsets,
 * chars, dict_len) tuples, buffers as objects with the buffer protocol (or None);
 * end: the line terminator. Each buffer's length is checked against the rows read from
 * it; text offsets are trusted to grow (Arrow validates its arrays).
 *
 * Without `out`, return the lines as bytes. With `out`, a writable buffer, write them at
 * its start and return their length, or, when `out` may be too small (it holds fewer
 * bytes than the lines' bound), write nothing and return minus the bound. */
static PyObject *lines(PyObject *self, PyObject *args) {
    Py_ssize_t rows;
    PyObject *spec;
    const char *end;
    Py_ssize_t end_len;
    PyObject *target = Py_None;
    Py_buffer out_view;
    int out_held = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "nOy#|O", &rows, &spec, &end, &end_len, &target)) return NULL;
    if (target != Py_None) {
        if (PyObject_GetBuffer(target, &out_view, PyBUF_WRITABLE) < 0) return NULL;
        out_held = 1;
    }
    PyObject *seq = PySequence_Fast(spec, "columns must be a sequence");
    if (seq == NULL) {
        if (out_held) PyBuffer_Release(&out_view);
        return NULL;
    }
    const Py_ssize_t ncols = PySequence_Fast_GET_SIZE(seq);
    PyObject *result = NULL;
    column_t *cols = PyMem_Calloc((size_t)(ncols > 0 ? ncols : 1), sizeof(column_t));
    Py_buffer *views = PyMem_Calloc((size_t)(ncols > 0 ? ncols : 1) * BUFFERS, sizeof(Py_buffer));
    int *held = PyMem_Calloc((size_t)(ncols > 0 ? ncols : 1) * BUFFERS, sizeof(int));
    if (cols == NULL || views == NULL || held == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (rows < 0 || ncols == 0) {
        PyErr_SetString(PyExc_ValueError, "lines: no columns or a negative row count");
        goto done;
    }
    for (Py_ssize_t k = 0; k < ncols; k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
        PyObject *valid, *data, *offsets, *chars;
        column_t *c = &cols[k];
        if (!PyArg_ParseTuple(item, "iinOOnOOn", &c->kind, &c->width, &c->offset, &valid, &data,
                              &c->text_offset, &offsets, &chars, &c->dict_len))
            goto done;
        Py_buffer *v = &views[k * BUFFERS];
        int *h = &held[k * BUFFERS];
        if (get_buffer(valid, &v[0], &h[0]) < 0 || get_buffer(data, &v[1], &h[1]) < 0 ||
            get_buffer(offsets, &v[2], &h[2]) < 0 || get_buffer(chars, &v[3], &h[3]) < 0)
            goto done;
        c->valid = h[0] ? (const uint8_t *)v[0].buf : NULL;
        c->data = h[1] ? (const uint8_t *)v[1].buf : NULL;
        c->offsets = h[2] ? (const int32_t *)v[2].buf : NULL;
        c->chars = h[3] ? (const char *)v[3].buf : "";
        c->chars_end = h[3] ? c->chars + v[3].len : c->chars;
        const bool text = c->kind == K_TEXT || c->kind == K_DICT || c->kind == K_STR;
        const bool number = c->kind == K_INT || c->kind == K_UINT || c->kind == K_FLOAT64;
        if (c->kind < K_INT || c->kind > K_STR || (text && c->offsets == NULL) ||
            (c->kind != K_TEXT && c->kind != K_STR && c->data == NULL) ||
            (c->kind != K_TEXT && c->kind != K_STR && c->kind != K_FLOAT64 && c->width != 1 && c->width != 2 &&
             c->width != 4 && c->width != 8) ||
            (number && c->kind == K_FLOAT64 && c->width != 8)) {
            PyErr_Format(PyExc_ValueError, "lines: column %zd: a bad description", k);
            goto done;
        }
        /* every buffer must cover the rows it is read at */
        const Py_ssize_t last = c->offset + rows;
        const bool own = c->kind == K_TEXT || c->kind == K_STR; /* offsets of the column */
        const Py_ssize_t width = own ? 0 : c->width;
        const Py_ssize_t texts = own ? last : c->text_offset + c->dict_len;
        if (c->offset < 0 || c->text_offset < 0 || c->dict_len < 0 ||
            (h[0] && v[0].len < (last + 7) / 8) || (h[1] && v[1].len < last * width) ||
            (text && (v[2].len < (texts + 1) * 4 ||
                      c->offsets[texts] > (h[3] ? v[3].len : 0) || c->offsets[c->text_offset] < 0))) {
            PyErr_Format(PyExc_ValueError, "lines: column %zd: a buffer shorter than its rows", k);
            goto done;
        }
    }
    Py_ssize_t size;
    Py_BEGIN_ALLOW_THREADS
    size = bound(cols, ncols, rows);
    Py_END_ALLOW_THREADS
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "lines: a dictionary index out of range");
        goto done;
    }
    size += rows * (ncols - 1 + end_len) + SLACK;
    Py_ssize_t written;
    if (out_held) {
        if (out_view.len < size) {
            result = PyLong_FromSsize_t(-size);
            goto done;
        }
        char *out = (char *)out_view.buf;
        Py_BEGIN_ALLOW_THREADS
        written = fill(cols, ncols, rows, end, end_len, out);
        Py_END_ALLOW_THREADS
        result = PyLong_FromSsize_t(written);
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL) goto done;
    char *out = PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    written = fill(cols, ncols, rows, end, end_len, out);
    Py_END_ALLOW_THREADS
    if (written != size && _PyBytes_Resize(&result, written) < 0) result = NULL;
done:
    if (out_held) PyBuffer_Release(&out_view);
    if (views != NULL && held != NULL) {
        for (Py_ssize_t i = 0; i < ncols * BUFFERS; i++) {
            if (held[i]) PyBuffer_Release(&views[i]);
        }
    }
    PyMem_Free(cols);
    PyMem_Free(views);
    PyMem_Free(held);
    Py_DECREF(seq);
    return result;
}

/* f64(value) -> str: one float64 as `lines` writes it (for tests). */
static PyObject *f64(PyObject *self, PyObject *arg) {
    (void)self;
    const double value = PyFloat_AsDouble(arg);
    if (value == -1.0 && PyErr_Occurred()) return NULL;
    char out[NUMBER_MAX];
    const int n = write_f64(out, value);
    return PyUnicode_FromStringAndSize(out, n);
}

/* buffer(size) -> bytearray: a bytearray of `size` bytes left as malloc gives them (no
 * zeroing, so no page is touched before the pass writes it). */
static PyObject *buffer(PyObject *self, PyObject *arg) {
    (void)self;
    const Py_ssize_t size = PyLong_AsSsize_t(arg);
    if (size == -1 && PyErr_Occurred()) return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "buffer: a negative size");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, size);
}

static PyMethodDef METHODS[] = {
    {"lines", lines, METH_VARARGS, "Write the CSV lines of a batch (see _render._native_lines)."},
    {"buffer", buffer, METH_O, "A bytearray of the size, not zeroed (for lines' out)."},
    {"f64", f64, METH_O, "Write one float64 as the lines do."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_lines", "The compiled pass of the CSV renderer.", -1, METHODS,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__lines(void) { return PyModule_Create(&MODULE); }
