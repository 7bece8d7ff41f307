"""ferrum_replay: name the CUDA graphs a Python program replays.

With ferrum-replay's shim preloaded (``ferrum-replay record -- python serve.py``, or
``python -m ferrum_replay record -- python serve.py``), every CUDA graph replay becomes an
NVTX range named after its graph. This module lets the program choose those names::

    import ferrum_replay

    # A naming scope: every graph this thread instantiates inside the block is named.
    g = torch.cuda.CUDAGraph()
    with ferrum_replay.graph_name("decode bs=8"), torch.cuda.graph(g):
        model(static_input)

    # By handle, after instantiation: an int, a ctypes pointer, or an object exposing one
    # (torch.cuda.CUDAGraph's raw_cuda_graph_exec(), __int__, .value).
    ferrum_replay.name(g, "decode bs=8")

Without the shim everything here is a no-op and the program runs unchanged; importing the
module loads ctypes and looks up the shim's three functions in the process (ctypes.CDLL(None)):
no thread, no file, no other module of the program's.

The order of the ``with`` matters: Python leaves the context managers of one ``with``
statement in reverse order, and ``torch.cuda.graph`` instantiates its graph when its block
exits. Written ``with ferrum_replay.graph_name(...), torch.cuda.graph(g):``, the graph is
instantiated while the name is still pushed; the other way round the name is popped before
the instantiation and the graph keeps its default name. (With ``keep_graph=True``, PyTorch
instantiates at ``g.instantiate()`` or the first replay: put that call inside the scope.)

The names follow docs/naming.md: a name given by handle after the instantiation replaces the
scope's; both beat a names file (FERRUM_REPLAY_NAMES) and the call site. Names are copied;
control bytes and malformed UTF-8 become '?', and they are cut at 127 bytes.
"""

import functools
import numbers
import operator
import struct
import sys
import types
import weakref

try:
    import ctypes
except ImportError:
    # A Python built without _ctypes (no libffi where it was compiled): nothing here can call
    # the shim, so everything is the no-op it is without the shim, and the `ferrum-replay`
    # command, which imports this package first and needs no ctypes, still runs. (Imported
    # unconditionally, it failed the program's `import ferrum_replay`, and the command.)
    ctypes = None

__all__ = ["available", "graph_name", "name"]


def _shim_function(process, symbol, argtypes, restype):
    if process is None:
        return None
    function = getattr(process, symbol, None)
    if function is not None:
        function.argtypes = argtypes
        function.restype = restype
    return function


