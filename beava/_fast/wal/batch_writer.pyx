# cython: language_level=3
"""The WAL's writer thread, in C: it never takes the GIL (spec/durability.md §6).

``BatchWriter.submit(fd, batch, offset)`` hands one batch over; the thread sets the CRC of
its records when asked to (``seal``: the push pass leaves them unsealed, so that work is off
the event loop), writes all of it at ``offset`` (pwrite, looping on short writes), fdatasyncs
the file, and then adds one to
an eventfd (``fileno()``), which the event loop watches: the loop learns of a durable batch
without the writer thread ever waiting for the interpreter, and the interpreter never
stops to hand it the GIL. ``result()`` then gives what happened; ``wait()`` blocks until
the batch in flight is done (a synchronous barrier). One batch is in flight at a time.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from libc.errno cimport EINTR, ENOSPC, errno
from libc.stdint cimport uint8_t, uint64_t

from beava._fast.timing.clocks cimport monotonic
from beava._fast.wal.wal_record cimport seal_records


cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_create(pthread_t* thread, void* attr, void* (*start)(void*), void* arg)
    int pthread_join(pthread_t thread, void** retval)
    int pthread_mutex_init(pthread_mutex_t* mutex, void* attr)
    int pthread_mutex_destroy(pthread_mutex_t* mutex)
    int pthread_mutex_lock(pthread_mutex_t* mutex)
    int pthread_mutex_unlock(pthread_mutex_t* mutex)
    int pthread_cond_init(pthread_cond_t* cond, void* attr)
    int pthread_cond_destroy(pthread_cond_t* cond)
    int pthread_cond_wait(pthread_cond_t* cond, pthread_mutex_t* mutex)
    int pthread_cond_broadcast(pthread_cond_t* cond)

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)
    int EFD_NONBLOCK
    int EFD_CLOEXEC

cdef extern from "<unistd.h>" nogil:
    ctypedef long ssize_t
    ctypedef long off_t
    ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset)
    ssize_t write(int fd, const void* buf, size_t count)
    ssize_t read(int fd, void* buf, size_t count)
    int fdatasync(int fd)
    int close(int fd)
    int getpid()

cdef extern from "<sys/resource.h>" nogil:
    int PRIO_PROCESS
    int getpriority(int which, int who)
    int setpriority(int which, int who, int prio)

cdef extern from "<signal.h>" nogil:
    int kill(int pid, int sig)
    int SIGKILL

# where a batch failed (result()[1])
cpdef enum:
    STAGE_NONE = 0
    STAGE_WRITE = 1
    STAGE_SYNC = 2

cdef enum:
    IDLE = 0       # no batch in flight
    QUEUED = 1     # submitted, the thread has it
    DONE = 2       # written and synced (or failed): result() takes it


cdef struct Shared:
    pthread_mutex_t lock
    pthread_cond_t cond
    int state
    bint stopping
    int efd
    int nice           # the thread's nice value above the process's
    # the batch
    int fd
    const char* data
    Py_ssize_t size
    long long offset
    bint seal
    bint kill_after_write
    # its outcome
    int err
    int stage
    double seconds


cdef void _write_batch(Shared* s) noexcept nogil:
    """Write and fdatasync the batch in ``s``; its outcome into ``s``."""
    cdef Py_ssize_t done = 0
    cdef ssize_t n
    cdef double started
    s.err = 0
    s.stage = STAGE_NONE
    s.seconds = 0.0
    if s.seal:
        seal_records(<uint8_t*>s.data, s.size)
    while done < s.size:
        n = pwrite(s.fd, s.data + done, <size_t>(s.size - done), <off_t>(s.offset + done))
        if n < 0:
            if errno == EINTR:
                continue
            s.err = errno
            s.stage = STAGE_WRITE
            return
        if n == 0:  # no progress: as a full disk
            s.err = ENOSPC
            s.stage = STAGE_WRITE
            return
        done += n
    if s.kill_after_write:  # crash injection (wal_after_write): written, not synced
        kill(getpid(), SIGKILL)
    started = monotonic()
    if fdatasync(s.fd) != 0:
        s.err = errno
        s.stage = STAGE_SYNC
    s.seconds = monotonic() - started


cdef void* _run(void* arg) noexcept nogil:
    cdef Shared* s = <Shared*>arg
    cdef uint64_t one = 1
    if s.nice:  # Linux keeps a nice value per thread (who 0: this one)
        setpriority(PRIO_PROCESS, 0, getpriority(PRIO_PROCESS, 0) + s.nice)
    while True:
        pthread_mutex_lock(&s.lock)
        while s.state != QUEUED and not s.stopping:
            pthread_cond_wait(&s.cond, &s.lock)
        if s.state != QUEUED:  # stopping, nothing in flight
            pthread_mutex_unlock(&s.lock)
            return NULL
        pthread_mutex_unlock(&s.lock)
        _write_batch(s)  # the batch's fields are not touched by others while QUEUED
        pthread_mutex_lock(&s.lock)
        s.state = DONE
        pthread_cond_broadcast(&s.cond)
        pthread_mutex_unlock(&s.lock)
        while write(s.efd, &one, 8) < 0 and errno == EINTR:
            pass


cdef class BatchWriter:
    """A writer thread that writes and fdatasyncs one batch at a time (module docstring);
    ``nice``: the thread's nice value above the process's."""

    cdef Shared s
    cdef pthread_t thread
    cdef bint running
    cdef object batch  # the batch in flight (its bytes must stay put until result())

    def __cinit__(self, int nice=0):
        self.s.state = IDLE
        self.s.stopping = False
        self.s.nice = nice
        self.s.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
        if self.s.efd < 0:
            raise OSError(errno, "eventfd failed")
        pthread_mutex_init(&self.s.lock, NULL)
        pthread_cond_init(&self.s.cond, NULL)
        cdef int err = pthread_create(&self.thread, NULL, _run, &self.s)
        if err != 0:
            close(self.s.efd)
            raise OSError(err, "cannot start the WAL writer thread")
        self.running = True

    def fileno(self):
        """The eventfd that becomes readable when a batch is done."""
        return self.s.efd

    def submit(self, int fd, bytearray batch, long long offset, bint kill_after_write=False,
               bint seal=False):
        """Write ``batch`` at ``offset`` of ``fd`` and fdatasync it; ``kill_after_write``:
        SIGKILL the process between the write and the fsync; ``seal``: ``batch`` is WAL
        records, whose CRCs the thread sets first (wal_record.seal_records). ``batch`` is
        not to be read or resized until result() returns."""
        if self.s.state != IDLE:
            raise RuntimeError("a batch is in flight already")
        if not self.running:
            raise RuntimeError("the WAL writer thread is stopped")
        self.batch = batch
        pthread_mutex_lock(&self.s.lock)
        self.s.fd = fd
        self.s.data = PyByteArray_AS_STRING(batch)
        self.s.size = PyByteArray_GET_SIZE(batch)
        self.s.offset = offset
        self.s.seal = seal
        self.s.kill_after_write = kill_after_write
        self.s.state = QUEUED
        pthread_cond_broadcast(&self.s.cond)
        pthread_mutex_unlock(&self.s.lock)

    def result(self):
        """``(errno, stage, fdatasync seconds)`` of the batch when it is done (stage:
        STAGE_NONE, or STAGE_WRITE / STAGE_SYNC where it failed), else None."""
        cdef uint64_t count
        read(self.s.efd, &count, 8)  # the wake-up is consumed here (EAGAIN when none)
        pthread_mutex_lock(&self.s.lock)
        cdef int state = self.s.state
        pthread_mutex_unlock(&self.s.lock)
        if state != DONE:
            return None
        self.s.state = IDLE
        self.batch = None
        return self.s.err, self.s.stage, self.s.seconds

    def wait(self):
        """Block (without the GIL) until the batch in flight, if any, is done."""
        with nogil:
            pthread_mutex_lock(&self.s.lock)
            while self.s.state == QUEUED:
                pthread_cond_wait(&self.s.cond, &self.s.lock)
            pthread_mutex_unlock(&self.s.lock)

    def close(self):
        """Stop the thread once the batch in flight is done; idempotent."""
        self._stop()

    cdef void _stop(self) noexcept:
        if not self.running:
            return
        with nogil:
            pthread_mutex_lock(&self.s.lock)
            self.s.stopping = True
            pthread_cond_broadcast(&self.s.cond)
            pthread_mutex_unlock(&self.s.lock)
            pthread_join(self.thread, NULL)
        self.running = False
        close(self.s.efd)

    def __dealloc__(self):
        self._stop()
        pthread_cond_destroy(&self.s.cond)
        pthread_mutex_destroy(&self.s.lock)
