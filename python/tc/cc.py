"""Ifuncs written in Python: python3 -m tc.cc SRC.py -o OUT.tcfb.

SRC.py follows the C ABI (docs/ifunc-abi.md) with NAME from its file name:

    def NAME_main(payload, payload_size, target_args): ...
    def NAME_payload_bound(source_args, source_args_size): return N
    def NAME_payload_init(source_args, source_args_size, payload,
                          payload_size_ptr): ...; return 0

Pointers are integers; tc.u8(address, n), tc.u64, tc.f64, ... view the
memory there as numba arrays. The functions, and the plain functions of
SRC.py they call, are compiled by numba in nopython mode, lowered per
target triple (tc._lower), and tc-cc runs tc's passes on the bitcode and
writes the archive: the same format and default members as tc-cc's (an
x86_64 and an aarch64 target member, a source member for this host).
Errors are one line each, `SRC.py[:LINE]: error: ifunc 'NAME': ...`
naming the Python function, or `tc.cc: error: ...`; exit status 1 and no
output file. docs/python.md is the reference.
"""
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import traceback
import types as pytypes

from . import _config
from .errors import CompileError

USAGE = """\
USAGE: python3 -m tc.cc SRC.py -o OUT.tcfb [options]

  -o OUT              the archive to write
  --target=T          a member for triple T (repeatable; default
                      x86_64-unknown-linux-gnu and aarch64-unknown-linux-gnu);
                      the source member is for this host either way
  --name=NAME         the ifunc's name (default: SRC's file name)
  -O0 -O1 -O2 -O3     optimization (default -O2)
  -lNAME, --deps F    shared libraries targets load (as tc-cc)
  --compress=C, --sign KEY, --all-sources, --emit-objects   as tc-cc
  -v                  print the tc-cc command
  --help, --version
"""

