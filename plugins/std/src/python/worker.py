# The warm interpreter behind runner's `python` steps. The runner starts it with `python -c`
# and speaks to it over stdin (requests) and the stdout it had at start (replies); what the
# called code prints goes to the task's log. It serves one task at a time until stdin ends.
#
# A message: 8 bytes (little-endian length of a JSON header), the header, then the payloads the
# header's "payloads" lists (their lengths), back to back. A large input value is not in the
# payloads but in the runner's shared memory: its description names the path to map ("shm")
# and its length, and the request's "shared" their total. The reply's "mapped" then says how
# much file-backed and shared memory this process had resident at the end of the call beyond
# what it had before (the inputs it mapped among them), which the runner does not count as the
# task's.
#
# Started with RUNNER_FORK_FD (the engine's fork protocol, documented in the plugin API's
# `service` module): after its warm-up its stdin ends, and it forks the run's other
# interpreters on request, each taking the pipes sent with the request, then retires into a
# small reaper that reports how its children end.
import copyreg
import ctypes
import gc
import io
import importlib
import json
import mmap
import os
import pathlib
import pickle
import struct
import sys
import traceback

OWN_FILE = "<string>"  # the file name of this code's frames (it runs as `python -c`)

REQUESTS = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
REPLIES = os.fdopen(os.dup(1), "wb", buffering=0)
# The called code's prints must never reach the reply pipe.
os.dup2(2, 1)
# Where output goes between tasks: the engine's idle log for the step (RUNNER_IDLE_LOG), else
# the stderr it was started with.
_IDLE_PATH = os.environ.pop("RUNNER_IDLE_LOG", None)
IDLE_LOG = os.open(_IDLE_PATH, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if _IDLE_PATH else os.dup(2)
try:
    import numpy
except ImportError:  # arrays cannot cross then; everything else still can
    numpy = None
try:
    _LIBC = ctypes.CDLL("libc.so.6")
except OSError:
    _LIBC = None

DTYPES = {
    "f32": "<f4", "f64": "<f8", "i8": "i1", "i16": "<i2", "i32": "<i4", "i64": "<i8",
    "u8": "u1", "u16": "<u2", "u32": "<u4", "u64": "<u8", "bool": "?",
}
NAMES = {numpy.dtype(v).str if numpy else v: k for k, v in DTYPES.items()} if numpy else {}
ALIGN = 64


def read_exact(n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = REQUESTS.readinto(view[got:])
        if not k:
            raise EOFError
        got += k
    return buf


def read_message():
    head = bytearray()
    while len(head) < 8:
        chunk = REQUESTS.read(8 - len(head))
        if not chunk:
            return None, []
        head += chunk
    (length,) = struct.unpack("<Q", head)
    header = json.loads(read_exact(length))
    payloads = [read_exact(n) for n in header.get("payloads", [])]
    return header, payloads


def send(header, payloads=()):
    views = [memoryview(p).cast("B") for p in payloads]
    header["payloads"] = [v.nbytes for v in views]
    text = json.dumps(header).encode()
    REPLIES.write(struct.pack("<Q", len(text)) + text)
    for view in views:
        done = 0
        while done < view.nbytes:
            done += REPLIES.write(view[done:])


CALLABLES = {}


def resolve(call):
    module_name, _, attr = call.partition(":")
    target = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    return target


def callable_for(call, init):
    key = (call, json.dumps(init, sort_keys=True) if init is not None else None)
    found = CALLABLES.get(key)
    if found is None:
        # Imports and a class's `init` build objects that live as long as the interpreter:
        # the cyclic collector's passes over them while they are built are pure cost (a tenth
        # of IMPROVER's import time).
        collecting = gc.isenabled()
        gc.disable()
        try:
            found = resolve(call)
            if init is not None:
                found = found(**init)
        finally:
            if collecting:
                gc.enable()
        CALLABLES[key] = found
    return found


def decode(desc, payloads):
    kind = desc["t"]
    if kind == "json":
        return desc["v"]
    if kind == "none":
        return None
    if kind == "path":
        return desc["v"]
    if kind == "bytes":
        return bytes(payloads[desc["p"]])
    if kind == "array":
        if numpy is None:
            raise RuntimeError("an array input needs numpy in this interpreter")
        data = mapped(desc) if "shm" in desc else payloads[desc["p"]]
        return numpy.frombuffer(data, dtype=DTYPES[desc["dtype"]]).reshape(desc["shape"])
    if kind == "object":
        view = mapped(desc) if "shm" in desc else memoryview(payloads[desc["p"]])
        frames = [view[o:o + n] for o, n in desc["frames"]]
        return pickle.loads(frames[0], buffers=frames[1:])
    if kind == "list":
        return [decode(item, payloads) for item in desc["items"]]
    raise ValueError(f"unknown value kind {kind!r}")


def mapped(desc):
    """The runner's shared memory holding a value, mapped copy-on-write: the pages are the
    runner's until this process writes one, which then becomes its own."""
    fd = os.open(desc["shm"], os.O_RDONLY)
    try:
        area = mmap.mmap(fd, desc["len"], flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    return memoryview(area)


def mapped_resident():
    """The file-backed and the shared memory this process has resident (RssFile, RssShmem), in
    bytes: pages of files and of the runner's shared memory, not the call's own allocations."""
    found = {}
    with open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith((b"RssFile:", b"RssShmem:")):
                key, value = line.split(b":", 1)
                found[key] = int(value.split()[0]) * 1024
    return found.get(b"RssFile", 0), found.get(b"RssShmem", 0)


# The last call's growth of file-backed and of shared memory, from before its inputs were mapped
# to its end (when they are still mapped): what the runner takes out of its high-water mark.
MAPPED = {"file": 0, "shared": 0}


def is_json(value, depth=0):
    if depth > 64:
        return False
    if value is None or type(value) in (bool, int, float, str):
        return not (type(value) is float and value != value)
    if type(value) is list:
        return all(is_json(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(type(k) is str and is_json(v, depth + 1) for k, v in value.items())
    return False


def encode(value):
    """The reply's value and its payloads."""
    if value is None:
        return {"t": "none"}, []
    if isinstance(value, pathlib.PurePath):
        return {"t": "path", "v": str(value)}, []
    if numpy is not None and type(value) is numpy.ndarray and value.dtype.str in NAMES:
        # (not `ascontiguousarray`, which makes a 0-d array 1-d)
        array = value if value.flags.c_contiguous else numpy.ascontiguousarray(value)
        return {"t": "array", "dtype": NAMES[array.dtype.str], "shape": list(array.shape)}, [array]
    if is_json(value):
        return {"t": "json", "v": value}, []
    buffers = []

    def out_of_band(buffer):
        try:
            buffers.append(buffer.raw())
            return False
        except BufferError:  # not contiguous: it stays in the stream
            return True

    stream = io.BytesIO()
    pickler = pickle.Pickler(stream, protocol=5, buffer_callback=out_of_band)
    pickler.dispatch_table = reducers()
    pickler.dump(value)
    return {"t": "object", "type": type_name(value)}, [stream.getbuffer()] + buffers


def reducers():
    """How the engine's pickles take objects apart: as Python does, but a masked array's data
    and mask as arrays of their own, so they cross out of band. (NumPy pickles them as bytes
    inside the stream: copied into it and out of it again, and a consumer then holds both the
    bytes received and the arrays made from them. IMPROVER's neighbourhood results are masked.)"""
    masked = sys.modules.get("numpy.ma")  # imported by whoever made a masked array
    if masked is None:
        return copyreg.dispatch_table
    return {**copyreg.dispatch_table, masked.MaskedArray: reduce_masked}


def reduce_masked(array):
    return masked_from, (array._data, array._mask, array._fill_value, array._hardmask)


def masked_from(data, mask, fill_value, hard_mask):
    """The masked array `reduce_masked` took apart, over the arrays received (no copy); a
    mask that was `nomask` stays so."""
    import numpy.ma  # (NumPy imports it on first use: a consumer may not have yet)

    return numpy.ma.MaskedArray(
        data, mask=mask, fill_value=fill_value, hard_mask=hard_mask, copy=False, keep_mask=True, shrink=False
    )


def type_name(value):
    """What a pickled object is, for the messages of Rust plugins that cannot read it: `dict`,
    `numpy.ma.MaskedArray`, `numpy.ndarray of dtype '<U1'`."""
    kind = type(value)
    module = getattr(kind, "__module__", None)
    name = getattr(kind, "__qualname__", None) or getattr(kind, "__name__", "object")
    if module and module != "builtins":
        name = f"{module}.{name}"
    if numpy is not None and isinstance(value, numpy.ndarray):
        name += f" of dtype {value.dtype.str!r}"
    return str(name)


def release_memory():
    """Freed memory goes back to the kernel, so the next task's peak is its own: glibc keeps
    what a task freed for reuse (within a task that saves page faults), and would otherwise
    hand it to the next task without its resident size growing. (A full
    `gc.collect()` here would cost 0.15 s a task with iris loaded: the young generation is
    enough to free what a task left in cycles.)"""
    gc.collect(0)
    if _LIBC is not None:
        try:
            _LIBC.malloc_trim(0)
        except AttributeError:
            pass


def to_log(path):
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def back_to_idle():
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(IDLE_LOG, 1)
    os.dup2(IDLE_LOG, 2)


MESSAGE_LIMIT = 2000  # characters of an exception's message in the failure line


def message_of(error):
    """The exception's text, cut to MESSAGE_LIMIT; an exception whose __str__ itself fails
    still fails only its task."""
    try:
        text = str(error)
    except BaseException as broken:  # a broken __str__ must not take the interpreter down
        text = f"<str() of the exception failed: {type(broken).__qualname__}>"
    if len(text) > MESSAGE_LIMIT:
        text = text[:MESSAGE_LIMIT] + f"... ({len(text) - MESSAGE_LIMIT} more characters)"
    return text


def failure(error):
    tb = error.__traceback__
    # This file's own frames tell the user nothing: start at the called code. When no frame is
    # the called code's, the call never started: its arguments did not bind (or a builtin
    # refused them), and there is no traceback worth showing.
    while tb is not None and tb.tb_frame.f_code.co_filename == OWN_FILE:
        tb = tb.tb_next
    message = message_of(error)
    if tb is None and isinstance(error, TypeError):
        message += " (raised before the callable's code ran: do the step's `init:`, `kwargs:` and `args:` fit it?)"
    try:
        if isinstance(error, ImportError):
            # The import machinery's own frames say nothing of the user's code.
            machinery = lambda name: name.startswith("<frozen importlib") or name == importlib.__file__  # noqa: E731
            kept = [f for f in traceback.extract_tb(tb) if not machinery(f.filename)]
            lines = traceback.StackSummary.from_list(kept).format()
            frames = "Traceback (most recent call last):\n" + "".join(lines) + f"{type(error).__qualname__}: {message}\n"
        elif tb is None:
            frames = ""
        else:
            frames = "".join(traceback.format_exception(type(error), error, tb))
    except BaseException:  # as for the message: the traceback of what failed to print itself
        frames = "".join(traceback.format_tb(tb)) + f"{type(error).__qualname__}: {message}\n"
    if isinstance(error, ModuleNotFoundError):
        message += (
            f" in the interpreter {sys.executable} (another is chosen with the step's `python:`, "
            "the recipe's `python: {interpreter: ...}` or --python; `pythonpath:` adds folders to search)"
        )
    return {
        "ok": False,
        "type": type(error).__qualname__,
        "message": message,
        "traceback": frames[-8000:],
    }


def serve(header, payloads):
    op = header["op"]
    if op == "prepare":  # imports (and instantiates) before the task is measured
        callable_for(header["call"], header.get("init"))
        return {"ok": True}, []
    if op != "call":
        raise ValueError(f"unknown request {op!r}")
    target = callable_for(header["call"], header.get("init"))
    # Only a call given mapped inputs needs telling apart (two reads of /proc, 0.1 ms a task).
    shared = header.get("shared", 0)
    file_before, shared_before = mapped_resident() if shared else (0, 0)
    try:
        args = []
        for desc in header["args"]:
            if desc["t"] == "star":
                args.extend(decode(item, payloads) for item in desc["items"])
            else:
                args.append(decode(desc, payloads))
        kwargs = {name: decode(desc, payloads) for name, desc in header["kwargs"].items()}
        del payloads
        result = target(*args, **kwargs)
    finally:
        # The inputs are still mapped here: what of them the call touched is resident. Shared
        # memory beyond the inputs' size is the call's own (its cgroup counts it too).
        if shared:
            file_after, shared_after = mapped_resident()
            MAPPED["file"] = max(0, file_after - file_before)
            MAPPED["shared"] = max(0, min(shared, shared_after - shared_before))
    del args, kwargs
    try:
        value, out = encode(result)
    except Exception as error:
        # The call succeeded; what it returned cannot be kept by the engine.
        raise ReturnNotKept(
            f"the call returned {type(result).__module__}.{type(result).__qualname__}, which cannot leave the "
            f"interpreter ({type(error).__qualname__}: {message_of(error)}); return what pickles (arrays, "
            "numbers, strings, lists, dicts, most objects), or write a file and return its path"
        ) from None
    return {"ok": True, "value": value}, out


class ReturnNotKept(Exception):
    """A call's return value that cannot be pickled for the engine."""


REAPER = """
import os, sys
fd = int(sys.argv[1])
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        break
    os.write(fd, b"%d %d\\n" % (pid, status))
"""


def fork_server(fd):
    """Forks interpreters that share this one's imports; returns in each child, which then
    serves tasks. Never returns in this process: it becomes the reaper."""
    import socket
    import warnings

    control = socket.socket(fileno=fd)
    me = os.getpid()
    # What the warm-up built is never collected in the forked interpreters: their collections
    # then skip it, instead of writing to (and so copying) every page of it.
    gc.freeze()
    reaper = os.environ.pop("RUNNER_REAPER", None)  # the runner's own, a few MiB
    while True:
        message, fds, _, _ = socket.recv_fds(control, 64, 2)
        if message == b"fork\n" and len(fds) == 2:
            with warnings.catch_warnings():
                # A library's idle thread pool (OpenBLAS's) does not survive the fork; it
                # registers its own fork handlers.
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:
                control.close()
                become_child(me, *fds)
                return
            for each in fds:
                os.close(each)
            control.sendall(b"%d\n" % pid)
        elif message == b"retire\n":
            for each in fds:
                os.close(each)
            os.set_inheritable(fd, True)
            if reaper:
                try:
                    os.execv(reaper, [reaper, "__reap-children", str(fd)])
                except OSError:
                    pass
            os.execv(sys.executable, [sys.executable, "-S", "-I", "-c", REAPER, str(fd)])
        else:  # the runner is gone, or out of step
            os._exit(0)


def become_child(parent, requests, replies):
    os.setpgid(0, 0)
    if _LIBC is not None:
        _LIBC.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: it dies with the process it was forked from
    if os.getppid() != parent:
        os._exit(1)
    os.dup2(requests, 0)
    os.dup2(replies, REPLIES.fileno(), inheritable=False)
    os.close(requests)
    os.close(replies)


def main():
    while True:
        header, payloads = read_message()
        if header is None:
            if os.environ.get("RUNNER_FORK_FD") is None:
                return
            fork_server(int(os.environ.pop("RUNNER_FORK_FD")))
            continue
        to_log(header["log"])
        try:
            reply, out = serve(header, payloads)
        except BaseException as error:  # the task fails; the interpreter serves the next one
            reply, out = failure(error), []
            if isinstance(error, KeyboardInterrupt):
                raise
        del payloads
        reply["mapped"] = dict(MAPPED)
        MAPPED.update(file=0, shared=0)
        back_to_idle()
        # Before the reply (30-450 us): the runner takes what the interpreter holds as the
        # reply comes as its baseline between tasks, which must not count the task's garbage.
        release_memory()
        send(reply, out)
        del reply, out


main()
