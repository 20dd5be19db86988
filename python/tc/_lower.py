"""Python ifunc entry points to LLVM bitcode, one module per triple.

numba compiles each entry point (NAME_main, NAME_payload_bound,
NAME_payload_init) in nopython mode for this host. Its unoptimized IR is
kept as numba makes it (a hook on its code library, installed when this
module is imported), so every member is optimized for its own triple
here, never from code already tuned for the host. The numba functions and
what they call (views, helpers, numba's refcount functions) are linked
into one module under C entry points with the ABI's names and
signatures; everything else is internalized, and each triple's copy is
optimized at -O2 with that triple's generic CPU (LLVM 14's, numba's
llvmlite), which inlines and removes what is unused. What no target can
run is refused here, naming the Python function; tc-cc then runs tc's
passes on the bitcode and writes the archive.
"""
import inspect
import os
import re

import llvmlite.binding as llb
import llvmlite.ir as lir
import numba
from numba import types
from numba.core import cgutils
from numba.core import codegen as _numba_codegen
from numba.core import errors as numba_errors

# numba makes machine code for this host as it compiles; inline assembly
# (an @intrinsic's) needs the host's assembly parser, which numba leaves
# out (LLVM then aborts the process). tc's passes refuse it afterwards.
llb.initialize()
llb.initialize_native_target()
llb.initialize_native_asmprinter()
llb.initialize_native_asmparser()

# --- keep numba's unoptimized IR -------------------------------------------


def _install_hook():
    cls = _numba_codegen.CPUCodeLibrary
    original = cls.add_llvm_module
    if getattr(original, "_tc_keeps_ir", False):
        return

    def add_llvm_module(self, ll_module):
        # Before numba's own function passes, which tune for this host.
        self.__dict__.setdefault("_tc_ir", []).append(str(ll_module))
        return original(self, ll_module)

    add_llvm_module._tc_keeps_ir = True
    cls.add_llvm_module = add_llvm_module


_install_hook()

# --- the ABI ---------------------------------------------------------------

#: Entry suffix, parameter names (the C ABI's), numba signature.
ENTRIES = (
    ("_main", ("payload", "payload_size", "target_args"),
     types.void(types.intp, types.intp, types.intp)),
    ("_payload_bound", ("source_args", "source_args_size"),
     types.intp(types.intp, types.intp)),
    ("_payload_init", ("source_args", "source_args_size", "payload",
                       "payload_size_ptr"),
     types.int32(types.intp, types.intp, types.intp, types.intp)),
)

#: Called on the path where NAME_main or NAME_payload_bound raised: such a
#: call that survives optimization means the function can raise.
RAISES = "__tc_python_raises"

_I8P = lir.IntType(8).as_pointer()
_I64 = lir.IntType(64)
_I32 = lir.IntType(32)
_C_TYPES = {
    "_main": lir.FunctionType(lir.VoidType(), [_I8P, _I64, _I8P]),
    "_payload_bound": lir.FunctionType(_I64, [_I8P, _I64]),
    "_payload_init": lir.FunctionType(_I32, [_I8P, _I64, _I8P,
                                              _I64.as_pointer()]),
}

#: Symbols no target has, by prefix, and what they are.
_REFUSED = (
    (("NRT_",), "numba's runtime (memory numba allocates: np.empty, "
     "np.zeros, array copies and the like)"),
    (("numba_",), "numba's helper library (numba's own C code)"),
    (("Py", "_Py"), "Python's C API (the interpreter: print(), Python "
     "objects)"),
)


class Refusal(Exception):
    """Something that cannot ship; `function` is the Python function it
    concerns (or None), `line` where, `text` the message."""

    def __init__(self, text, function=None):
        super().__init__(text)
        self.text = text
        self.function = function


def _qualname(fn):
    return getattr(fn, "__qualname__", getattr(fn, "__name__", "?"))


