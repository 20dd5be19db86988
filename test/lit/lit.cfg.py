# -*- Python -*-
# lit configuration for tc. Paths come from lit.site.cfg.py; this file only
# says which files are tests and which tools they may call.
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "tc"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".test", ".ll", ".c"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tc_obj_root, "test", "lit")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

# Our tools first, then LLVM 22's (never /usr/bin/opt, which is LLVM 14).
tool_dirs = [config.tc_tools_dir, config.llvm_tools_dir]
tools = ["tc-ar", "tc-cc", "tc-serve", "tc-send", "tc-bench", "tc-gbpc", "tc-mpi-chase", "tc-mpi-rma", "tc-mpi-tsi", "tc-kv", "tc-mpi-kv", "llvm-as", "llvm-dis", "llvm-bcanalyzer", "llvm-objdump", "llc", "opt",
         "clang", "split-file"]
if config.tc_enable_fuzzers:
    tools += ["tc-archive-fuzzer", "tc-frame-fuzzer", "tc-sender-fuzzer"]
    config.available_features.add("fuzzer")
llvm_config.add_tool_substitutions(tools, tool_dirs)

config.substitutions.append(("%hex2bin", '"%s" "%s"' % (
    config.python_executable,
    os.path.join(config.test_source_root, "Inputs", "hex2bin.py"))))
config.substitutions.append(("%tc_passes_plugin", os.path.join(
    config.tc_obj_root, "lib", "TCPasses.so")))
config.substitutions.append(("%patch-archive", '"%s" "%s"' % (
    config.python_executable,
    os.path.join(config.test_source_root, "Inputs", "patch-archive.py"))))
config.substitutions.append(("%python", '"%s"' % config.python_executable))
config.substitutions.append(("%tc_src", config.tc_src_root))

config.substitutions.append(("%tc_obj", config.tc_obj_root))
# Archives the examples build (build/ifuncs); rtsi.tcfb only with Rust.
config.substitutions.append(("%tc_ifuncs", os.path.join(config.tc_obj_root,
                                                        "ifuncs")))
if config.tc_have_rust:
    config.available_features.add("rust")
import subprocess
host_triple = subprocess.check_output(
    [os.path.join(config.llvm_tools_dir, "llvm-config"), "--host-target"],
    text=True).strip()
config.substitutions.append(("%host_triple", host_triple))
if host_triple.startswith("x86_64"):
    config.available_features.add("x86_64-host")
config.substitutions.append(("%with_server", '"%s" "%s"' % (
    config.python_executable,
    os.path.join(config.test_source_root, "runtime", "Inputs",
                 "with-server.py"))))

# --- PMIx bootstrap (issue #20): jobs launched by Open MPI's mpirun
# (Inputs/mpirun.sh: as root, oversubscribed, loopback, bounded, a session
# directory per run).
import shutil
if config.tc_with_pmix and shutil.which("mpirun"):
    config.available_features.add("pmix")
config.substitutions.append(("%mpirun", '"%s"' % os.path.join(
    config.test_source_root, "Inputs", "mpirun.sh")))
# --- end PMIx
# tc-bench's mode mpi: tc-mpi-rma (built when MPI is found) and mpirun.
if config.tc_have_mpi_rma and shutil.which("mpirun"):
    config.available_features.add("mpi")

# --- Slurm (issue #36): jobs started by srun --mpi=pmix in a one-node
# cluster that scripts/slurm-local.sh starts for each test and stops after
# it (test/lit/slurm). The `slurm` feature: tc has PMIx and `slurm-local.sh
# check` passes (root, munged, slurmctld, slurmd, srun with its pmix
# plugin). Without it those tests are unsupported, but under CI (CI=true)
# slurm/available.test fails instead.
slurm_local = os.path.join(config.tc_src_root, "scripts", "slurm-local.sh")
config.substitutions.append(("%slurm_local", '"%s"' % slurm_local))
def _slurm_works():
    try:
        return subprocess.run(["bash", slurm_local, "check"],
                              capture_output=True, timeout=60).returncode == 0
    except Exception:
        return False
if config.tc_with_pmix and _slurm_works():
    config.available_features.add("slurm")
# --- end Slurm

# UCX settings and sanitizer options reach every test process.
for var, value in os.environ.items():
    if var.startswith("UCX_") or var in ("ASAN_OPTIONS", "UBSAN_OPTIONS",
                                          "TSAN_OPTIONS"):
        config.environment[var] = value
# Tests talk over loopback: UCX's TCP transport on every interface would
# list the veths and bridges the network-namespace tests add and remove
# meanwhile, and a connection set up across one that vanishes fails
# ("Destination is unreachable"). scripts/netns.sh unsets it for what it runs.
config.environment.setdefault("UCX_NET_DEVICES", "lo")

# A project built against a sanitized install must link the sanitizers too.
consumer_flags = ""
if config.tc_sanitize:
    config.available_features.add("sanitizer")
    consumer_flags = ("-DCMAKE_C_FLAGS=-fsanitize=address,undefined "
                      "-DCMAKE_C_COMPILER=clang-22")
if config.tc_sanitize_thread:
    config.available_features.add("sanitizer")
    config.available_features.add("tsan")
    consumer_flags = ("-DCMAKE_C_FLAGS=-fsanitize=thread "
                      "-DCMAKE_C_COMPILER=clang-22")
config.substitutions.append(("%consumer_cmake_flags", consumer_flags))