DEFAULT_TARGETS = ("x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def tc_cc_path():
    """tc-cc: $TC_CC, else the one of this build or installation."""
    return os.environ.get("TC_CC") or _config.tc_cc()


class _Diagnostics:
    def __init__(self, path, name):
        self.path = path
        self.name = name
        self.lines = []

    def error(self, text, line=None):
        where = self.path + (f":{line}" if line else "")
        self.lines.append(f"{where}: error: ifunc '{self.name}': {text}")

    def check(self):
        if self.lines:
            raise CompileError(self.lines)


def _load(source):
    """The module of `source` (a path or a module) and its file's path."""
    if isinstance(source, pytypes.ModuleType):
        return source, getattr(source, "__file__", None) or source.__name__
    path = os.fspath(source)
    if not os.path.isfile(path):
        raise CompileError([f"tc.cc: error: '{path}': no such file"])
    stem = os.path.splitext(os.path.basename(path))[0]
    modname = "_tc_ifunc_" + re.sub(r"\W", "_", stem)
    spec = importlib.util.spec_from_file_location(modname, path)
    module = importlib.util.module_from_spec(spec)
    keep = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # no __pycache__ beside SRC.py
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's code: any exception
        line = None
        for frame in traceback.extract_tb(e.__traceback__):
            if os.path.abspath(frame.filename) == os.path.abspath(path):
                line = frame.lineno
        where = path + (f":{line}" if line else "")
        raise CompileError([f"{where}: error: importing it raised "
                            f"{type(e).__name__}: {e}"]) from None
    finally:
        sys.dont_write_bytecode = keep
    return module, path


def _plain_functions(namespace, modname):
    """The plain Python functions defined in the ifunc's module."""
    return {k: v for k, v in namespace.items()
            if isinstance(v, pytypes.FunctionType)
            and v.__module__ == modname}


def _copy(fn, namespace):
    g = pytypes.FunctionType(fn.__code__, namespace, fn.__name__,
                             fn.__defaults__, fn.__closure__)
    g.__qualname__ = fn.__qualname__
    g.__doc__ = fn.__doc__
    return g


_copies = 0


def _entry_functions(module, path, name, diags):
    """Copies of the entry points, whose globals see every plain function
    of the module as a numba function. They live in a module of their own
    (numba resolves what it inlines through sys.modules); the ifunc's
    module is left as it was."""
    import numba

    from . import _lower
    global _copies
    _copies += 1
    modname = getattr(module, "__name__", None)
    copy = pytypes.ModuleType(f"_tc_ifunc_{name}_{_copies}")
    copy.__dict__.update({k: v for k, v in vars(module).items()
                          if k not in ("__name__", "__spec__", "__loader__")})
    copy.__file__ = path
    sys.modules[copy.__name__] = copy
    namespace = vars(copy)
    for k, fn in _plain_functions(vars(module), modname).items():
        if not k.startswith(tuple(name + s for s, _, _ in _lower.ENTRIES)):
            namespace[k] = numba.njit(error_model="numpy", boundscheck=False)(
                _copy(fn, namespace))
    entries = {}
    for suffix, params, _ in _lower.ENTRIES:
        sym = name + suffix
        fn = namespace.get(sym)
        if isinstance(fn, numba.core.registry.CPUDispatcher):
            fn = fn.py_func
        if fn is None:
            diags.error(f"'{sym}' is missing, expected def {sym}"
                        f"({', '.join(params)})")
            continue
        if not isinstance(fn, pytypes.FunctionType):
            diags.error(f"'{sym}' is not a function")
            continue
        why = _lower.signature_problem(fn, params)
        if why:
            diags.error(f"'{sym}' {why}", _lower.python_line(fn))
            continue
        entries[suffix] = _copy(fn, namespace)
    diags.check()
    return entries


def _host_triple():
    import llvmlite.binding as llb
    return llb.get_process_triple()


def compile(source, output=None, *, name=None, targets=None, opt=2,
            libs=(), deps=None, compress=None, sign=None, all_sources=False,
            emit_objects=False, verbose=False):
    """Builds the archive of a Python ifunc and returns its bytes (and
    writes it to `output` if given). `source`: a path to SRC.py or a
    module; the other arguments are python3 -m tc.cc's options. Raises
    tc.CompileError with the diagnostics."""
    from . import _lower
    module, path = _load(source)
    if name is None:
        name = os.path.splitext(os.path.basename(path))[0]
    if not _IDENT.match(name):
        raise CompileError([f"tc.cc: error: the ifunc name '{name}' (from "
                            f"'{os.path.basename(path)}') is not a C "
                            f"identifier: rename the file or give --name"])
    if opt not in (0, 1, 2, 3):
        raise CompileError([f"tc.cc: error: bad optimization level {opt}"])
    triples = []
    for t in targets or DEFAULT_TARGETS:
        if t not in triples:
            triples.append(t)
    problems = [f"tc.cc: error: --target={t}: {why}" for t in triples
                for why in [_lower.check_triple(t)] if why]
    if problems:
        raise CompileError(problems)
    host = _host_triple()
    host_arch = host.split("-", 1)[0]
    if not any(t.split("-", 1)[0] == host_arch for t in triples):
        if _lower.check_triple(host):
            raise CompileError([f"tc.cc: error: this host ({host}) cannot "
                                f"have a source member"])
        extra = [host]  # the source member's, no target member
    else:
        extra = []

    diags = _Diagnostics(path, name)
    entries = _entry_functions(module, path, name, diags)
    try:
        compiled = _lower.compile_entries(name, entries)
    except _lower.NUMBA_ERRORS as e:
        fn = _failed_entry(e, entries)
        line, reason = _lower.numba_error_location(e, path)
        label = f"'{fn.__name__}': " if fn else ""
        diags.error(f"{label}numba cannot compile it: {reason}",
                    line or (_lower.python_line(fn) if fn else None))
        diags.check()
    try:
        linked = _lower.link(compiled, path)
        with tempfile.TemporaryDirectory(prefix="tc-cc-py.") as tmp:
            inputs = []
            for t in triples + extra:
                bc = _lower.member_bitcode(linked, t, opt, compiled)
                f = os.path.join(tmp, f"{name}.{t}.bc")
                with open(f, "wb") as out:
                    out.write(bc)
                inputs.append(f)
            out_path = output if output is not None else os.path.join(
                tmp, name + ".tcfb")
            cmd = [tc_cc_path(), f"--name={name}", f"-O{opt}", "-o",
                   os.fspath(out_path)]
            cmd += [f"--target={t}" for t in triples]
            cmd += [f"-l{lib}" for lib in libs]
            if deps:
                cmd += ["--deps", os.fspath(deps)]
            if compress:
                cmd.append(f"--compress={compress}")
            if sign:
                cmd += ["--sign", os.fspath(sign)]
            if all_sources:
                cmd.append("--all-sources")
            if emit_objects:
                cmd.append("--emit-objects")
            cmd += inputs
            if verbose:
                print(" ".join(cmd), file=sys.stderr)
            try:
                run = subprocess.run(cmd, capture_output=True, text=True)
            except OSError as e:
                raise CompileError([f"tc.cc: error: cannot run tc-cc "
                                    f"({cmd[0]}): {e.strerror}"]) from None
            messages = _rewrite(run.stderr, inputs, path, compiled)
            if run.returncode != 0:
                raise CompileError(messages or [
                    f"tc.cc: error: tc-cc failed (exit {run.returncode})"])
            for m in messages:  # warnings
                print(m, file=sys.stderr)
            with open(out_path, "rb") as f:
                return f.read()
    except _lower.RefusalList as rl:
        for r in rl.refusals:
            diags.error(r.text, _lower.python_line(r.function)
                        if r.function else None)
        diags.check()
        raise
    except _lower.Refusal as r:
        diags.error(r.text)
        diags.check()
        raise


def _failed_entry(error, entries):
    """The entry point numba failed on: the one its message names, else
    the one being compiled (compile_entries goes in ENTRIES' order)."""
    text = str(error)
    for fn in entries.values():
        if re.search(r"\b" + re.escape(fn.__name__) + r"\b", text):
            return fn
    return getattr(error, "tc_entry", None)


def _rewrite(stderr, inputs, path, compiled):
    """tc-cc's lines with the Python file, lines and function names."""
    out = []
    for line in stderr.splitlines():
        if not line.strip():
            continue
        for f in inputs:
            line = line.replace(f, path)
        line = re.sub(r"^tc-cc: ", "tc.cc: ", line)
        fn = None
        for sym in re.findall(r"'([^']+)'", line):
            py = compiled.by_symbol.get(sym)
            if py is None:
                continue
            fn = fn or py
            if sym != py.__name__:
                line = line.replace(f"'{sym}'", f"'{py.__qualname__}'")
        if fn is not None and line.startswith(path + ": "):
            from . import _lower
            ln = _lower.python_line(fn)
            if ln:
                line = f"{path}:{ln}" + line[len(path):]
        out.append(line)
    return out


def _parse(argv):
    o = {"targets": [], "libs": [], "opt": 2}
    src = None
    i = 0

    def value(flag):
        nonlocal i
        a = argv[i]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
        if i + 1 >= len(argv):
            raise CompileError([f"tc.cc: error: option '{flag}' needs a "
                                f"value"])
        i += 1
        return argv[i]

    while i < len(argv):
        a = argv[i]
        if a == "-o":
            o["output"] = value("-o")
        elif a.startswith("-o") and not a.startswith("--"):
            o["output"] = a[2:]
        elif a == "--target" or a.startswith("--target="):
            o["targets"].append(value("--target"))
        elif a == "--name" or a.startswith("--name="):
            o["name"] = value("--name")
        elif a == "--deps" or a.startswith("--deps="):
            o["deps"] = value("--deps")
        elif a == "--sign" or a.startswith("--sign="):
            o["sign"] = value("--sign")
        elif a.startswith("--compress="):
            o["compress"] = a.split("=", 1)[1]
        elif re.fullmatch(r"-O[0-3]", a):
            o["opt"] = int(a[2])
        elif a.startswith("-l") and len(a) > 2:
            o["libs"].append(a[2:])
        elif a == "--all-sources":
            o["all_sources"] = True
        elif a == "--emit-objects":
            o["emit_objects"] = True
        elif a == "-v":
            o["verbose"] = True
        elif a.startswith("-") and a != "-":
            raise CompileError([f"tc.cc: error: unknown argument '{a}' "
                                f"(try --help)"])
        elif src is None:
            src = a
        else:
            raise CompileError([f"tc.cc: error: one SRC.py at a time "
                                f"('{src}', '{a}')"])
        i += 1
    if src is None:
        raise CompileError(["tc.cc: error: no input file (try --help)"])
    if "output" not in o:
        raise CompileError(["tc.cc: error: missing -o OUT.tcfb"])
    if not o["targets"]:
        del o["targets"]
    return src, o


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-help" in argv:
        sys.stdout.write(USAGE)
        return 0
    if "--version" in argv:
        import numba
        print(f"tc.cc (tc) {_config.VERSION} (numba {numba.__version__}, "
              f"tc-cc {tc_cc_path()})")
        return 0
    try:
        src, opts = _parse(argv)
        output = opts.pop("output")
        try:
            compile(src, output, **opts)
        except BaseException:
            # Like tc-cc: a failed run leaves no older output behind.
            if os.path.exists(output):
                os.remove(output)
            raise
    except CompileError as e:
        for line in e.diagnostics:
            print(line, file=sys.stderr)
        return 1
    except Exception as e:  # a bug here or in numba: still one line
        if os.environ.get("TC_CC_TRACEBACK"):
            raise
        print(f"tc.cc: error: {type(e).__name__}: {e} (TC_CC_TRACEBACK=1 "
              f"shows where)".replace("\n", " "), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
