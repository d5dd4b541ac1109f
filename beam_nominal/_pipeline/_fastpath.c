/* PointBatch's compiled paths: its single points of double series as three C columns
 * (DoublePoints) and WriteDoFn.process (FastProcess); and stateless kernels.
 *
 * Why C: Beam calls process once per element; in Python the call and a dozen bytecodes of the
 * rule cost more than nominal-streaming's whole sink (docs/benchmarks.md).
 *
 * The rule is PointBatch.add_fast's (beam_nominal/_pipeline/staging.py), read out of the element
 * shapes a plain point comes in: a (channel, int ns, float) tuple, a NamedTuple class of those
 * fields in that order, and a dict or beam.Row of exactly the fields channel, <timestamp field>
 * and value. Such a point of a known untagged double series (batch.float_codes maps its channel
 * to its series code) goes onto batch.doubles. tests/unit/test_fast_path.py holds this copy and
 * add_fast to the same points, value by value.
 *
 * FastProcess: anything else goes to the instance's Python method _slow(element), whose result
 * is returned; when batch.doubles reaches the limit, _handover() is called (its errors propagate: a
 * failed hand-over fails the bundle). Lookup errors that mean "not this shape" (KeyError,
 * TypeError, ValueError, as the Python rule catches) send the element to _slow; any other error
 * propagates.
 *
 * FastProcess is a base class: WriteDoFn(FastProcess, beam.DoFn), so process is an ordinary
 * method of the DoFn. It holds only references to the instance's own objects, set by _bind_fast;
 * pickling goes through WriteDoFn's __reduce__ (configuration only).
 *
 * The kernels: pack_doubles (a list of floats as packed doubles; its caller is
 * NominalStream.enqueue_float_array), join_into (the HTTP row body into a reused buffer;
 * scratch.py and values.py), gather_runs (the Avro layout of many small records;
 * targets/_avro_block.py). A kernel's contract: what it reads comes in as arguments (buffers, arrays, lists)
 * and what it makes goes out as its result or into a buffer it was given; it reads or writes no
 * Python object's attributes or __dict__ by name, calls no Python method, and keeps no state
 * between calls. NominalStream's writes are otherwise Python (stream.py), one implementation.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>

/* Bytes of one WriteRequestNominal double point as join_into writes it (write_nominal.py's
 * _DOUBLE_STRIDE). */
#define DOUBLE_POINT_BYTES 25

