# MessagePack written straight onto the end of a bytearray (msgpack_out.pyx).
from libc.stdint cimport int64_t


cdef int put_nil(bytearray out) except -1
cdef int put_int(bytearray out, int64_t v) except -1
cdef int put_double(bytearray out, double x) except -1
cdef int put_str(bytearray out, str s) except -1
cdef int put_map_header(bytearray out, Py_ssize_t n) except -1
cdef int put_array_header(bytearray out, Py_ssize_t n) except -1
cdef int put_raw(bytearray out, const char* data, Py_ssize_t n) except -1
cdef int put_value(bytearray out, object value) except -1
