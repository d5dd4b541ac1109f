/* PointBatch's compiled paths: WriteDoFn.process (below, FastProcess) and the flat list's split
 * into columns (flat_columns, at the end).
 *
 * WriteDoFn.process, compiled: the per-element fast path of WriteToNominal.
 *
 * Why C: Beam calls process once per element, and in Python the call and a dozen bytecodes of
 * the rule cost ~2,500 instructions a point, more than nominal-streaming's whole sink; compiled
 * (docs/benchmarks.md, "the DoFn's process, compiled") the call and the rule cost a few hundred.
 *
 * The rule is PointBatch.add_fast's (beam_nominal/_pipeline/staging.py), read out of the element
 * shapes a plain point comes in: a (channel, int ns, float) tuple, a NamedTuple class of those
 * fields in that order, and a dict or beam.Row of exactly the fields channel, <timestamp field>
 * and value. Such a point of a known untagged double series (batch.fast maps its channel to its
 * series code) goes onto batch.flat as three items. tests/unit/test_fast_path.py holds this
 * copy and add_fast to the same points, value by value.
 *
 * Anything else goes to the instance's Python method _slow(element), whose result is returned;
 * when batch.flat reaches the limit, _handover() is called (its errors propagate: a failed
 * hand-over fails the bundle). Lookup errors that mean "not this shape" (KeyError, TypeError,
 * ValueError, as the Python rule catches) send the element to _slow; any other error propagates.
 *
 * FastProcess is a base class: WriteDoFn(FastProcess, beam.DoFn), so process is an ordinary
 * method of the DoFn. It holds only references to the instance's own objects, set by _bind_fast;
 * pickling goes through WriteDoFn's __reduce__ (configuration only).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>

typedef struct {
    PyObject_HEAD
    PyObject *batch;    /* the __dict__ of the PointBatch the points go to (see _bind_fast) */
    PyObject *points;   /* set: NamedTuple classes whose instances are points as they are */
    PyObject *rows;     /* set: beam.Row classes (their fields are their __dict__) */
    PyObject *ts_field; /* str: the timestamp field of dicts and Rows */
    Py_ssize_t limit;   /* len(batch.flat) at which the batch is handed over */
} FastProcess;

static PyObject *str_channel, *str_value, *str_fast, *str_flat, *str_slow, *str_handover, *str_dict;

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

/* Append the point if it is a fast one: 1 appended, 0 not a fast point, -1 error. Takes
 * borrowed references (the caller holds the element, and through it the three). */