class Compiled:
    """The entry points compiled by numba, and what maps names back to
    Python functions for diagnostics."""

    def __init__(self, name):
        self.name = name
        self.results = {}    # suffix -> numba compile result
        self.python = {}     # suffix -> the Python function
        self.by_symbol = {}  # LLVM symbol -> Python function


def compile_entries(name, functions):
    """Compiles the entry points with numba. `functions` maps each suffix
    of ENTRIES to its Python function. numba's own refusals propagate as
    numba errors; the caller reports them."""
    out = Compiled(name)
    for suffix, _, sig in ENTRIES:
        fn = functions[suffix]
        try:
            dispatcher = numba.njit(sig, error_model="numpy",
                                    boundscheck=False)(fn)
        except numba_errors.NumbaError as e:
            e.tc_entry = fn  # which one, for the diagnostic
            raise
        cres = dispatcher.overloads[sig.args]
        out.results[suffix] = cres
        out.python[suffix] = fn
        out.by_symbol[name + suffix] = fn
    return out


def _libraries(library, seen):
    if id(library) in seen:
        return
    seen[id(library)] = library
    for dep in getattr(library, "_linking_libraries", ()):
        _libraries(dep, seen)


def _nrt_ir(context):
    # numba's runtime functions are compiled once per process, maybe before
    # the hook was installed; their module is made again the same way.
    from numba.core.runtime import nrtdynmod
    return str(nrtdynmod.create_nrt_module(context))


def _library_ir(library, context):
    ir = library.__dict__.get("_tc_ir")
    if ir is not None:
        return ir
    from numba.core.runtime import nrt
    if library is getattr(nrt.rtsys, "_library", None):
        return [_nrt_ir(context)]
    raise Refusal(f"numba compiled '{library.name}' before tc.cc was loaded, "
                  f"so its unoptimized IR is gone: import tc.cc (or call "
                  f"tc.compile) before numba compiles what the ifunc calls")


_ALIAS_MD = re.compile(r", !(?:noalias|alias\.scope) !\d+")
_ATTR_GROUP = re.compile(r"^(attributes #\d+ = \{)(.*)\}$", re.M)
_HOST_ATTRS = re.compile(r'\s*"(?:target-cpu|target-features|tune-cpu)"='
                         r'"[^"]*"')


def _neutral(ir):
    """numba's IR without what ties it to this host or keeps the optimizer
    from its work: CPU attributes, and `noinline` (numba puts it on its
    refcount functions, which fold away once inlined: a view's array has no
    memory of numba's to count). numba's functions never unwind, so
    `nounwind` takes its place (an attribute group may not be empty)."""
    def group(m):
        body = _HOST_ATTRS.sub("", m.group(2))
        body = re.sub(r"\bnoinline\b", "nounwind", body)
        if not body.strip():
            body = " nounwind "
        return m.group(1) + body + "}"
    return _ATTR_GROUP.sub(group, ir)


def _wrapper_module(compiled, context, source_file):
    """The C entry points: each calls its numba function and handles the
    error status numba returns when the Python code raised."""
    module = context.create_module(compiled.name + "_entries")
    raises = None
    for suffix, _, _ in ENTRIES:
        cres = compiled.results[suffix]
        fndesc = cres.fndesc
        callee_type = context.call_conv.get_function_type(fndesc.restype,
                                                          fndesc.argtypes)
        callee = cgutils.get_or_insert_function(module, callee_type,
                                                fndesc.mangled_name)
        fn = lir.Function(module, _C_TYPES[suffix], compiled.name + suffix)
        builder = lir.IRBuilder(fn.append_basic_block("entry"))
        args = [builder.ptrtoint(a, _I64) if isinstance(a.type, lir.PointerType)
                else a for a in fn.args]
        status, value = context.call_conv.call_function(
            builder, callee, fndesc.restype, fndesc.argtypes, args)
        with builder.if_then(status.is_error, likely=False):
            if suffix == "_payload_init":
                builder.ret(lir.Constant(_I32, -1))
            else:
                if raises is None:
                    raises = lir.Function(module, lir.FunctionType(
                        lir.VoidType(), []), RAISES)
                builder.call(raises, [])
                if suffix == "_main":
                    builder.ret_void()
                else:
                    builder.ret(lir.Constant(_I64, 0))
        if suffix == "_main":
            builder.ret_void()
        else:
            builder.ret(value)
        compiled.by_symbol[fndesc.mangled_name] = compiled.python[suffix]
    # tc's passes name the module's source file in their diagnostics.
    quoted = source_file.replace("\\", "\\5C").replace('"', '\\22')
    return f'source_filename = "{quoted}"\n' + str(module)