# Multi-host tests make network namespaces (scripts/netns.sh): root and a
# working `ip netns` are needed; probe once with a namespace of our own.
def _netns_works():
    import shutil
    if os.geteuid() != 0 or not shutil.which("ip"):
        return False
    probe = "tclitprobe%d" % os.getpid()
    try:
        subprocess.run(["ip", "netns", "add", probe], check=True,
                       capture_output=True, timeout=10)
    except Exception:
        return False
    subprocess.run(["ip", "netns", "del", probe], capture_output=True,
                   timeout=10)
    return True

if _netns_works():
    config.available_features.add("root-netns")

# "unshare-net": `unshare -n` runs a command in a network namespace of its
# own, whose one interface (lo) is down (test/lit/failure).
def _unshare_works():
    try:
        return subprocess.run(["unshare", "-n", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except Exception:
        return False

if _unshare_works():
    config.available_features.add("unshare-net")

# "cpus-2": this process may run on two CPUs or more, so tc-bench can give a
# busy-polling client and server one each (bench-dapc-placement tests).
if len(os.sched_getaffinity(0)) >= 2:
    config.available_features.add("cpus-2")
# netns/lit.local.cfg puts those tests in this group: one at a time.
lit_config.parallelism_groups["netns"] = 1

# --- Heterogeneous targets: the aarch64 cross build under qemu-aarch64 ---
# (scripts/build-aarch64.sh, scripts/run-aarch64.sh). %run_aarch64 PROGRAM
# runs build-aarch64/bin/PROGRAM emulated; QEMU_CPU picks the CPU model.
# Without the cross build the tests in aarch64/ are unsupported, but under
# CI (CI=true) aarch64/available.test fails instead of skipping.
import shutil
config.substitutions.append(("%run_aarch64", '"%s"' % os.path.join(
    config.tc_src_root, "scripts", "run-aarch64.sh")))
config.substitutions.append(("%tc_aarch64", config.tc_aarch64_dir))
# %aarch64-tc-serve etc.: one program of the cross build, emulated (a bare
# tool name after %run_aarch64 would become the host's tool).
for tool in ["tc-serve", "tc-send", "tc-ar", "tc-bench", "tc-unittests"]:
    config.substitutions.append(("%%aarch64-%s" % tool, '"%s" "%s"' % (
        os.path.join(config.tc_src_root, "scripts", "run-aarch64.sh"),
        os.path.join(config.tc_aarch64_dir, "bin", tool))))
config.environment["TC_AARCH64_BUILD"] = config.tc_aarch64_dir
if (os.path.exists(os.path.join(config.tc_aarch64_dir, "sysroot.path"))
        and os.access(os.path.join(config.tc_aarch64_dir, "bin", "tc-serve"),
                      os.X_OK)
        and shutil.which("qemu-aarch64")):
    config.available_features.add("aarch64-qemu")
if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
    config.available_features.add("ci")

# --- GPU targets (issue #35) ---
# %cuda_model: the model of the CUDA driver (test/unit/CudaModel.cpp) that
# stands in for libcuda.so.1 without a GPU (tests in gpu-model/ run GPU
# targets on it); TC_FAKE_CUDA makes it a device that cannot serve, for
# the error paths (%fake_cuda names the same library).
# Feature "cuda": this machine has an NVIDIA driver and a device a GPU
# target can use (tc-serve --gpu-info succeeds); tests that run ifuncs on
# a GPU say REQUIRES: cuda.
for _name in ("%cuda_model", "%fake_cuda"):
    config.substitutions.append((_name, os.path.join(
        config.tc_obj_root, "lib", "libtc-cuda-model.so")))
def _cuda_usable():
    serve = os.path.join(config.tc_tools_dir, "tc-serve")
    if not os.access(serve, os.X_OK):
        return False
    try:
        return subprocess.run([serve, "--gpu-info"], capture_output=True,
                              timeout=120).returncode == 0
    except Exception:
        return False
if _cuda_usable():
    config.available_features.add("cuda")
# --- end GPU targets

# --- Python (issue #42): the tc package for Debian's python3, as built into
# build/python. %tc_python runs that python3 with the package on its path;
# in a sanitizer build, with the sanitizer runtime preloaded (libtc and the
# extension are instrumented, python3 is not). Feature "python": the package
# was built (and this is no ThreadSanitizer build, whose runtime cannot be
# preloaded); without it the tests in python/ are unsupported, except
# python/available.test, which under CI fails instead.
# %debian_python is that python3 alone (with the runtime preloaded), for
# tests that put another copy of the package on its path.
debian_python = '"%s"' % config.tc_python
if config.tc_sanitize and not config.tc_sanitize_thread:
    asan_rt = subprocess.check_output(
        [os.path.join(config.llvm_tools_dir, "clang"),
         "-print-file-name=libclang_rt.asan-x86_64.so"], text=True).strip()
    debian_python = 'env TC_SANITIZER_RT=%s TC_PYTHON="%s" sh "%s"' % (
        asan_rt, config.tc_python, os.path.join(
            config.test_source_root, "python", "Inputs",
            "sanitized-python.sh"))
config.substitutions.append(("%tc_python", "env PYTHONPATH=%s %s" % (
    os.path.join(config.tc_obj_root, "python"), debian_python)))
config.substitutions.append(("%debian_python", debian_python))
if config.tc_have_python and not config.tc_sanitize_thread:
    config.available_features.add("python")
# --- end Python
