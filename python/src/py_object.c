/* Every object's lifecycle and lock (qac_python.h, "Threads").
 *
 * States: NEW (made by tp_new: every call refuses it), OPENING (tp_init
 * loading with the GIL released: refused too, and a second __init__ with
 * it), OPEN, CLOSED. A call checks the state after it holds the lock, so a
 * close() that ran while it waited is seen. close() sets CLOSED before it
 * lets the GIL go to free the handle, so the calls that run wholly under
 * the GIL (and check the state only) never see a handle being freed. */
#include <errno.h>
#include <time.h>

#include "qac_python.h"

#define WAIT_SLICE_NS 50000000L /* a lock is waited for in slices, with a look for signals after each */

PyObject *qpy_new(PyTypeObject *type, qpy_free_fn free_handle) {
    qpy_obj *o = (qpy_obj *)type->tp_alloc(type, 0);
    if (!o) return NULL;
    if (pthread_rwlock_init(&o->lock, NULL) != 0) {
        Py_TYPE(o)->tp_free((PyObject *)o);
        return PyErr_NoMemory();
    }
    o->state = QPY_NEW;
    o->users = 0;
    o->free_handle = free_handle;
    return (PyObject *)o;
}

void qpy_dealloc(qpy_obj *o) {
    /* no call is in flight (each holds a reference) and no borrower is
     * left (each holds a reference too) */
    if (o->state == QPY_OPEN || o->state == QPY_CLOSED) o->free_handle(o);
    pthread_rwlock_destroy(&o->lock);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

int qpy_init_begin(qpy_obj *o) {
    if (o->state != QPY_NEW) {
        PyErr_Format(PyExc_RuntimeError, "%s.__init__: the object is %s; make a new one", Py_TYPE(o)->tp_name,
                     o->state == QPY_OPENING  ? "being initialised"
                     : o->state == QPY_CLOSED ? "closed"
                                              : "already initialised");
        return -1;
    }
    o->state = QPY_OPENING;
    return 0;
}

int qpy_init_end(qpy_obj *o, int ok) {
    o->state = ok ? QPY_OPEN : QPY_NEW;
    return ok ? 0 : -1;
}

int qpy_check_open(qpy_obj *o) {
    if (o->state == QPY_OPEN) return 0;
    PyErr_Format(PyExc_ValueError, "%s is %s", Py_TYPE(o)->tp_name,
                 o->state == QPY_CLOSED ? "closed"
                                        : "not initialised (its __init__ did not run, failed, or is still running)");
    return -1;
}

static int try_take(qpy_obj *o, int mode) {
    return mode == QPY_EXCLUSIVE ? pthread_rwlock_trywrlock(&o->lock) : pthread_rwlock_tryrdlock(&o->lock);
}

static int take_until(qpy_obj *o, int mode, const struct timespec *until) {
    return mode == QPY_EXCLUSIVE ? pthread_rwlock_timedwrlock(&o->lock, until)
                                 : pthread_rwlock_timedrdlock(&o->lock, until);
}

/* Wait for the lock with the GIL released, a slice at a time: between
 * slices, signal handlers run (on the main thread), so Ctrl-C reaches a
 * thread waiting for another's long call. */
static int take_lock(qpy_obj *o, int mode) {
    int rc = try_take(o, mode);
    while (rc == EBUSY || rc == ETIMEDOUT) {
        if (PyErr_CheckSignals() < 0) return -1;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += WAIT_SLICE_NS;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = take_until(o, mode, &until);
        Py_END_ALLOW_THREADS
    }
    if (rc == EDEADLK) {
        PyErr_Format(PyExc_RuntimeError, "%s: called from within one of its own calls (a callback?)",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if (rc) {
        PyErr_Format(PyExc_RuntimeError, "%s: cannot take its lock (error %d)", Py_TYPE(o)->tp_name, rc);
        return -1;
    }
    return 0;
}

int qpy_enter(qpy_obj *o, int mode) {
    if (take_lock(o, mode) < 0) return -1;
    if (qpy_check_open(o) < 0) {
        pthread_rwlock_unlock(&o->lock);
        return -1;
    }
    return 0;
}

void qpy_leave(qpy_obj *o) { pthread_rwlock_unlock(&o->lock); }

PyObject *qpy_close(qpy_obj *o, PyObject *unused) {
    if (o->state == QPY_OPENING)
        return PyErr_Format(PyExc_RuntimeError, "%s.close: the object is still being initialised",
                            Py_TYPE(o)->tp_name);
    if (o->state != QPY_OPEN) { /* closed already, or never opened: an __init__ after close is refused too */
        o->state = QPY_CLOSED;
        Py_RETURN_NONE;
    }
    if (take_lock(o, QPY_EXCLUSIVE) < 0) return NULL; /* the calls in flight end first */
    if (o->state == QPY_OPEN) {                       /* not closed by another thread while this one waited */
        o->state = QPY_CLOSED;
        if (o->users == 0) o->free_handle(o);
    }
    pthread_rwlock_unlock(&o->lock);
    Py_RETURN_NONE;
}

void qpy_borrow(qpy_obj *o) { o->users++; }

void qpy_give_back(qpy_obj *o) {
    if (--o->users == 0 && o->state == QPY_CLOSED) o->free_handle(o);
}

PyObject *qpy_enter_with(qpy_obj *o, PyObject *unused) {
    if (qpy_check_open(o) < 0) return NULL;
    return Py_NewRef((PyObject *)o);
}

PyObject *qpy_exit_with(qpy_obj *o, PyObject *args) {
    PyObject *r = qpy_close(o, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE; /* an exception from the with block goes on */
}