_MERGEABLE = (llb.Linkage.external, llb.Linkage.linkonce_any,
              llb.Linkage.linkonce_odr)

def link(compiled, source_file):
    """One LLVM 14 module (text): the entry points, the numba functions
    they reach, everything but the entry points internal."""
    context = next(iter(compiled.results.values())).target_context
    seen = {}
    for cres in compiled.results.values():
        _libraries(cres.library, seen)
    main = llb.parse_assembly(_wrapper_module(compiled, context, source_file))
    keep = {compiled.name + suffix for suffix, _, _ in ENTRIES}
    for library in seen.values():
        for text in _library_ir(library, context):
            mod = llb.parse_assembly(_neutral(text))
            # Every definition comes in whatever the order (a linkonce one
            # would be left out when linked before its first user), and
            # one of several copies is kept; unused ones go below.
            for g in list(mod.functions) + list(mod.global_variables):
                if not g.is_declaration and g.linkage in _MERGEABLE:
                    g.linkage = "weak_odr"
            main.link_in(mod)
    for f in main.functions:
        if not f.is_declaration and f.name not in keep:
            f.linkage = "internal"
    for g in main.global_variables:
        if not g.is_declaration:
            g.linkage = "internal"
    return str(main)


_TARGETS_READY = False


def _target_machine(triple, opt):
    global _TARGETS_READY
    if not _TARGETS_READY:
        llb.initialize()
        llb.initialize_all_targets()
        llb.initialize_all_asmprinters()
        _TARGETS_READY = True
    target = llb.Target.from_triple(triple)
    return target.create_target_machine(cpu="generic", features="", opt=opt,
                                        reloc="pic", codemodel="default")


def check_triple(triple):
    """None if Python ifuncs can have a member for `triple`, else why not."""
    arch = triple.split("-", 1)[0]
    if arch.startswith(("nvptx", "amdgcn", "spir")):
        return "no GPU members from Python (tc-cc builds them from C)"
    try:
        tm = _target_machine(triple, 2)
    except RuntimeError as e:
        return f"LLVM 14 (numba's) knows no such target: {e}"
    layout = str(tm.target_data)
    pointer = re.search(r"(?:^|-)p(?:0)?:(\d+)", layout)
    if layout.startswith("E") or (pointer and pointer.group(1) != "64"):
        return ("Python ifuncs need a 64-bit little-endian target (numba "
                "compiles them with this host's 64-bit integers and byte "
                "order)")
    return None


def _callers(module, symbol):
    """Names of the functions of `module` that refer to `symbol`."""
    found = []
    needle = re.compile(r"@\"?" + re.escape(symbol) + r"\"?\b")
    for f in module.functions:
        if f.is_declaration:
            continue
        if needle.search(str(f)):
            found.append(f.name)
    return found


def _isa_intrinsic_family(arch):
    if arch in ("x86_64", "i386", "i686"):
        return "x86"
    if arch in ("aarch64", "arm64"):
        return "aarch64"
    return arch


