/* Structures named and laid out as CPython 3.11's (x86-64), with only the
 * members collector/cpython reads and padding between them: the DWARF of
 * structs.so (gcc -g -O0 -shared -fPIC -nostdlib -o structs.so structs.c)
 * is a small fixture of its DWARF reader (typedefs of anonymous structs,
 * nested members, bitfields, enumerations), and the seed of its fuzz
 * target. The static assertions hold the offsets to 3.11's table. */
#include <stddef.h>
#include <stdint.h>

#define PAD(name, n) char name[n]

typedef struct _object {
	intptr_t ob_refcnt;
	struct _typeobject *ob_type;
} PyObject;

typedef struct {
	PyObject ob_base;
	intptr_t ob_size;
} PyVarObject;

struct _typeobject {
	PyVarObject ob_base;
	const char *tp_name;
};

typedef struct {
	PyVarObject ob_base;
	intptr_t ob_shash;
	char ob_sval[1];
} PyBytesObject;

typedef struct {
	PyObject ob_base;
	intptr_t length;
	intptr_t hash;
	struct {
		unsigned int interned : 2;
		unsigned int kind : 3;
		unsigned int compact : 1;
		unsigned int ascii : 1;
		unsigned int ready : 1;
		unsigned int : 24;
	} state;
	void *wstr;
} PyASCIIObject;

typedef struct {
	PyASCIIObject _base;
	intptr_t utf8_length;
	char *utf8;
	intptr_t wstr_length;
} PyCompactUnicodeObject;

struct _gil_runtime_state {
	unsigned long interval;
	void *last_holder;
	int locked;
};

typedef struct _is PyInterpreterState;
typedef struct _ts PyThreadState;

typedef struct pyruntimestate {
	PAD(pad0, 40);
	struct pyinterpreters {
		PyInterpreterState *head;
		PyInterpreterState *main;
	} interpreters;
	PAD(pad1, 360 - 56);
	struct _ceval_runtime_state {
		struct _gil_runtime_state gil;
	} ceval;
	PAD(pad2, 576 - 360 - sizeof(struct _ceval_runtime_state));
	struct _gilstate_runtime_state {
		PyThreadState *tstate_current;
	} gilstate;
	PAD(pad3, 166688 - 584);
} _PyRuntimeState;

struct _is {
	struct _is *next;
	PAD(pad0, 8);
	struct pythreads {
		PyThreadState *head;
	} threads;
};

typedef struct _PyInterpreterFrame _PyInterpreterFrame;

typedef struct _PyCFrame {
	uint8_t use_tracing;
	_PyInterpreterFrame *current_frame;
} _PyCFrame;

struct _ts {
	PyThreadState *prev;
	PyThreadState *next;
	PyInterpreterState *interp;
	PAD(pad0, 56 - 24);
	_PyCFrame *cframe;
	PAD(pad1, 152 - 64);
	unsigned long thread_id;
	unsigned long native_thread_id;
	PAD(pad2, 224 - 168);
	PyObject *context;
	uint64_t context_ver;
};

enum _frameowner {
	FRAME_OWNED_BY_THREAD = 0,
	FRAME_OWNED_BY_GENERATOR = 1,
	FRAME_OWNED_BY_FRAME_OBJECT = 2
};

typedef struct PyCodeObject PyCodeObject;

struct _PyInterpreterFrame {
	PAD(pad0, 32);
	PyCodeObject *f_code;
	PyObject *frame_obj;
	struct _PyInterpreterFrame *previous;
	uint16_t *prev_instr;
	int stacktop;
	_Bool is_entry;
	char owner;
	PyObject *localsplus[1];
};

struct PyCodeObject {
	PAD(pad0, 72);
	int co_firstlineno;
	PAD(pad1, 112 - 76);
	PyObject *co_filename;
	PyObject *co_name;
	PyObject *co_qualname;
	PyObject *co_linetable;
	PAD(pad2, 184 - 144);
	char co_code_adaptive[2];
};

typedef struct {
	PAD(pad0, 80);
	_PyInterpreterFrame gi_iframe;
} PyGenObject;

_Static_assert(offsetof(PyASCIIObject, state) == 32, "state");
_Static_assert(sizeof(PyASCIIObject) == 48, "PyASCIIObject");
_Static_assert(sizeof(PyCompactUnicodeObject) == 72, "PyCompactUnicodeObject");
_Static_assert(sizeof(_PyRuntimeState) == 166688, "_PyRuntimeState");
_Static_assert(offsetof(_PyRuntimeState, interpreters.head) == 40, "interpreters.head");
_Static_assert(offsetof(_PyRuntimeState, ceval.gil) == 360, "ceval.gil");
_Static_assert(offsetof(_PyRuntimeState, gilstate.tstate_current) == 576, "tstate_current");
_Static_assert(offsetof(struct _ts, native_thread_id) == 160, "native_thread_id");
_Static_assert(offsetof(struct _ts, context_ver) == 232, "context_ver");
_Static_assert(offsetof(_PyInterpreterFrame, previous) == 48, "previous");
_Static_assert(offsetof(_PyInterpreterFrame, owner) == 69, "owner");
_Static_assert(offsetof(PyCodeObject, co_code_adaptive) == 184, "co_code_adaptive");
_Static_assert(offsetof(PyGenObject, gi_iframe) == 80, "gi_iframe");

/* Used, so that their debug information is emitted. */
_PyRuntimeState _PyRuntime;
PyThreadState a_tstate;
PyInterpreterState an_interp;
_PyCFrame a_cframe;
_PyInterpreterFrame a_frame;
PyCodeObject a_code;
PyBytesObject a_bytes;
PyCompactUnicodeObject a_str;
PyGenObject a_gen;
struct _typeobject a_type;
enum _frameowner an_owner;