def _shim_functions():
    """The shim's exported functions, each None when the process has none of that name
    (ctypes.CDLL(None) is dlopen(NULL): the global scope, where a preloaded library is).
    Looked up one by one: a shim older than the naming scope still names by handle."""
    if ctypes is None:
        return None, None, None
    try:
        process = ctypes.CDLL(None)
    except OSError:
        process = None
    pop = _shim_function(process, "ferrum_replay_pop_graph_name", [], ctypes.c_int)
    # The push's value is dropped (a level is pushed whatever it returns): restype None, so the
    # call converts nothing and runs no Python code (see _EnterScope).
    push = _shim_function(process, "ferrum_replay_push_graph_name", [ctypes.c_char_p], None)
    return (_shim_function(process, "ferrum_replay_name_graph_exec",
                           [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_int),
            push if pop is not None else None, pop)


_name_graph_exec, _push_graph_name, _pop_graph_name = _shim_functions()


def available():
    """True when the shim is loaded in this process with its functions global: preloaded, or
    loaded by the program itself (ctypes.CDLL(path, ctypes.RTLD_GLOBAL)), in which case only
    the CUDA calls that reach it are seen: none of a driver or runtime loaded before it and
    called through its own handle. Whether it takes names depends on its state: name() says
    so per call (False while it names nothing: FERRUM_REPLAY=off, or no NVTX tool, no
    FERRUM_REPLAY_SUMMARY and FERRUM_REPLAY_GPU_TIME off)."""
    return _name_graph_exec is not None


# The shim keeps a name's first 127 bytes (ferrum_replay.h): a character is at least one byte,
# so its first 127 characters hold them all, whatever the rest.
_NAME_CHARS_NEEDED = 127


def _encoded(text):
    # The shim takes a C string: a NUL would silently cut the name there. Refused, as the os
    # functions refuse one in a path.
    if isinstance(text, bytes):
        if b"\0" in text:
            raise ValueError("a graph's name cannot hold a NUL character")
        return text
    if isinstance(text, str):
        if "\0" in text:
            raise ValueError("a graph's name cannot hold a NUL character")
        return _utf8(text)
    raise TypeError(f"a graph's name is a str or bytes, not {type(text).__name__}")


def _utf8(text):
    """`text` as UTF-8. U+DC80..U+DCFF give back the bytes they stand for (surrogateescape: a
    name from os.fsdecode() or a bytes path). Any other surrogate stands for no byte — a lone
    half of a pair, as json.loads('"\\ud83d"') or '\\ud83d\\ude80' written in Python give —
    and has no UTF-8 at all: it becomes '?', as the shim writes malformed UTF-8, where encode()
    raised UnicodeEncodeError into the program, shim or not."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # Character by character, so only what the shim keeps (ten million lone surrogates took
        # seven seconds here).
        text = text[:_NAME_CHARS_NEEDED]
        return "".join("?" if "\ud800" <= c <= "\udfff" and not "\udc80" <= c <= "\udcff"
                       else c for c in text).encode("utf-8", "surrogateescape")


_HANDLE_LIMIT = 1 << (8 * struct.calcsize("P"))  # a pointer's size


def _handle(graph_exec):
    """The cudaGraphExec_t / CUgraphExec behind `graph_exec`, as an int in 0..2**64-1 (a
    pointer's range): ctypes would wrap any other int silently (2**64 + h, or -2**64 + h, is
    handle h), naming a graph the caller never meant."""
    handle = _handle_value(graph_exec)
    if not 0 <= handle < _HANDLE_LIMIT:
        # (the value itself is not shown: a huge int cannot always be turned into text)
        got = "a negative int" if handle < 0 else f"a {handle.bit_length()}-bit int"
        raise OverflowError(f"a graph-exec handle is a pointer, "
                            f"0..2**{_HANDLE_LIMIT.bit_length() - 1}-1, not {got}")
    return handle


def _handle_value(graph_exec):
    value = graph_exec
    for _ in range(4):  # an object exposing an object exposing an int, at most this deep
        if isinstance(value, bool):
            break
        if isinstance(value, int):
            return value
        if ctypes is not None and isinstance(value, ctypes.c_void_p):
            return value.value or 0
        if ctypes is not None and isinstance(value, ctypes._Pointer):
            return ctypes.cast(value, ctypes.c_void_p).value or 0
        try:
            raw = getattr(value, "raw_cuda_graph_exec", None)
        except Exception:  # a property or a proxy's __getattr__ that raises: as below
            return 0
        if callable(raw):  # torch.cuda.CUDAGraph (PyTorch 2.7+)
            try:
                value = raw()
            except Exception:
                # No executable graph yet: PyTorch raises RuntimeError before capture, with
                # keep_graph=True before instantiate(), after reset(); Paddle raises
                # NotImplementedError. Nothing to name: a null handle (name() says False).
                return 0
            continue
        try:
            if hasattr(type(value), "__index__"):
                return operator.index(value)
            # A number that is not an integer (a float, Decimal, Fraction, numpy.float64) has
            # __int__ too, which would truncate 1.5 to graph 1: refused. An object that only
            # exposes its handle through __int__ is taken.
            if hasattr(type(value), "__int__") and not isinstance(value, (float, numbers.Number)):
                return int(value)
            if hasattr(value, "value"):
                value = value.value
                continue
        except TypeError:
            raise
        except Exception as error:
            # The object's own code failed: TypeError, never another of the errors name()
            # documents (a ValueError is a name with a NUL, an OverflowError a handle out of
            # range: a program that catches those must not take the object's error for them,
            # review JJ2).
            raise TypeError(f"not a graph-exec handle: a {type(graph_exec).__name__} whose "
                            f"handle could not be read ({type(error).__name__})") from None
        break
    # By its type's name: the object's own repr may raise, or be megabytes long.
    raise TypeError(f"not a graph-exec handle: a {type(graph_exec).__name__} (pass an int, a "
                    "ctypes pointer, or an object with raw_cuda_graph_exec(), __int__ or .value)")


def name(graph_exec, graph_name):
    """Names the executable graph `graph_exec`: its replays' ranges carry `graph_name` from
    the next launch on, until the graph is destroyed.

    `graph_exec`: an int, a ctypes pointer (c_void_p), or any object exposing one through
    raw_cuda_graph_exec() (torch.cuda.CUDAGraph), __int__ or .value; `graph_name`: str or
    bytes. Returns True when the shim took the name; False when the shim is not preloaded,
    or it refused (a null handle — also a framework graph with no executable graph yet, whose
    raw_cuda_graph_exec() raises — its registry full, or busy: docs/python.md). With or without the shim: TypeError
    for anything that is not a handle or a name, OverflowError for an int outside a
    pointer's range (negative, or 2**64 and above), ValueError for a name with a NUL."""
    handle = _handle(graph_exec)
    encoded = _encoded(graph_name)
    if _name_graph_exec is None:
        return False
    return _name_graph_exec(handle, encoded) == 0


class _EnterScope:
    """graph_name.__enter__, as a descriptor: `with` finds it on the class and calls what
    __get__ returns, the shim's push bound to the scope's name (functools.partial and the ctypes
    call are C). Python runs a signal's handler (Ctrl-C's KeyboardInterrupt, a timeout's alarm)
    between two instructions of Python code: an __enter__ written in Python, interrupted after
    its push and before `with` had registered __exit__, left the name pushed (Python 3.8 to 3.10
    could also interrupt it before the push, inside a `try` that then popped the enclosing
    scope's name). Here the push and the registration of __exit__ are one step of `with`: a
    handler runs before (in __get__: nothing pushed, no __exit__ to call) or after (inside the
    block: __exit__ pops). `with ... as x` gives None."""

    __slots__ = ()

    def __get__(self, scope, owner=None):
        if scope is None:
            return self  # graph_name.__enter__, called with the scope: see __call__
        if _push_graph_name is None:
            return _no_scope
        return functools.partial(_push_graph_name, scope._name)

    def __call__(self, scope):
        # graph_name.__enter__(scope), as contextlib.ExitStack.enter_context calls it: the same
        # push, from Python code (a handler may run between it and the caller's hold on
        # __exit__, as for any context manager written in Python).
        if _push_graph_name is not None:
            _push_graph_name(scope._name)


def _no_scope():
    return None


class graph_name:  # noqa: N801 (used like a function: `with ferrum_replay.graph_name(...)`)
    """A naming scope: every CUDA graph instantiated on this thread inside the block is
    named `graph_name` (the innermost scope's name when they nest). Works as a decorator
    too, of generator and coroutine functions as well: each step of their body runs in the
    scope, nothing while they are suspended. A no-op without the shim.

        with ferrum_replay.graph_name("decode bs=8"), torch.cuda.graph(g):
            ...

    Keep this order: the graph_name scope first, so that it is still open when
    torch.cuda.graph instantiates the graph on leaving its block. Scopes are per thread and
    hold 16 names; deeper ones are counted and carry the outer name. A name with a NUL is
    a ValueError, as for name()."""

    __slots__ = ("_name",)

    def __init__(self, graph_name):
        self._name = _encoded(graph_name)

    # `with` calls a C function, no Python code of ours: see _EnterScope.
    __enter__ = _EnterScope()

    def __exit__(self, *exc_info):
        if _push_graph_name is not None:
            _pop_graph_name()
        return False

    def __call__(self, function):
        # The scope is open while the function's own code runs, and only then. A generator's,
        # a coroutine's or an async generator's body runs after the call has returned, one
        # step at a time: each step runs inside the scope, and between steps (suspended at a
        # yield or an await) the thread's other code is not named after it.
        import inspect  # here: a program that never decorates does not pay for importing it

        if inspect.isasyncgenfunction(function):
            return self._scoped_async_generator_function(function)
        if inspect.iscoroutinefunction(function):
            return self._scoped_coroutine_function(function)
        if inspect.isgeneratorfunction(function):
            @functools.wraps(function)
            def scoped_generator(*args, **kwargs):
                return (yield from self._steps(function(*args, **kwargs)))
            return scoped_generator

        # A decorator under this one that returns a plain def around a coroutine or generator
        # function (torch.inference_mode()'s, a timer's: functools.wraps keeps __wrapped__)
        # hides the kind: the call only makes the object, whose body runs later.
        body = inspect.unwrap(function)
        body_code = getattr(body, "__code__", None) if body is not function else None

        @functools.wraps(function)
        def scoped(*args, **kwargs):
            with self:
                result = function(*args, **kwargs)
            return self._scoped_body(result, body, body_code) if body_code else result
        return scoped

    def _scoped_body(self, result, body, body_code):
        """The object a plain wrapper returned, driven step by step in the scope where it is
        the decorated body's own, not yet started: a coroutine, generator or async generator
        made by `body`. Anything else — an object the program shares or has started (a
        priming decorator's generator), a generator-based coroutine (@types.coroutine) — is
        handed back as it came."""
        # The kind first: any other result's attributes are the program's code to run (an
        # AttrDict's __getattr__ raises KeyError: every call failed, review JJ6).
        if isinstance(result, types.CoroutineType):
            code = result.cr_code
        elif isinstance(result, types.GeneratorType):
            code = result.gi_code
        elif isinstance(result, types.AsyncGeneratorType):
            code = result.ag_code
        else:
            return result
        if code is not body_code or not _unstarted(result):
            return result
        if isinstance(result, types.CoroutineType):
            wrapper = self._scoped_coroutine_function(lambda: result, body)()
            # Never awaited: one warning, for the wrapper (named after the body), not two.
            # Only when the wrapper is collected: at exit, a finalizer closed every decorated
            # coroutine still suspended, from the main thread, while its event loop's thread
            # still ran it (the program's `finally` there, review JJ1); undecorated, such a
            # coroutine is never closed at exit.
            weakref.finalize(wrapper, result.close).atexit = False
            return wrapper
        if isinstance(result, types.GeneratorType):
            if code.co_flags & _CO_ITERABLE_COROUTINE:
                return result
            return self._steps(result)
        if isinstance(result, types.AsyncGeneratorType):
            return self._scoped_async_generator_function(lambda: result, body)()
        return result

    def _scoped_coroutine_function(self, function, named_after=None):
        @functools.wraps(named_after or function)
        async def scoped_coroutine(*args, **kwargs):
            return await _ScopedSteps(self, function(*args, **kwargs))
        return scoped_coroutine

    def _scoped_async_generator_function(self, function, named_after=None):
        @functools.wraps(named_after or function)
        async def scoped_async_generator(*args, **kwargs):
            inner = function(*args, **kwargs)
            owner = _InnerOwner()
            try:
                step = _unhooked_first_step(inner, owner)
                while True:
                    try:
                        item = await _ScopedSteps(self, step)
                    except StopAsyncIteration:
                        return
                    try:
                        sent = yield item
                    except GeneratorExit:
                        await _ScopedSteps(self, inner.aclose())
                        raise
                    except BaseException as error:  # athrow(): into the body, in the scope
                        step = inner.athrow(error)
                    else:
                        step = inner.asend(sent)
            finally:
                # However this generator ends — also by an exception raised in its own frames
                # (a signal's handler between two of its instructions, a RecursionError) — an
                # `inner` it leaves suspended at a `yield` is the loop's, as an async generator
                # of the program's is: registered with it now (closed by its shutdown), and
                # closed by its finalizer once collected (_InnerOwner); it was closed by no one,
                # and its `finally` never ran (review PY-2, TD-5). One left inside a step, at an
                # `await` of the body's, is left alone: its step is under way and only its
                # driver, gone, could end it — closed, it failed the loop's close ("already
                # running", on stderr: review TD-2). Its next step, made and not awaited, is
                # dropped as a program's would be (Python 3.13 warns "coroutine method 'asend'
                # ... was never awaited"): closed, on 3.13 it closed the body there and then,
                # whose `await` in its `finally` raised into the program (TD-2).
                owner.left = True
                if _suspended_at_yield(inner):
                    owner.adopt(inner)
        return scoped_async_generator

    def _steps(self, inner):
        """Drives `inner` (a generator, or an awaitable's iterator) as `yield from` would, each
        of its steps inside this scope."""
        sent, thrown = None, None
        while True:
            with self:
                try:
                    item = inner.send(sent) if thrown is None else inner.throw(thrown)
                except StopIteration as stop:
                    return stop.value
            sent, thrown = None, None
            try:
                sent = yield item
            except GeneratorExit:
                with self:  # its `finally` blocks run in the scope too
                    inner.close()
                raise
            except BaseException as error:
                thrown = error

    def __repr__(self):
        return f"ferrum_replay.graph_name({self._name.decode('utf-8', 'replace')!r})"


_CO_ITERABLE_COROUTINE = 0x100  # inspect.CO_ITERABLE_COROUTINE: a @types.coroutine generator


def _unstarted(steps):
    """Whether a generator, coroutine or async generator has not run a step yet: it has a frame
    (not closed), is not running, and is not suspended at a yield or await. Where the object
    says whether it is suspended (gi_suspended and cr_suspended from Python 3.11, ag_suspended
    from 3.12) that is the answer; before, its frame's last instruction is before the first (-1
    up to 3.10, 0 in 3.11). Never f_lasti alone: Python 3.13 reports 2 for an object not started
    (the frame has run its prologue), and every scope over such a body lost its name (review Z3)."""
    for prefix in ("cr", "gi", "ag"):
        frame = getattr(steps, prefix + "_frame", None)
        if frame is None:
            continue
        if getattr(steps, prefix + "_running", False):
            return False
        suspended = getattr(steps, prefix + "_suspended", None)
        if isinstance(suspended, bool):
            return not suspended
        return frame.f_lasti <= 0
    return False


def _unhooked_first_step(inner, owner):
    """inner.asend(None) with no firstiter hook: the event loop knows the decorator's generator
    only, and closes `inner` through it, in the scope. Seen by the loop too (its firstiter hook,
    run by the first asend), `inner` was closed twice at once when asyncio.run() ended with the
    generator left open: "aclose(): asynchronous generator is already running" on stderr, and
    its `finally` run outside the scope. Where a loop set a finalizer, `inner` gets one that
    hands it to the loop's only once the decorator's generator has ended without closing it
    (_InnerOwner): with none, the garbage collector would close it synchronously (an `await`
    in its `finally` then fails, "async generator ignored GeneratorExit") while the loop's
    finalizer of the decorator's generator is about to close it properly.

    The thread's hooks are set, the step taken and the hooks put back by three C calls in a
    row, with no instruction of Python's between them, where a signal's handler could raise
    (a timeout's exception the program catches): raised between the first and the third, it
    left the loop's hooks replaced, and every async generator the program made afterwards
    went unregistered and unclosed, its `finally` never run (review PY-1)."""
    hooks = sys.get_asyncgen_hooks()
    finalizer = None
    owner.firstiter = hooks.firstiter
    if hooks.finalizer is not None:
        owner.finalizer = hooks.finalizer
        finalizer = functools.partial(_InnerOwner.finalize, owner)
    calls = (functools.partial(sys.set_asyncgen_hooks, firstiter=None, finalizer=finalizer),
             functools.partial(inner.asend, None),
             functools.partial(sys.set_asyncgen_hooks, *hooks))
    try:
        _, step, _ = map(_call, calls)
    except BaseException:  # a call failed (no memory for the step): the hooks go back all the same
        sys.set_asyncgen_hooks(*hooks)
        raise
    return step


_call = functools.partial.__call__  # partial(f, ...) -> f(...), called from C by map()


class _InnerOwner:
    """Who closes a decorated async generator's inner generator. The decorator's generator
    does, through the loop's finalizer of its own, as long as it has not ended (`left`): the
    inner one's finalizer then does nothing, since both are collected together, and closed
    twice at once they failed. Once it has ended without closing `inner` (an exception raised
    in its own frames), the loop does, as for an async generator of the program's: `adopt`
    registers it with the loop (its firstiter hook, which the first step went without), and
    the inner one's finalizer hands it to the loop's — never one left inside a step, which
    the loop's close would find running."""

    __slots__ = ("finalizer", "firstiter", "left")

    def __init__(self):
        self.finalizer = None
        self.firstiter = None
        self.left = False

    def adopt(self, inner):
        # Whatever the hook raises stays here: the program's own exception is on its way out
        # (asyncio's hook warns once the loop's shutdown has begun, and -W error made that
        # warning replace the program's exception, review TE-5).
        if self.firstiter is not None:
            try:
                self.firstiter(inner)
            except Exception:
                pass

    def finalize(self, inner):
        if self.left and self.finalizer is not None and _suspended_at_yield(inner):
            self.finalizer(inner)


def _suspended_at_yield(inner):
    """Whether an async generator is between steps: not finished, not running, not inside a
    step at an `await` (ag_await: what it awaits there)."""
    return inner.ag_frame is not None and not inner.ag_running and inner.ag_await is None


class _ScopedSteps:
    """An awaitable that awaits `awaitable`, each step of it inside `scope` (graph_name's
    decorator on coroutines and async generators)."""

    __slots__ = ("_scope", "_awaitable")

    def __init__(self, scope, awaitable):
        self._scope = scope
        self._awaitable = awaitable

    def __await__(self):
        return (yield from self._scope._steps(self._awaitable.__await__()))

