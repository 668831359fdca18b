"""The file system of an ``unshare`` sandbox: the minimal runtime and nothing else (stdlib
only: this file's source is prepended to the code that starts every run; a no-op unless the
host set ``FZ_JAIL``).

Why: ``unshare`` gives namespaces but no file-system view, so a run could read the whole host:
installed packages and the data shipped with them (a benchmark's tests and reference
solutions), homes, the project. bubblewrap builds its root from an allowlist; this does the
same inside unshare's private mount namespace, as root there, before the uid drop: a fresh
tmpfs root holding the runtime's ``usr`` (read-only), a tmpfs ``/box`` holding a copy of the
run's dir, its own ``/tmp``, ``/dev/shm``, ``/proc`` and a minimal ``/dev``; then
``pivot_root`` and the old root is detached, so no path (nor ``..`` from a chroot) leads
back to the host.
"""


def _fz_jail():
    import os

    spec = os.environ.pop("FZ_JAIL", None)
    if not spec:
        return False
    import ctypes
    import sys

    rt, box, mb = spec.split("\n")  # no json: every module imported here is one to re-path
    libc = ctypes.CDLL(None, use_errno=True)
    rdonly, nosuid, nodev, noexec, remount, bind, rec, private = (
        1,
        2,
        4,
        8,
        32,
        4096,
        16384,
        1 << 18,
    )

    def mount(src, dst, fstype, flags, data=None):
        args = [x.encode() if isinstance(x, str) else x for x in (src, dst, fstype, data)]
        if libc.mount(args[0], args[1], args[2], flags, args[3]) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"flowzoo jail: mount {dst}: {os.strerror(err)}")

    host_usr = rt + "/usr"
    new = rt + "/jail"
    size = f"size={int(mb)}m"
    mount(None, "/", None, rec | private)
    mount("tmpfs", new, "tmpfs", nosuid | nodev, "mode=0755,size=1m")
    for d in ("usr", "box", "tmp", "proc", "dev", ".old"):
        os.mkdir(f"{new}/{d}", 0o755)
    for link in ("lib", "lib64", "bin"):
        os.symlink("usr/" + link, f"{new}/{link}")
    mount(host_usr, f"{new}/usr", None, bind | rec)
    mount(None, f"{new}/usr", None, bind | remount | rdonly | nosuid | nodev)
    # the run's dir is a tmpfs of its own, like /tmp: nothing a run writes lands on (or
    # reads the state of) the host's disk; the files the host prepared are copied in
    st = os.stat(box)
    mount("tmpfs", f"{new}/box", "tmpfs", nosuid | nodev, f"mode={st.st_mode & 0o7777:o}," + size)
    os.chown(f"{new}/box", st.st_uid, st.st_gid)
    for src_dir, dirs, files in os.walk(box):
        dst_dir = new + "/box" + src_dir[len(box) :]
        for n in dirs + files:
            src, dst = f"{src_dir}/{n}", f"{dst_dir}/{n}"
            st = os.lstat(src)
            if n in dirs:
                os.mkdir(dst, st.st_mode & 0o7777)
            else:
                with open(src, "rb") as f, open(dst, "wb") as g:
                    g.write(f.read())
                os.chmod(dst, st.st_mode & 0o7777)
            os.chown(dst, st.st_uid, st.st_gid)
    mount("tmpfs", f"{new}/tmp", "tmpfs", nosuid | nodev, "mode=1777," + size)
    mount("proc", f"{new}/proc", "proc", nosuid | nodev | noexec)
    mount("tmpfs", f"{new}/dev", "tmpfs", nosuid, "mode=0755,size=64k")
    for dev in ("null", "zero", "full", "random", "urandom"):
        open(f"{new}/dev/{dev}", "w").close()
        mount("/dev/" + dev, f"{new}/dev/{dev}", None, bind)
    os.mkdir(f"{new}/dev/shm", 0o1777)
    mount("tmpfs", f"{new}/dev/shm", "tmpfs", nosuid | nodev, "mode=1777," + size)
    mount(None, f"{new}/dev", None, remount | rdonly | nosuid)
    os.chdir(new)
    pivot_root = {"x86_64": 155, "aarch64": 41}[os.uname().machine]
    if libc.syscall(pivot_root, b".", b".old") != 0:
        raise OSError(ctypes.get_errno(), "flowzoo jail: pivot_root")
    os.chroot(".")
    if libc.umount2(b"/.old", 2) != 0:  # MNT_DETACH
        raise OSError(ctypes.get_errno(), "flowzoo jail: umount the host root")
    os.rmdir("/.old")
    mount(None, "/", None, remount | rdonly | nosuid | nodev)
    os.chdir("/box")

    # the interpreter was started from the runtime's host path: its imports now come from /usr
    def moved(paths):
        return ["/usr" + p[len(host_usr) :] if p.startswith(host_usr) else p for p in paths]

    sys.path[:] = moved(sys.path)
    for mod in list(sys.modules.values()):  # packages already imported find submodules there
        if isinstance(getattr(mod, "__path__", None), list):
            mod.__path__[:] = moved(mod.__path__)
    sys.path_importer_cache.clear()
    sys.prefix = sys.exec_prefix = sys.base_prefix = sys.base_exec_prefix = "/usr"
    sys.executable = sys._base_executable = "/usr/bin/" + os.path.basename(sys.executable)
    return True


_fz_jailed = _fz_jail()
del _fz_jail
