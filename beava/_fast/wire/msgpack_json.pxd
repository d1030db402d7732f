# JSON text of MessagePack values (msgpack_json.pyx).
from beava._fast.wire.msgpack_out cimport Writer


# Append to ``out`` the JSON text of the scan row ``data[:n]``, a MessagePack map whose keys
# are text (``array``: an array of values): the text msgspec.json gives the decoded row.
# ValueError when it is not one.
cdef int json_row(Writer* out, const char* data, Py_ssize_t n, bint array) except -1
