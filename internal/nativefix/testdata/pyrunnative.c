// A CPython extension module written without Python.h: the declarations
// below are CPython 3.14's on wasm32 (32-bit pointers and Py_ssize_t), and
// the functions come from the main module (Pyodide's libpython) when the
// side module loads. Its state lives in C statics: a counter, a function
// pointer, and a Python object it holds a reference to.
typedef int Py_ssize_t;
typedef struct PyObject {
  Py_ssize_t ob_refcnt;
  void *ob_type;
} PyObject;
typedef PyObject *(*PyCFunction)(PyObject *, PyObject *);
typedef struct {
  const char *ml_name;
  PyCFunction ml_meth;
  int ml_flags;
  const char *ml_doc;
} PyMethodDef;
typedef struct {
  PyObject ob_base;
  PyObject *(*m_init)(void);
  Py_ssize_t m_index;
  PyObject *m_copy;
} PyModuleDef_Base;
typedef struct {
  PyModuleDef_Base m_base;
  const char *m_name;
  const char *m_doc;
  Py_ssize_t m_size;
  PyMethodDef *m_methods;
  void *m_slots;
  void *m_traverse;
  void *m_clear;
  void *m_free;
} PyModuleDef;

#define METH_NOARGS 0x0004
#define METH_O 0x0008
#define PYTHON_API_VERSION 1013

PyObject *PyModule_Create2(PyModuleDef *, int);
PyObject *PyLong_FromLong(long);
long PyLong_AsLong(PyObject *);
void Py_IncRef(PyObject *);
void Py_DecRef(PyObject *);

static long count;
static long step(long c) { return c + 1; }
static long twice(long c) { return c + 2; }
static long (*stepper)(long) = step;
static PyObject *kept;

// bump() -> the counter after one more step.
static PyObject *bump(PyObject *self, PyObject *unused) {
  count = stepper(count);
  return PyLong_FromLong(count);
}

// faster() makes each later bump add 2: a function pointer set at run time.
static PyObject *faster(PyObject *self, PyObject *unused) {
  stepper = twice;
  return PyLong_FromLong(count);
}

// keep(obj) holds a reference to obj in a C static; returns the counter.
static PyObject *keep(PyObject *self, PyObject *obj) {
  Py_IncRef(obj);
  if (kept) Py_DecRef(kept);
  kept = obj;
  return PyLong_FromLong(count);
}

// kept() returns the object keep() holds (0 if none).
static PyObject *kept_(PyObject *self, PyObject *unused) {
  if (!kept) return PyLong_FromLong(0);
  Py_IncRef(kept);
  return kept;
}

static PyMethodDef methods[] = {
    {"bump", bump, METH_NOARGS, "the counter after one more step"},
    {"faster", faster, METH_NOARGS, "each later bump adds 2"},
    {"keep", keep, METH_O, "hold a reference to an object"},
    {"kept", kept_, METH_NOARGS, "the object held"},
    {0, 0, 0, 0},
};

static PyModuleDef def = {
    {{1, 0}, 0, 0, 0}, "pyrunnative", "pyrun's native test extension", -1, methods, 0, 0, 0, 0,
};

PyObject *PyInit_pyrunnative(void) { return PyModule_Create2(&def, PYTHON_API_VERSION); }
