/* The extension module's entry point. otlp.backend.native loads the kernels with ctypes, so the module itself is empty; it
 * exists so that setuptools can build and install the library like any extension (setup.py). OTLP_MODULE is the
 * module's name (_kernels or _kernels_avx2); OTLP_FINGERPRINT the sources' fingerprint at build time
 * (otlp/backend/native/sources.py), which the loader compares with the sources beside the library. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define OTLP_CAT(a, b) a##b
#define OTLP_INIT(name) OTLP_CAT(PyInit_, name)
#define OTLP_STR2(name) #name
#define OTLP_STR(name) OTLP_STR2(name)

static struct PyModuleDef otlp_module = {PyModuleDef_HEAD_INIT, OTLP_STR(OTLP_MODULE),
                                         "otlp's C kernels, called through ctypes by otlp.backend.native", -1, NULL};

#ifndef OTLP_FINGERPRINT
#define OTLP_FINGERPRINT ""
#endif

const char *otlp_source_fingerprint(void) { return OTLP_FINGERPRINT; }

PyMODINIT_FUNC OTLP_INIT(OTLP_MODULE)(void) { return PyModule_Create(&otlp_module); }