/* DoublePoints: PointBatch's single points of double series, in arrival order, as three C
 * columns (series code, int ns, value). Where a flat list of Python objects held a point's int
 * and float until the batch settled, here they are let go with their element, and the settle
 * reads the columns as they are, with no list to convert and free. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t n, cap;
    long long *codes, *ts;
    double *values;
} DoublePoints;

static PyTypeObject DoublePointsType;

/* Room for one more point: 0, or -1 with MemoryError (nothing changed). */
static int
dp_reserve(DoublePoints *d)
{
    if (d->n < d->cap) {
        return 0;
    }
    Py_ssize_t cap = d->cap ? 2 * d->cap : 1024;
    long long *codes = PyMem_Realloc(d->codes, cap * sizeof(long long));
    if (codes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    d->codes = codes;
    long long *ts = PyMem_Realloc(d->ts, cap * sizeof(long long));
    if (ts == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    d->ts = ts;
    double *values = PyMem_Realloc(d->values, cap * sizeof(double));
    if (values == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    d->values = values;
    d->cap = cap;
    return 0;
}

/* Append one point: 0, or -1 with MemoryError (nothing appended). */
static inline int
dp_put(DoublePoints *d, long long code, long long t, double v)
{
    if (d->n == d->cap && dp_reserve(d) < 0) {
        return -1;
    }
    d->codes[d->n] = code;
    d->ts[d->n] = t;
    d->values[d->n] = v;
    d->n++;
    return 0;
}

static PyObject *
DoublePoints_append(DoublePoints *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "append() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    /* All three converted before anything is appended. */
    long long code = PyLong_AsLongLong(args[0]);
    if (code == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long t = PyLong_AsLongLong(args[1]);
    if (t == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (t == LLONG_MIN) { /* not an int64 ns Nominal takes (int_ns below) */
        PyErr_SetString(PyExc_OverflowError, "timestamp -2**63 is not an int64 ns Nominal takes");
        return NULL;
    }
    double v = PyFloat_AsDouble(args[2]);
    if (v == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (dp_put(self, code, t, v) < 0) {
        return NULL;
    }
    /* The new length: the caller's hand-over test needs it, and len() would be another call. */
    return PyLong_FromSsize_t(self->n);
}

/* (codes, timestamps, values) as bytearrays of int64, int64 and float64 (numpy takes each as
 * a writable array without a copy). */
static PyObject *
DoublePoints_columns(DoublePoints *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t n = self->n;
    PyObject *codes = PyByteArray_FromStringAndSize((const char *)self->codes, n * 8);
    PyObject *ts = codes == NULL ? NULL : PyByteArray_FromStringAndSize((const char *)self->ts, n * 8);
    PyObject *values = ts == NULL ? NULL : PyByteArray_FromStringAndSize((const char *)self->values, n * 8);
    PyObject *out = values == NULL ? NULL : PyTuple_Pack(3, codes, ts, values);
    Py_XDECREF(codes);
    Py_XDECREF(ts);
    Py_XDECREF(values);
    return out;
}

static PyObject *
DoublePoints_clear(DoublePoints *self, PyObject *Py_UNUSED(ignored))
{
    self->n = 0;
    Py_RETURN_NONE;
}

static PyObject *
DoublePoints_take(DoublePoints *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = DoublePoints_columns(self, NULL);
    if (out != NULL) {
        self->n = 0;
    }
    return out;
}

static Py_ssize_t
DoublePoints_len(DoublePoints *self)
{
    return self->n;
}

static void
DoublePoints_dealloc(DoublePoints *self)
{
    PyMem_Free(self->codes);
    PyMem_Free(self->ts);
    PyMem_Free(self->values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef DoublePoints_methods[] = {
    {"append", (PyCFunction)(void (*)(void))DoublePoints_append, METH_FASTCALL,
     "append($self, code, timestamp, value, /)\n--\n\nAppend one point: an int code, an int64 ns (OverflowError\n"
     "outside -2**63 < ns < 2**63) and a float; return the points now held."},
    {"columns", (PyCFunction)DoublePoints_columns, METH_NOARGS,
     "columns($self, /)\n--\n\n(codes, timestamps, values): the points as int64, int64 and float64 bytearrays."},
    {"take", (PyCFunction)DoublePoints_take, METH_NOARGS, "take($self, /)\n--\n\ncolumns(), then clear()."},
    {"clear", (PyCFunction)DoublePoints_clear, METH_NOARGS, "clear($self, /)\n--\n\nDrop every point."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods DoublePoints_as_sequence = {
    .sq_length = (lenfunc)DoublePoints_len,
};

static PyTypeObject DoublePointsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "beam_nominal._pipeline._fastpath.DoublePoints",
    .tp_doc = "PointBatch's single points of double series as three C columns (see the module's source).",
    .tp_basicsize = sizeof(DoublePoints),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)DoublePoints_dealloc,
    .tp_methods = DoublePoints_methods,
    .tp_as_sequence = &DoublePoints_as_sequence,
};

/* What an element's class makes it, for process (see FastProcess.known). */
enum { KIND_OTHER, KIND_POINT, KIND_ROW };

/* FastProcess's channel cache: its slots (a power of two), the channels it holds at most (half
 * its slots, so that probes are short), and the slots a probe reads at most before the lookup
 * goes to the dict. */
#define CHANNEL_SLOTS 512
#define CHANNEL_CACHED 256
#define CHANNEL_PROBES 16

/* A channel of the bound float_codes map (held) and its series code; an empty slot's name is NULL. */
typedef struct {
    PyObject *name; /* an exact str of one byte per character */
    long long code;
    unsigned long long hash; /* of its characters (name_hash) */
} CachedChannel;

typedef struct {
    PyObject_HEAD
    /* The batch's float_codes map and double points, as _bind_fast last read them: the batch
     * rebinds them (the fast paths closed while rows are pending, a new bundle) and then calls
     * its on_rebind, which binds again. Held here, not looked up in the batch per point: two dict
     * lookups were a sixth of a Row point's instructions. */
    PyObject *float_codes; /* dict: channel -> series code */
    DoublePoints *doubles; /* NULL if the batch's are not a DoublePoints: every element is slow */
    PyObject *points;   /* set: NamedTuple classes whose instances are points as they are */
    PyObject *rows;     /* set: beam.Row classes (their fields are their __dict__) */
    PyObject *ts_field; /* str, interned: the timestamp field of dicts and Rows */
    /* The class last found in points or rows, and which (KIND_POINT, KIND_ROW): elements of a
     * pipeline are of one class, so the two set lookups are skipped. The sets only grow while
     * bound (_bind_fast forgets it). */
    PyObject *known;
    int known_kind;
    Py_ssize_t limit;   /* len(doubles) at which the batch is handed over */
    /* Channels of the bound float_codes map by their characters: a point's channel is most
     * often a new str (decoded, or formatted per element), whose hash and dict lookup cost
     * several times this comparison of characters. An open-addressed table that keeps the first
     * CHANNEL_CACHED channels met and evicts none: channels come round in turn, and a cache
     * that evicts one for another misses on both every time (direct-mapped, 20 of 100 channels
     * collided); past them, channels take the dict lookup as with no cache. Valid while
     * float_codes is bound: the batch only adds to its float_codes map, never changes or removes
     * a channel's code (staging.PointBatch._register), and _bind_fast empties it. */
    CachedChannel cache[CHANNEL_SLOTS];
    int cached; /* channels in cache */
} FastProcess;

static PyObject *str_channel, *str_value, *str_float_codes, *str_doubles, *str_slow, *str_handover;

/* After a failed lookup: 1 if the error means "not a fast point" (cleared), 0 if it must
 * propagate, as the Python rule's `except (KeyError, TypeError, ValueError)`. */
static int
not_this_shape(void)
{
    if (PyErr_ExceptionMatches(PyExc_KeyError) || PyErr_ExceptionMatches(PyExc_TypeError) ||
        PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_Clear();
        return 1;
    }
    return 0;
}

/* 1 if ts is an int ns the fast paths take as it is (its value into *out): an int (exactly)
 * with -2**63 < ts <= 2**63 - 1, as add_fast (the low end is not an int64 ns Nominal takes);
 * 0 otherwise. Raises nothing. */
static int
int_ns(PyObject *ts, long long *out)
{
    int overflow = 0;
    if (!PyLong_CheckExact(ts)) {
        return 0;
    }
    long long t = PyLong_AsLongLongAndOverflow(ts, &overflow); /* an exact int raises nothing here */
    *out = t;
    return !overflow && t != LLONG_MIN;
}

/* 1 if cls is in the set, 0 if not (or the set is unset), -1 on error. */
static int
in_set(PyObject *set, PyTypeObject *cls)
{
    if (set == NULL || PySet_GET_SIZE(set) == 0) {
        return 0;
    }
    /* Held for the lookup: a metaclass's __eq__ runs Python code, which may rebind the DoFn
     * (_rebind with a new set) and so free the set the lookup is still reading. */
    Py_INCREF(set);
    int found = PySet_Contains(set, (PyObject *)cls);
    Py_DECREF(set);
    return found;
}

/* One of the three fields of a point mapping, as a new reference; NULL with no error set if
 * it is missing or not this shape. */
static PyObject *
field(PyObject *fields, PyObject *name)
{
    PyObject *v = PyDict_GetItemWithError(fields, name);
    if (v == NULL) {
        return NULL;
    }
    Py_INCREF(v);
    return v;
}

/* The three fields of a point mapping of three entries whose keys are the very name objects
 * (borrowed, into *c, *t, *v): 1 if so, 0 if not (nothing set; the caller looks them up by
 * equality). One walk over the entries instead of three lookups by equality: a beam.Row's keys are its keyword names and a dict literal's its constants, interned as the
 * names here are. Runs no Python code. */
static int
fields_by_identity(PyObject *fields, PyObject *ts_field, PyObject **c, PyObject **t, PyObject **v)
{
    Py_ssize_t pos = 0;
    PyObject *key, *item, *found[3] = {NULL, NULL, NULL};
    /* Three entries (the caller checked the size): no fourth call to find the end. */
    for (int i = 0; i < 3 && PyDict_Next(fields, &pos, &key, &item); i++) {
        int at = key == str_channel ? 0 : key == ts_field ? 1 : key == str_value ? 2 : -1;
        if (at < 0) {
            return 0;
        }
        found[at] = item;
    }
    if (found[0] == NULL || found[1] == NULL || found[2] == NULL) {
        return 0;
    }
    *c = found[0];
    *t = found[1];
    *v = found[2];
    return 1;
}

/* A hash of every byte of a name, eight at a time: names often share long prefixes (paths of a
 * plant or a vehicle) and differ only at the end, and a hash of the first bytes gave all of
 * them one value, each lookup comparing it with every one. */
static unsigned long long
name_hash(const unsigned char *p, Py_ssize_t n)
{
    unsigned long long h = (unsigned long long)n * 0x9E3779B97F4A7C15ull, w;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8); /* a constant size: one load, no call */
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    if (i < n) {
        for (w = 0; i < n; i++) {
            w = (w << 8) | p[i];
        }
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    return h;
}

/* The channel's slot in the cache: the entry holding it, else the empty one where it goes (its
 * name NULL, its hash set for the insert), else NULL (not an exact str of one byte per
 * character, the cache full, or a probe too long). Runs no Python code. */
static CachedChannel *
cache_slot(FastProcess *self, PyObject *channel)
{
    if (!PyUnicode_CheckExact(channel)) {
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    /* Before 3.12 a str made by the legacy API may not be ready (its kind unset). */
    if (PyUnicode_READY(channel) < 0) {
        PyErr_Clear(); /* the dict lookup takes it */
        return NULL;
    }
#endif
    if (PyUnicode_KIND(channel) != PyUnicode_1BYTE_KIND) {
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(channel);
    const unsigned char *p = PyUnicode_1BYTE_DATA(channel);
    unsigned long long h = name_hash(p, n);
    /* Linear probing. At most half the slots are taken, so an empty one ends a probe within a
     * few slots; the bound only guards against names whose hashes crowd one run. */
    size_t at = (size_t)(h ^ (h >> 29));
    for (int probe = 0; probe < CHANNEL_PROBES; probe++, at++) {
        CachedChannel *entry = &self->cache[at & (CHANNEL_SLOTS - 1)];
        PyObject *name = entry->name;
        if (name == NULL) {
            if (self->cached >= CHANNEL_CACHED) {
                return NULL;
            }
            entry->hash = h;
            return entry;
        }
        if (name == channel || (entry->hash == h && PyUnicode_GET_LENGTH(name) == n &&
                                memcmp(PyUnicode_1BYTE_DATA(name), p, n) == 0)) {
            return entry;
        }
    }
    return NULL;
}

static void
clear_cache(FastProcess *self)
{
    for (int i = 0; self->cached > 0 && i < CHANNEL_SLOTS; i++) {
        if (self->cache[i].name != NULL) {
            Py_CLEAR(self->cache[i].name);
            self->cached--;
        }
    }
}

/* Append the point if it is a fast one: 1 appended, 0 not a fast point, -1 error. Takes
 * borrowed references (the caller holds the element, and through it the three). */
static int
append_fast(FastProcess *self, PyObject *channel, PyObject *ts, PyObject *value)
{
    long long t;
    if (!PyFloat_CheckExact(value) || !int_ns(ts, &t) || self->float_codes == NULL ||
        !PyDict_Check(self->float_codes) || self->doubles == NULL) {
        return 0;
    }
    CachedChannel *entry = cache_slot(self, channel);
    if (entry != NULL && entry->name != NULL) {
        if (dp_put(self->doubles, entry->code, t, PyFloat_AS_DOUBLE(value)) < 0) {
            return -1; /* only out of memory; the bundle fails */
        }
        return self->doubles->n >= self->limit ? 2 : 1;
    }
    /* Both held for the lookup: hashing the channel may run Python code (a str subclass's
     * __hash__ or __eq__), which may rebind the DoFn or make its batch rebind them, and so free
     * them. */
    PyObject *codes = Py_NewRef(self->float_codes), *doubles = Py_NewRef((PyObject *)self->doubles);
    PyObject *code = PyDict_GetItemWithError(codes, channel);
    Py_XINCREF(code);
    int rc = 0;
    long long c = 0;
    if (code == NULL) {
        rc = PyErr_Occurred() ? (not_this_shape() ? 0 : -1) : 0;
    }
    else if (codes != self->float_codes || doubles != (PyObject *)self->doubles) {
        /* Rebound meanwhile: the code may be no series of the batch now bound. Nothing
         * appended: the checked path reads the element afresh. */
        rc = 0;
    }
    else if ((c = PyLong_AsLongLong(code)) == -1 && PyErr_Occurred()) {
        rc = -1; /* a code is an int the batch numbered: cannot happen */
    }
    else if (dp_put(self->doubles, c, t, PyFloat_AS_DOUBLE(value)) < 0) {
        rc = -1; /* only out of memory; the bundle fails */
    }
    else {
        rc = self->doubles->n >= self->limit ? 2 : 1;
        /* Its slot found again: a rebinding during the lookup (of the same map) emptied the
         * cache. */
        if (entry != NULL && (entry = cache_slot(self, channel)) != NULL && entry->name == NULL) {
            entry->name = Py_NewRef(channel);
            entry->code = c;
            self->cached++;
        }
    }
    Py_XDECREF(code);
    Py_DECREF(doubles);
    Py_DECREF(codes);
    return rc;
}

static PyObject *
FastProcess_process(FastProcess *self, PyObject *element)
{
    PyTypeObject *cls = Py_TYPE(element);
    PyObject *channel = NULL, *ts = NULL, *value = NULL, *fields = NULL;
    int rc = 0, found = 0, kind = KIND_OTHER;

    if (self->float_codes == NULL) {
        goto slow;
    }
    if (cls == &PyTuple_Type) {
        kind = KIND_POINT;
    }
    else if ((PyObject *)cls == self->known) {
        kind = self->known_kind;
    }
    else if (cls != &PyDict_Type) {
        if ((found = in_set(self->points, cls)) == 0) {
            found = in_set(self->rows, cls);
            kind = found == 1 ? KIND_ROW : KIND_OTHER;
        }
        else {
            kind = found == 1 ? KIND_POINT : KIND_OTHER;
        }
        if (found < 0) {
            goto class_lookup_failed;
        }
        if (kind != KIND_OTHER) {
            /* Py_XSETREF: the class held before may be freed only once replaced. */
            Py_XSETREF(self->known, Py_NewRef((PyObject *)cls));
            self->known_kind = kind;
        }
    }
    if (kind == KIND_POINT) {
        /* A tuple (WriteDoFn puts only tuple classes in points; held here all the same). */
        if (!PyTuple_Check(element) || PyTuple_GET_SIZE(element) != 3) {
            goto slow;
        }
        channel = PyTuple_GET_ITEM(element, 0);
        ts = PyTuple_GET_ITEM(element, 1);
        value = PyTuple_GET_ITEM(element, 2);
        Py_INCREF(channel);
        Py_INCREF(ts);
        Py_INCREF(value);
    }
    else {
        if (cls == &PyDict_Type) {
            fields = Py_NewRef(element);
        }
        else if (kind == KIND_ROW) {
            /* vars(row): its fields, in place. Read as object.__dict__ reads it: a Row class has
             * no __dict__ of its own, which spares the type's lookup of the descriptor. */
            fields = PyObject_GenericGetDict(element, NULL);
            if (fields == NULL) {
                if (not_this_shape()) {
                    goto slow;
                }
                return NULL;
            }
        }
        else {
            goto slow;
        }
        if (!PyDict_Check(fields) || PyDict_GET_SIZE(fields) != 3) {
            Py_DECREF(fields);
            goto slow;
        }
        /* New references: looking one up may run Python code that changes the mapping (or
         * rebinds the DoFn: the timestamp field's name is held for its own lookup). */
        PyObject *ts_field = Py_NewRef(self->ts_field);
        if (fields_by_identity(fields, ts_field, &channel, &ts, &value)) {
            Py_INCREF(channel);
            Py_INCREF(ts);
            Py_INCREF(value);
        }
        else {
            channel = field(fields, str_channel);
            ts = channel ? field(fields, ts_field) : NULL;
            value = ts ? field(fields, str_value) : NULL;
        }
        Py_DECREF(ts_field);
        Py_DECREF(fields);
        if (value == NULL) {
            Py_XDECREF(channel);
            Py_XDECREF(ts);
            if (PyErr_Occurred() && !not_this_shape()) {
                return NULL;
            }
            goto slow;
        }
    }
    rc = append_fast(self, channel, ts, value);
    Py_DECREF(channel);
    Py_DECREF(ts);
    Py_DECREF(value);
    if (rc < 0) {
        return NULL;
    }
    if (rc == 2) {
        /* Outside the rule's error handling: a failed hand-over fails the bundle. */
        PyObject *done = PyObject_CallMethodNoArgs((PyObject *)self, str_handover);
        if (done == NULL) {
            return NULL;
        }
        Py_DECREF(done);
    }
    if (rc > 0) {
        return PyTuple_New(0);
    }
slow:
    return PyObject_CallMethodOneArg((PyObject *)self, str_slow, element);

class_lookup_failed:
    /* The element's class could not be hashed (its metaclass's __hash__ or __eq__ raised). The
     * Python process looks the class up in _slow too (its reader), where a KeyError, TypeError
     * or ValueError fails the element and anything else the bundle: so the same here. */
    if (not_this_shape()) {
        goto slow;
    }
    return NULL;
}

static PyObject *
FastProcess_bind_fast(FastProcess *self, PyObject *args)
{
    PyObject *batch, *points, *rows, *ts_field;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "OO!O!Un:_bind_fast", &batch, &PySet_Type, &points, &PySet_Type, &rows, &ts_field,
                          &limit)) {
        return NULL;
    }
    PyObject *codes = PyObject_GetAttr(batch, str_float_codes);
    PyObject *doubles = codes == NULL ? NULL : PyObject_GetAttr(batch, str_doubles);
    if (doubles == NULL) {
        Py_XDECREF(codes);
        return NULL;
    }
    if (!PyObject_TypeCheck(doubles, &DoublePointsType)) {
        Py_CLEAR(doubles); /* a batch of the Python DoublePoints: every element goes to _slow */
    }
    Py_INCREF(points);
    Py_INCREF(rows);
    /* Interned, so that fields_by_identity finds it: a name unpickled on a worker is a new str. */
    Py_INCREF(ts_field);
    PyUnicode_InternInPlace(&ts_field);
    Py_XSETREF(self->float_codes, codes);
    Py_XSETREF(self->doubles, (DoublePoints *)doubles);
    Py_XSETREF(self->points, points);
    Py_XSETREF(self->rows, rows);
    Py_XSETREF(self->ts_field, ts_field);
    Py_CLEAR(self->known); /* it was found in the sets replaced */
    clear_cache(self);     /* its codes are the map's replaced */
    self->known_kind = KIND_OTHER;
    self->limit = limit;
    Py_RETURN_NONE;
}

static int
FastProcess_traverse(FastProcess *self, visitproc visit, void *arg)
{
    Py_VISIT(self->float_codes);
    Py_VISIT(self->doubles);
    Py_VISIT(self->points);
    Py_VISIT(self->rows);
    Py_VISIT(self->ts_field);
    Py_VISIT(self->known);
    return 0;
}

static int
FastProcess_clear(FastProcess *self)
{
    Py_CLEAR(self->float_codes);
    Py_CLEAR(self->doubles);
    Py_CLEAR(self->points);
    Py_CLEAR(self->rows);
    Py_CLEAR(self->ts_field);
    Py_CLEAR(self->known);
    clear_cache(self);
    return 0;
}

static void
FastProcess_dealloc(FastProcess *self)
{
    PyObject_GC_UnTrack(self);
    FastProcess_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef FastProcess_methods[] = {
    {"process", (PyCFunction)FastProcess_process, METH_O,
     "process($self, element, /)\n--\n\nWrite one element: a plain point here, anything else by _slow."},
    {"_bind_fast", (PyCFunction)FastProcess_bind_fast, METH_VARARGS,
     "_bind_fast($self, batch, points, rows, timestamp_field, limit, /)\n--\n\n"
     "Set what process reads: the batch, the point and Row classes, the timestamp field and the hand-over length."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastProcessType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "beam_nominal._pipeline._fastpath.FastProcess",
    .tp_doc = "Base of WriteDoFn: its process method, compiled (see the module's source).",
    .tp_basicsize = sizeof(FastProcess),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)FastProcess_dealloc,
    .tp_traverse = (traverseproc)FastProcess_traverse,
    .tp_clear = (inquiry)FastProcess_clear,
    .tp_methods = FastProcess_methods,
};

/* One part of join_into: a buffer's bytes, or the double points of an (ns, values) pair. */
typedef struct {
    Py_buffer bytes;  /* the buffer, or the int64 ns */
    Py_buffer values; /* float64, for points (obj NULL otherwise) */
} JoinPart;

/* A 1-D C-contiguous view of 8-byte items of format f ("d", or "q"/"l" for int64); -1 with
 * TypeError naming the argument (``what``) otherwise. */
static int
column_view(PyObject *obj, Py_buffer *view, int doubles, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        return -1;
    }
    const char *f = view->format;
    if (view->ndim != 1 || view->itemsize != 8 || f == NULL ||
        !(doubles ? strcmp(f, "d") == 0 : (strcmp(f, "l") == 0 || strcmp(f, "q") == 0))) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be a 1-D %s array", what, doubles ? "float64" : "int64");
        return -1;
    }
    return 0;
}

/* x < 2**35 as a varint padded to 5 bytes. */
static inline void
put_varint5(unsigned char *p, unsigned long long x)
{
    p[0] = (unsigned char)(x & 0x7F) | 0x80;
    p[1] = (unsigned char)((x >> 7) & 0x7F) | 0x80;
    p[2] = (unsigned char)((x >> 14) & 0x7F) | 0x80;
    p[3] = (unsigned char)((x >> 21) & 0x7F) | 0x80;
    p[4] = (unsigned char)((x >> 28) & 0x7F);
}

/* The DoublePoint of each (ns, value), in write_nominal.py's layout for series of timestamps
 * >= 0 (its _double_points): 0a 17, the Timestamp 0a 0c 08 <seconds: 5-byte varint> 10 <nanos:
 * 5-byte varint>, then 11 and the double's 8 bytes. 0 if every ns is >= 0, else -1 (the caller
 * raises). */
static int
put_double_points(unsigned char *p, const long long *ns, const double *values, Py_ssize_t n)
{
    int bad = 0;
    for (Py_ssize_t i = 0; i < n; i++, p += DOUBLE_POINT_BYTES) {
        long long t = ns[i];
        bad |= t < 0;
        unsigned long long u = (unsigned long long)t, sec = u / 1000000000ULL;
        p[0] = 0x0A;
        p[1] = DOUBLE_POINT_BYTES - 2;
        p[2] = 0x0A;
        p[3] = 0x0C;
        p[4] = 0x08;
        put_varint5(p + 5, sec);
        p[10] = 0x10;
        put_varint5(p + 11, u - sec * 1000000000ULL);
        p[16] = 0x11;
        /* fixed64 is little-endian on the wire, whatever the host's order (numpy's path writes
         * "<f8"). On little-endian hosts one memcpy: gcc does not merge the byte loop into one
         * store. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        unsigned long long bits;
        memcpy(&bits, &values[i], 8);
        for (int k = 0; k < 8; k++) {
            p[17 + k] = (unsigned char)(bits >> (8 * k));
        }
#else
        memcpy(p + 17, &values[i], 8);
#endif
    }
    return bad ? -1 : 0;
}

/* b"".join(parts) written into out (a writable buffer) instead of a new bytes object; returns
 * the bytes written. Why: the HTTP encoders' bodies are request-sized, and a fresh object that
 * size costs more in first-touch page faults than the encoding; out is a buffer the thread reuses (beam_nominal/_wire/scratch.py). A part is a
 * C-contiguous buffer, or a tuple (ns, values) of 1-D int64 and float64 arrays of one length,
 * written as WriteRequestNominal double points (DOUBLE_POINT_BYTES each; see put_double_points):
 * one pass from the series' columns to the body, where numpy made a point matrix in many
 * passes and the join copied it once more. The writing runs without the GIL: a body is megabytes. */
static PyObject *
join_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "join_into takes a list of parts and a writable buffer");
        return NULL;
    }
    PyObject *parts = args[0];
    Py_ssize_t n = PyList_GET_SIZE(parts), got = 0, total = 0;
    Py_buffer out;
    if (PyObject_GetBuffer(args[1], &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    /* Views of every part first (the list's items may not change while they are held), then
     * the writing without the GIL, then the views released. */
    JoinPart *views = PyMem_New(JoinPart, n > 0 ? n : 1);
    PyObject *result = NULL;
    int bad = 0;
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        PyObject *part = PyList_GET_ITEM(parts, got);
        JoinPart *v = &views[got];
        v->values.obj = NULL;
        if (!PyTuple_CheckExact(part)) {
            if (PyObject_GetBuffer(part, &v->bytes, PyBUF_C_CONTIGUOUS) < 0) {
                goto done;
            }
            total += v->bytes.len;
            continue;
        }
        if (PyTuple_GET_SIZE(part) != 2) {
            PyErr_SetString(PyExc_TypeError, "join_into: a points part is a tuple (ns, values)");
            goto done;
        }
        if (column_view(PyTuple_GET_ITEM(part, 0), &v->bytes, 0, "join_into: timestamps") < 0) {
            goto done;
        }
        if (column_view(PyTuple_GET_ITEM(part, 1), &v->values, 1, "join_into: values") < 0) {
            v->values.obj = NULL;
            PyBuffer_Release(&v->bytes);
            goto done;
        }
        if (v->bytes.len != v->values.len) {
            got++; /* release both views below */
            PyErr_SetString(PyExc_ValueError, "join_into: timestamps and values differ in length");
            goto done;
        }
        total += v->bytes.len / 8 * DOUBLE_POINT_BYTES;
    }
    if (total > out.len) {
        PyErr_Format(PyExc_ValueError, "join_into: %zd bytes do not fit in %zd", total, out.len);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    unsigned char *at = (unsigned char *)out.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        JoinPart *v = &views[i];
        if (v->values.obj == NULL) {
            memcpy(at, v->bytes.buf, (size_t)v->bytes.len);
            at += v->bytes.len;
        }
        else {
            Py_ssize_t points = v->bytes.len / 8;
            bad |= put_double_points(at, (const long long *)v->bytes.buf, (const double *)v->values.buf, points);
            at += points * DOUBLE_POINT_BYTES;
        }
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "join_into: a points part has a timestamp before 1970");
        goto done;
    }
    result = PyLong_FromSsize_t(total);
done:
    for (Py_ssize_t i = 0; i < got; i++) {
        PyBuffer_Release(&views[i].bytes);
        if (views[i].values.obj != NULL) {
            PyBuffer_Release(&views[i].values);
        }
    }
    PyMem_Free(views);
    PyBuffer_Release(&out);
    return result;
}

/* gather_runs(src, starts, lens, out): the bytes src[starts[i]:starts[i] + lens[i]] for every i,
 * concatenated into the writable buffer out; returns their length. Why: the Avro layout of many
 * small records (_avro_block._double_layout) is millions of short runs; numpy gathers them through
 * an index a byte, where this copies each run once. starts and lens are 1-D int64 arrays of one
 * length; every run must lie in src, and out must hold them all. The copying runs without the
 * GIL. */
static PyObject *
gather_runs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "gather_runs takes src, starts, lens and out");
        return NULL;
    }
    Py_buffer src, starts, lens, out;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(args[0], &src, PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    if (column_view(args[1], &starts, 0, "gather_runs: starts") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    if (column_view(args[2], &lens, 0, "gather_runs: lens") < 0) {
        PyBuffer_Release(&starts);
        PyBuffer_Release(&src);
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&lens);
        PyBuffer_Release(&starts);
        PyBuffer_Release(&src);
        return NULL;
    }
    const long long *st = (const long long *)starts.buf, *ln = (const long long *)lens.buf;
    Py_ssize_t n = starts.len / 8;
    long long total = 0;
    if (lens.len != starts.len) {
        PyErr_SetString(PyExc_ValueError, "gather_runs: starts and lens differ in length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (st[i] < 0 || ln[i] < 0 || st[i] > src.len || ln[i] > src.len - st[i]) {
            PyErr_Format(PyExc_ValueError, "gather_runs: run %zd (%lld, %lld) is outside %zd bytes", i, st[i],
                         ln[i], src.len);
            goto done;
        }
        total += ln[i];
    }
    if (total > out.len) {
        PyErr_Format(PyExc_ValueError, "gather_runs: the runs' %lld bytes do not fit out's %zd", total, out.len);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    char *at = (char *)out.buf;
    const char *from = (const char *)src.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(at, from + st[i], (size_t)ln[i]);
        at += ln[i];
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromLongLong(total);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&lens);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&src);
    return result;
}

/* pack_doubles(values): values.float_row of a list (exactly) of floats (exactly), its doubles
 * packed in native order as bytes; None for anything else, which float_row then takes (or
 * refuses). staging._pack_doubles is its pure twin. Callers: NominalStream.enqueue_float_array,
 * where float_row's checks cost more than the rest of the call, and PointBatch's rows of wide
 * records of floats. */
static PyObject *
pack_doubles(PyObject *module, PyObject *list)
{
    if (!PyList_CheckExact(list)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    PyObject *packed = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(double));
    if (packed == NULL) {
        return NULL;
    }
    double *out = (double *)PyBytes_AS_STRING(packed);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(list, i);
        if (!PyFloat_CheckExact(v)) {
            Py_DECREF(packed);
            Py_RETURN_NONE;
        }
        out[i] = PyFloat_AS_DOUBLE(v);
    }
    return packed;
}

/* pack_record(record, keys): the values of a dict (exactly) whose keys are ``keys`` in order (the
 * same objects, or equal exact strs), every value a float (exactly), packed in native order as
 * bytes; None for anything else (the caller's general path takes it). staging._pack_record is its
 * pure twin. Its one caller is PointBatch.add_record, a row of a block of floats: the check of
 * its channels and of its values, and their conversion, in one pass. */
static PyObject *
pack_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "pack_record(record, keys) takes 2 arguments");
        return NULL;
    }
    PyObject *record = args[0], *keys = args[1];
    if (!PyDict_CheckExact(record) || !PyTuple_CheckExact(keys)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(keys);
    if (PyDict_GET_SIZE(record) != n) {
        Py_RETURN_NONE;
    }
    PyObject *packed = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(double));
    if (packed == NULL) {
        return NULL;
    }
    double *out = (double *)PyBytes_AS_STRING(packed);
    /* No Python code runs in this loop, so the dict cannot change under it. */
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (i < n && PyDict_Next(record, &pos, &key, &value)) {
        PyObject *want = PyTuple_GET_ITEM(keys, i);
        int same = key == want ||
                   (PyUnicode_CheckExact(key) && PyUnicode_CheckExact(want) && PyUnicode_Compare(key, want) == 0);
        if (!same || !PyFloat_CheckExact(value)) {
            Py_DECREF(packed);
            Py_RETURN_NONE;
        }
        out[i++] = PyFloat_AS_DOUBLE(value);
    }
    return packed;
}

