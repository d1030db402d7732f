"""Facts shared by the SDK and the server: the operator catalogue, the spelling and typing
rules of the expression language, and the error codes with their HTTP statuses. Pure data
and pure functions: no sockets, no state."""
