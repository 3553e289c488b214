"""Array backends (NumPy/SciPy on CPU, CuPy/cupyx on GPU) behind one namespace."""

from ilargi_db.backend.namespace import BACKENDS, NUMPY, Backend, backend_of, get_backend, to_host

__all__ = ["BACKENDS", "NUMPY", "Backend", "backend_of", "get_backend", "to_host"]