static PyMethodDef module_methods[] = {
    {"pack_doubles", (PyCFunction)pack_doubles, METH_O,
     "pack_doubles(values, /)\n--\n\nA list of floats packed as native doubles (bytes); None for anything else."},
    {"pack_record", (PyCFunction)(void (*)(void))pack_record, METH_FASTCALL,
     "pack_record(record, keys, /)\n--\n\nThe floats of a dict whose keys are keys, in order, packed as native doubles (bytes); None for anything else."},
    {"gather_runs", (PyCFunction)(void (*)(void))gather_runs, METH_FASTCALL,
     "gather_runs(src, starts, lens, out, /)\n--\n\nThe runs src[starts[i]:starts[i] + lens[i]] concatenated into out; returns their length."},
    {"join_into", (PyCFunction)(void (*)(void))join_into, METH_FASTCALL,
     "join_into(parts, out, /)\n--\n\nb''.join(parts) written into the writable buffer out, (ns, values) parts as double points; returns its length."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "beam_nominal._pipeline._fastpath",
    .m_doc = "PointBatch's compiled paths: WriteDoFn.process and the batch's DoublePoints; and the kernels pack_doubles, pack_record, join_into and gather_runs (optional: beam_nominal runs without them).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    if (PyType_Ready(&DoublePointsType) < 0 || PyType_Ready(&FastProcessType) < 0) {
        return NULL;
    }
#define INTERN(var, text)                                                                                  \
    if ((var = PyUnicode_InternFromString(text)) == NULL) {                                                \
        return NULL;                                                                                       \
    }
    INTERN(str_channel, "channel");
    INTERN(str_value, "value");
    INTERN(str_float_codes, "float_codes");
    INTERN(str_doubles, "doubles");
    INTERN(str_slow, "_slow");
    INTERN(str_handover, "_handover");
#undef INTERN
    PyObject *m = PyModule_Create(&fastpath_module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "DoublePoints", (PyObject *)&DoublePointsType) < 0 ||
        PyModule_AddObjectRef(m, "FastProcess", (PyObject *)&FastProcessType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
