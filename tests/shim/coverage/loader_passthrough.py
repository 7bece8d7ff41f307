"""Prints what dlsym, dlvsym and dlopen answer for ordinary (non-CUDA) lookups, so the
coverage test can compare a run under the shim with a bare run: the shim's loader stubs
must be invisible for everything that is not a CUDA entry point — same addresses, same
RTLD_NEXT semantics, same NULL plus dlerror() on failure."""
import ctypes
import ctypes.util

libc = ctypes.CDLL(None)
for function in (libc.dlsym, libc.dlvsym):
    function.restype = ctypes.c_void_p
libc.dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
libc.dlvsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
libc.dlopen.restype = ctypes.c_void_p
libc.dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.dlerror.restype = ctypes.c_char_p

class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]


def where(address):
    """Library and offset: stable across runs, unlike the address (ASLR)."""
    if not address:
        return "null"
    info = DlInfo()
    if not libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info)):
        return "unknown"
    return f"{info.dli_fname.decode()}+{address - info.dli_fbase:#x}"


RTLD_DEFAULT, RTLD_NEXT, RTLD_NOW = None, ctypes.c_void_p(-1), 2
libm = libc.dlopen(ctypes.util.find_library("m").encode(), RTLD_NOW)
print("dlopen libm:", bool(libm))
lines = [
    ("dlsym default printf", libc.dlsym(RTLD_DEFAULT, b"printf")),
    ("dlsym next printf", libc.dlsym(RTLD_NEXT, b"printf")),
    ("dlsym libm cos", libc.dlsym(libm, b"cos")),
    ("dlvsym default printf", libc.dlvsym(RTLD_DEFAULT, b"printf", b"GLIBC_2.2.5")),
    ("dlvsym libm cos", libc.dlvsym(libm, b"cos", b"GLIBC_2.2.5")),
]
for label, address in lines:
    print(label, where(address))
libc.dlerror()
missing = libc.dlsym(libm, b"no_such_symbol_anywhere")
error = libc.dlerror()
print("dlsym missing:", hex(missing or 0), "error:", bool(error))
missing = libc.dlopen(b"libno-such-library.so", RTLD_NOW)
print("dlopen missing:", bool(missing), "error:", (libc.dlerror() or b"").decode())
