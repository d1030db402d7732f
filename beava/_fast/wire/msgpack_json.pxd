# JSON text of MessagePack values (msgpack_json.pyx).
from beava._fast.wire.msgpack_out cimport Writer


# Append to ``out`` the JSON text of the MessagePack map ``data[:n]`` whose keys are text (a
# scan row): the text msgspec.json gives the decoded map. ValueError when it is not one.
cdef int json_map(Writer* out, const char* data, Py_ssize_t n) except -1
# The same for the MessagePack array ``data[:n]`` (a scan row of values alone): its JSON
# array text.
cdef int json_array(Writer* out, const char* data, Py_ssize_t n) except -1