def member_bitcode(linked, triple, opt, compiled):
    """The module for `triple`: optimized, checked, as bitcode. Raises
    Refusal for what no target runs."""
    tm = _target_machine(triple, opt)
    module = llb.parse_assembly(linked)
    module.triple = triple
    module.data_layout = str(tm.target_data)
    builder = llb.PassManagerBuilder()
    builder.opt_level = opt
    builder.size_level = 0
    builder.loop_vectorize = opt >= 2
    builder.slp_vectorize = opt >= 2
    builder.inlining_threshold = 275 if opt >= 3 else 225
    pm = llb.ModulePassManager()
    tm.add_analysis_passes(pm)
    builder.populate(pm)
    pm.add_global_dce_pass()
    pm.run(module)
    _refuse(module, triple, compiled)
    # numba's alias scopes helped the optimizer here; a target only
    # generates code, and their names (numba's mangled ones) would ship.
    module = llb.parse_assembly(_ALIAS_MD.sub("", str(module)))
    module.verify()
    return module.as_bitcode()


def _refuse(module, triple, compiled):
    problems = []
    refused = {}  # (Python function, what) -> symbols
    arch = triple.split("-", 1)[0]
    own = _isa_intrinsic_family(arch)

    def who(symbol_users):
        for user in symbol_users:
            fn = compiled.by_symbol.get(user)
            if fn is not None:
                return fn
        return None

    for f in module.functions:
        if not f.is_declaration:
            continue
        name = f.name
        users = _callers(module, name)
        if not users:
            continue
        if name == RAISES:
            for user in users:
                fn = compiled.by_symbol.get(user)
                entry = user if user.startswith(compiled.name) else \
                    _qualname(fn) if fn else user
                kind = "returns nothing" if entry.endswith("_main") else \
                    "returns a size"
                problems.append(Refusal(
                    f"'{entry}' can raise an exception, which has nowhere to "
                    f"go on a target ({entry} {kind}): avoid raise, assert "
                    f"and what raises in numba (an exception in "
                    f"{compiled.name}_payload_init fails the message "
                    f"instead)", fn))
            continue
        m = re.match(r"llvm\.([a-z0-9_]+)\.", name)
        if m and m.group(1) in ("x86", "aarch64", "arm", "ppc", "riscv",
                                "s390", "wasm") and m.group(1) != own:
            problems.append(Refusal(
                f"calls the {m.group(1)} intrinsic '{name}', which the "
                f"{triple} member cannot run", who(users)))
            continue
        for prefixes, what in _REFUSED:
            if name.startswith(prefixes):
                refused.setdefault((who(users), what), []).append(name)
                break
    for (fn, what), names in refused.items():
        where = f"'{_qualname(fn)}' " if fn else ""
        listed = ", ".join(f"'{n}'" for n in names)
        problems.append(Refusal(
            f"{where}calls {listed}: {what}, which a target does not have",
            fn))
    if problems:
        raise RefusalList(problems)


class RefusalList(Exception):
    def __init__(self, refusals):
        super().__init__("; ".join(r.text for r in refusals))
        self.refusals = refusals


def numba_error_location(error, source_file):
    """(line, first message line) of a numba error, the line in
    `source_file` when numba names one."""
    text = str(error)
    line = None
    own = os.path.realpath(source_file)
    for m in re.finditer(r'File "([^"]+)", line (\d+)', text):
        # numba names the file relative to the working directory.
        if os.path.realpath(m.group(1)) == own:
            line = int(m.group(2))
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", raw).strip()
             for raw in text.splitlines()]
    lines = [s for s in lines if s and not s.startswith(
        ("Failed in", "- Resolution failure", "During:", "File \""))]
    if not lines:
        return line, type(error).__name__
    reason = lines[0]
    if reason.endswith(":") and len(lines) > 1:
        # "No implementation of function ... found for signature:"
        reason += " " + lines[1].lstrip("> ")
    return line, reason


def python_line(fn):
    code = getattr(fn, "__code__", None)
    return code.co_firstlineno if code else None


def signature_problem(fn, params):
    """Why `fn` cannot be the entry point taking `params`, or None."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return "is not a Python function"
    ps = list(sig.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY)
           for p in ps) or len(ps) != len(params):
        return (f"takes ({', '.join(p.name for p in ps)}), expected "
                f"({', '.join(params)})")
    return None


NUMBA_ERRORS = (numba_errors.NumbaError,)