static int
append_fast(FastProcess *self, PyObject *channel, PyObject *ts, PyObject *value)
{
    int overflow = 0;
    if (!PyFloat_CheckExact(value) || !PyLong_CheckExact(ts)) {
        return 0;
    }
    /* -2**63 < ts <= 2**63 - 1, as add_fast (the low end is not an int64 ns Nominal takes). */
    long long t = PyLong_AsLongLongAndOverflow(ts, &overflow);
    if (overflow || t == LLONG_MIN) {
        return 0;
    }
    if (t == -1 && PyErr_Occurred()) {
        return -1;
    }
    /* One batch for the whole point, held: the channel lookup below may run Python code
     * (a str subclass's __hash__ or __eq__), which may rebind the DoFn to another batch. As in
     * add_fast (a method of one batch), the code is appended to the flat list of the batch
     * whose fast map gave it, and that batch's namespace outlives the lookup. */
    PyObject *batch = Py_NewRef(self->batch);
    PyObject *fast = PyDict_GetItemWithError(batch, str_fast);
    if (fast == NULL || !PyDict_Check(fast)) {
        Py_DECREF(batch);
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_INCREF(fast); /* the lookup below may run Python code, which may replace batch.fast */
    PyObject *code = PyDict_GetItemWithError(fast, channel); /* hashing may run Python code */
    Py_XINCREF(code);
    Py_DECREF(fast);
    if (code == NULL) {
        Py_DECREF(batch);
        return PyErr_Occurred() ? (not_this_shape() ? 0 : -1) : 0;
    }
    PyObject *flat = PyDict_GetItemWithError(batch, str_flat);
    Py_XINCREF(flat); /* before the batch is let go: the batch may hold the only reference */
    Py_DECREF(batch);
    if (flat == NULL) {
        Py_DECREF(code);
        return PyErr_Occurred() ? -1 : 0;
    }
    int rc = 0;
    if (!PyList_CheckExact(flat)) {
        rc = 0;
    }
    else if (PyList_Append(flat, code) < 0 || PyList_Append(flat, ts) < 0 || PyList_Append(flat, value) < 0) {
        rc = -1; /* only out of memory; the bundle fails */
    }
    else {
        rc = PyList_GET_SIZE(flat) >= self->limit ? 2 : 1;
    }
    Py_DECREF(flat);
    Py_DECREF(code);
    return rc;
}

static PyObject *
FastProcess_process(FastProcess *self, PyObject *element)
{
    PyTypeObject *cls = Py_TYPE(element);
    PyObject *channel = NULL, *ts = NULL, *value = NULL, *fields = NULL;
    int rc = 0, found = 0;

    if (self->batch == NULL) {
        goto slow;
    }
    if (cls == &PyTuple_Type || (found = in_set(self->points, cls)) == 1) {
        if (PyTuple_GET_SIZE(element) != 3) {
            goto slow;
        }
        channel = PyTuple_GET_ITEM(element, 0);
        ts = PyTuple_GET_ITEM(element, 1);
        value = PyTuple_GET_ITEM(element, 2);
        Py_INCREF(channel);
        Py_INCREF(ts);
        Py_INCREF(value);
    }
    else if (found < 0) {
        goto class_lookup_failed;
    }
    else {
        if (cls == &PyDict_Type) {
            fields = Py_NewRef(element);
        }
        else if ((found = in_set(self->rows, cls)) == 1) {
            fields = PyObject_GetAttr(element, str_dict); /* vars(row): its fields, in place */
            if (fields == NULL) {
                if (not_this_shape()) {
                    goto slow;
                }
                return NULL;
            }
        }
        else if (found < 0) {
            goto class_lookup_failed;
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
        channel = field(fields, str_channel);
        ts = channel ? field(fields, ts_field) : NULL;
        value = ts ? field(fields, str_value) : NULL;
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
    /* The batch's attributes are read from its __dict__, the namespace its own assignments
     * (self.flat = [] ...) write to: a third of the instructions of a getattr each. */
    batch = PyObject_GenericGetDict(batch, NULL);
    if (batch == NULL) {
        return NULL;
    }
    Py_INCREF(points);
    Py_INCREF(rows);
    Py_INCREF(ts_field);
    Py_XSETREF(self->batch, batch);
    Py_XSETREF(self->points, points);
    Py_XSETREF(self->rows, rows);
    Py_XSETREF(self->ts_field, ts_field);
    self->limit = limit;
    Py_RETURN_NONE;
}

static int
FastProcess_traverse(FastProcess *self, visitproc visit, void *arg)
{
    Py_VISIT(self->batch);
    Py_VISIT(self->points);
    Py_VISIT(self->rows);
    Py_VISIT(self->ts_field);
    return 0;
}

static int
FastProcess_clear(FastProcess *self)
{
    Py_CLEAR(self->batch);
    Py_CLEAR(self->points);
    Py_CLEAR(self->rows);
    Py_CLEAR(self->ts_field);
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

/* PointBatch's flat list of single points, (code, int ns, value) triples, as three columns:
 * codes and timestamps int64 and values float64, each a bytearray (numpy takes it as a writable
 * array without a copy). None when a value is not a float (a point of another type's series),
 * for PointBatch to convert with numpy as it does without this module: one pass here where
 * numpy's fromiter over three slices of the list cost ~650 instructions a point. */
static PyObject *
flat_columns(PyObject *module, PyObject *flat)
{
    if (!PyList_CheckExact(flat) || PyList_GET_SIZE(flat) % 3 != 0) {
        PyErr_SetString(PyExc_TypeError, "flat_columns takes a list of (code, int, float) triples");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(flat) / 3;
    PyObject *codes = PyByteArray_FromStringAndSize(NULL, n * 8);
    PyObject *ts = PyByteArray_FromStringAndSize(NULL, n * 8);
    PyObject *values = PyByteArray_FromStringAndSize(NULL, n * 8);
    PyObject *out = NULL;
    if (codes == NULL || ts == NULL || values == NULL) {
        goto done;
    }
    long long *c = (long long *)PyByteArray_AS_STRING(codes);
    long long *t = (long long *)PyByteArray_AS_STRING(ts);
    double *v = (double *)PyByteArray_AS_STRING(values);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyList_GET_ITEM(flat, 3 * i + 2);
        if (!PyFloat_Check(value)) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        v[i] = PyFloat_AS_DOUBLE(value);
        /* Codes and timestamps are ints the batch checked (int64 ns) or numbered itself. */
        c[i] = PyLong_AsLongLong(PyList_GET_ITEM(flat, 3 * i));
        t[i] = PyLong_AsLongLong(PyList_GET_ITEM(flat, 3 * i + 1));
        if ((c[i] == -1 || t[i] == -1) && PyErr_Occurred()) {
            goto done;
        }
    }
    out = PyTuple_Pack(3, codes, ts, values);
done:
    Py_XDECREF(codes);
    Py_XDECREF(ts);
    Py_XDECREF(values);
    return out;
}

static PyMethodDef module_methods[] = {
    {"flat_columns", (PyCFunction)flat_columns, METH_O,
     "flat_columns(flat, /)\n--\n\n(codes, timestamps, values) of a flat list of single points, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "beam_nominal._pipeline._fastpath",
    .m_doc = "PointBatch's compiled paths: WriteDoFn.process and flat_columns (optional: beam_nominal runs without them).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    if (PyType_Ready(&FastProcessType) < 0) {
        return NULL;
    }
#define INTERN(var, text)                                                                                  \
    if ((var = PyUnicode_InternFromString(text)) == NULL) {                                                \
        return NULL;                                                                                       \
    }
    INTERN(str_channel, "channel");
    INTERN(str_value, "value");
    INTERN(str_fast, "fast");
    INTERN(str_flat, "flat");
    INTERN(str_slow, "_slow");
    INTERN(str_handover, "_handover");
    INTERN(str_dict, "__dict__");
#undef INTERN
    PyObject *m = PyModule_Create(&fastpath_module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&FastProcessType);
    if (PyModule_AddObject(m, "FastProcess", (PyObject *)&FastProcessType) < 0) {
        Py_DECREF(&FastProcessType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
