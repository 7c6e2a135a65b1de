"""What the benchmark scripts share: the machine they ran on, its load, the
page-cache state of the model files they read, and each other (the scripts
have no .py to import them by)."""
import importlib.machinery
import importlib.util
import os

FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni",
         "amx_int8")


def cpu_info():
    """The CPU's model name, the flags that pick kernels, and the cores."""
    name, flags = "unknown", []
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and name == "unknown":
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                have = set(line.split(":", 1)[1].split())
                flags = [f for f in FLAGS if f in have]
    except OSError:
        pass
    return {"model": name, "flags": flags, "cores": os.cpu_count()}


def load():
    """The 1-minute load average (None where /proc has none)."""
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except OSError:
        return None


def evict(paths):
    """Drops files from the page cache (where no other process maps them),
    so each program then reads its file as on a cold start: inferd maps its
    weights with MADV_HUGEPAGE, which fills the cache with 2 MiB folios; a
    file cached earlier in 4 KiB pages keeps them, and costs inferd a page
    walk per 4 KiB (docs/engine.md)."""
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def weight_files(d):
    """The model directory's safetensors files (a GGUF path is itself)."""
    if os.path.isfile(d):
        return [d]
    return [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".safetensors")]


def script_module(name):
    """scripts/NAME (a script without .py) imported as a module."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), path)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(mod)
    return mod
