"""The ``rvm`` command: compile, run, inspect and benchmark models from a shell.

    rvm compile model.onnx -o model.rvmx [--exec-mode compiled] [--kernels jit] [--precision bf16]
    rvm run model.rvmx [--input x=x.npy ...] [--dim n=8 ...] [--output out.npz]
    rvm inspect model.rvmx [--text] [--check-weights]
    rvm bench model.onnx [--repeat 50] [--json]

A model is a saved executable (``.rvmx``) or an ONNX model (``.onnx``, compiled on the spot;
that needs the compiler and ``onnx``, which nothing else here imports). Inputs not given with
``--input`` are random, of the shape and dtype the function's signature asks for; a symbolic
dimension takes its size from ``--dim`` or from a given input of that dimension.

A user's error (a missing or corrupt file, a wrong input name, shape or dtype, an unsupported
ONNX op) prints ``rvm: error: ...`` on stderr (one line, or one line per entry of a list, such
as the unsupported ops) and exits with status 1; a wrong command line exits with status 2
(argparse's usage message). Output cut short by its reader (``rvm inspect m.rvmx --text | head``)
ends the command quietly, with status 141, as Unix tools end on SIGPIPE.

``rvm compile`` writes beside the model unless ``-o`` says where, and checks that it can write
there before it compiles; it does not replace an existing file it was not named (the default
output) unless ``--force`` is given. An ``--input`` file of another dtype than the parameter's
(``np.save`` of a default float64 array for a float32 input) is refused with the fix, or cast
to the parameter's dtype with ``--cast`` (float to narrower float, int to narrower int; never
float to int).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import rvm
from rvm.dtypes import numpy_dtype
from rvm.errors import RVMError
from rvm.progress import with_progress
from rvm.runtime.executable import EXEC_MODES, PRECISIONS, Executable, ParamSpec, VMFunction
from rvm.runtime.shape_patterns import DimProgram, is_name
from rvm.runtime.text import signature

__all__ = ["main", "UserError"]


class UserError(Exception):
    """A mistake in what the user asked for; `main` prints its message in one line."""


# -- loading models and inputs ----------------------------------------------------------------


def _existing(path: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"no such file: {path}")
    return p


def _is_onnx(path: Path) -> bool:
    return path.suffix.lower() == ".onnx"


def _compile_onnx(
    path: Path,
    exec_mode: str,
    kernels: str,
    progress: bool,
    precision: str = "fp32",
    calibration: str | None = None,
) -> Executable:
    """``path`` imported and compiled. A QDQ model's quantized chains run as integer
    kernels at any precision; ``int8`` quantizes a float model's convolutions and dense
    products (`rvm.quantize`, min/max) on the ``calibration`` inputs."""
    mod = rvm.from_onnx(str(path))  # the compiler loads here, and only here
    if precision == "int8" and not _quantized(mod):
        mod = rvm.quantize(mod, _calibration(mod, calibration))
    elif precision == "fp32" and _quantized(mod):
        precision = "int8"  # a QDQ model computes in int8 whatever the flag's default says
    return rvm.compile(
        mod, exec_mode=exec_mode, kernels=kernels, progress=progress, precision=precision
    )


def _quantized(mod: rvm.IRModule) -> bool:
    """Whether the imported model computes in int8 already (a QDQ or QLinear model)."""
    from rvm.op.core import computes_in

    return computes_in(mod, "int8")


def _calibration(mod: rvm.IRModule, path: str | None) -> list[list[np.ndarray]]:
    """Calibration inputs from an .npz holding, per input of ``main`` (by its ONNX name),
    the calibration batches stacked on a new first axis."""
    if path is None:
        raise UserError(
            "--precision int8 quantizes a float model on calibration inputs: pass "
            "--calibration FILE.npz (per input name, the batches stacked on a new first axis); "
            "a model quantized already (QDQ) needs none"
        )
    names = mod.attrs.get("onnx_input_names", {})
    params = [names.get(p.name, p.name) for p in mod["main"].params]
    with np.load(_existing(path)) as data:
        missing = [n for n in params if n not in data.files]
        if missing:
            raise UserError(f"{path}: no calibration batches for inputs {missing}; it has "
                            f"{data.files}")  # fmt: skip
        stacks = [data[n] for n in params]
    count = min(len(s) for s in stacks)
    if count == 0:
        raise UserError(f"{path}: the calibration batches are empty")
    return [[s[i] for s in stacks] for i in range(count)]


def _load_model(
    path: str, exec_mode: str | None, kernels: str, args: argparse.Namespace | None = None
) -> Executable:
    """An executable from a ``.rvmx`` file (trusted as ``--trusted`` / ``--key`` say), or
    compiled from a ``.onnx`` one (in ``--precision``)."""
    p = _existing(path)
    if _is_onnx(p):
        precision = getattr(args, "precision", None) or "fp32"
        calibration = getattr(args, "calibration", None)
        return _compile_onnx(p, exec_mode or "bytecode", kernels, True, precision, calibration)
    keys = getattr(args, "key", None) or []
    ex = rvm.load_executable(
        str(p),
        keys=keys,
        trusted=bool(getattr(args, "trusted", False)),
        check_weights=bool(getattr(args, "check_weights", False)),
    )
    wanted = getattr(args, "precision", None)
    if wanted not in (None, ex.precision):
        raise UserError(
            f"{path} computes in {ex.precision}, not {wanted}: --precision applies to an ONNX "
            "model; a saved executable keeps the precision it was compiled with"
        )
    return ex


def _parse_pairs(items: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise UserError(f"{what} {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


def _dims(items: Sequence[str]) -> dict[str, int]:
    out = {}
    for name, value in _parse_pairs(items, "--dim").items():
        try:
            out[name] = int(value)
        except ValueError:
            raise UserError(f"--dim {name}={value}: the size must be an integer") from None
        if out[name] < 0:
            raise UserError(f"--dim {name}={value}: the size must not be negative")
    return out


def _read_npy(name: str, path: str) -> Any:
    """The array of a .npy file, or the arrays of a .npz file in order, as a list (a
    sequence input)."""
    try:
        data = np.load(_existing(path), allow_pickle=False)
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:
                return [data[key] for key in data.files]
        return data
    except UserError:
        raise
    except (OSError, ValueError, EOFError) as e:
        raise UserError(f"--input {name}={path}: not a .npy or .npz array file ({e})") from None


def _inputs(
    fn: VMFunction, given: Sequence[str], dims: Sequence[str], seed: int, cast: bool = False
) -> list[Any]:
    """The arguments of `fn`: the files of ``--input`` (cast to the parameters' dtypes with
    ``cast``), random arrays for the others."""
    files = _parse_pairs(given, "--input")
    unknown = [n for n in files if n not in fn.params]
    if unknown:
        raise UserError(
            f"--input {unknown[0]}: @{fn.name} has no parameter {unknown[0]!r}; its parameters: "
            f"{', '.join(fn.params) or 'none'}"
        )
    specs = dict(zip(fn.params, fn.param_specs))
    arrays = {
        name: _as_dtype(name, path, _read_npy(name, path), specs[name], cast)
        for name, path in files.items()
    }
    sizes = _dims(dims)
    for spec in fn.param_specs:  # a given input names the sizes of its symbolic dims
        x = arrays.get(spec.name)
        if x is not None and spec.shape is not None and len(spec.shape) == x.ndim:
            for d, size in zip(spec.shape, x.shape):
                if is_name(d):
                    sizes.setdefault(d, size)
    rng = np.random.default_rng(seed)
    return [
        arrays[spec.name] if spec.name in arrays else _random(fn, spec, sizes, rng)
        for spec in fn.param_specs
    ]


def _as_dtype(name: str, path: str, x: Any, spec: ParamSpec, cast: bool) -> Any:
    """``x`` if it has the dtype ``spec`` asks for; cast to it with ``cast``; else the fix."""
    if not isinstance(x, np.ndarray) or spec.kind != "tensor" or spec.dtype is None:
        return x
    if x.dtype == numpy_dtype(spec.dtype):
        return x
    want = numpy_dtype(spec.dtype)
    if not cast:
        raise UserError(
            f"--input {name}={path} holds {x.dtype}, but parameter {name!r} is {spec.dtype}: "
            f"save it as {spec.dtype} (np.save(path, a.astype(np.{spec.dtype}))) or pass --cast"
        )
    if not np.can_cast(x.dtype, want, casting="same_kind"):
        raise UserError(
            f"--input {name}={path} holds {x.dtype}: --cast does not make {spec.dtype} of it "
            "(only a narrower type of the same kind)"
        )
    return x.astype(want)


def _random(
    fn: VMFunction, spec: ParamSpec, sizes: dict[str, int], rng: np.random.Generator
) -> np.ndarray:
    where = f"@{fn.name} parameter {spec.name!r}"
    if spec.kind == "adt":
        raise UserError(
            f"{where} is a data type value: give a sequence with --input {spec.name}=FILE.npz "
            "(its arrays, in order)"
        )
    if spec.kind != "tensor" or spec.dtype is None or spec.shape is None:
        what = "a tensor of unknown rank or dtype" if spec.kind == "tensor" else f"a {spec.kind}"
        raise UserError(f"{where} is {what}: give it with --input {spec.name}=FILE.npy")
    shape = []
    for d in spec.shape:
        if isinstance(d, int):
            shape.append(d)
        elif isinstance(d, DimProgram):  # past + seq: from the sizes of its names
            missing = [f"--dim {n}=SIZE" for n in d.names if n not in sizes]
            if missing:
                raise UserError(f"{where} has the dimension {d}: give {' '.join(missing)}")
            shape.append(d.value(sizes))
        elif isinstance(d, str) and d in sizes:
            shape.append(sizes[d])
        elif isinstance(d, str):
            raise UserError(
                f"{where} has the symbolic dimension {d!r}: give its size with --dim {d}=SIZE"
            )
        else:
            raise UserError(
                f"{where} has a dimension of unknown size: give it with "
                f"--input {spec.name}=FILE.npy"
            )
    dtype = numpy_dtype(spec.dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 2, shape).astype(dtype)  # 0 and 1: valid as indices and counts
    return rng.standard_normal(shape, dtype=np.float32).astype(dtype)


def _leaves(value: Any, name: str = "output") -> list[tuple[str, Any]]:
    """(name, array or other value) for each tensor of a result, tuples and lists (sequences)
    flattened."""
    if isinstance(value, (tuple, list)):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{name}[{i}]")]
    return [(name, value)]


def _summary(name: str, x: Any) -> str:
    if isinstance(x, list):
        return f"{name}: a list of {len(x)} arrays"
    if x is None:
        return f"{name}: None (an empty optional)"
    if not isinstance(x, np.ndarray):
        return f"{name}: {type(x).__name__} {x!r}"[:200]
    head = f"{name}: shape {tuple(x.shape)} {x.dtype}"
    if x.size == 0:
        return f"{head}  (empty)"
    try:
        v = x.astype(np.float64)
    except (TypeError, ValueError):
        return head
    return f"{head}  min {v.min():.6g}  max {v.max():.6g}  mean {v.mean():.6g}"


# -- commands ---------------------------------------------------------------------------------


def cmd_compile(args: argparse.Namespace) -> None:
    src = _existing(args.model)
    if not _is_onnx(src):
        raise UserError(f"{args.model}: rvm compile takes an ONNX model (.onnx)")
    out = Path(args.output) if args.output else src.with_suffix(".rvmx")
    if not args.output and out.exists() and not args.force:
        raise UserError(
            f"{out} exists: rvm compile does not replace it unless told to; pass --force, or "
            "name the output with -o"
        )
    _check_writable(out)
    ex = _compile_onnx(
        src,
        args.exec_mode,
        args.kernels,
        not args.quiet,
        args.precision or "fp32",
        args.calibration,
    )
    try:
        ex.save(str(out))
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from None
    print(
        f"wrote {out} ({out.stat().st_size} bytes: {len(ex.functions)} functions, "
        f"{len(ex.kernels)} kernels, exec mode {ex.default_exec_mode})"
    )


def _check_writable(out: Path) -> None:
    """Raises UserError unless a file can be written at ``out`` (before a long compile)."""
    parent = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise UserError(f"cannot write {out}: it is a directory")
    if not parent.is_dir():
        raise UserError(f"cannot write {out}: no such directory {parent}")
    try:  # a trial file: os.access says yes to root on a read-only file system
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".rvm-write-test-"):
            pass
        if out.exists() and not os.access(out, os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from None


def cmd_run(args: argparse.Namespace) -> None:
    ex = _load_model(args.model, args.exec_mode, args.kernels, args)
    vm = rvm.VirtualMachine(ex, exec_mode=args.exec_mode)
    fn = ex.get_function(args.function)
    values = _inputs(fn, args.input, args.dim, args.seed, args.cast)
    for spec, x in zip(fn.param_specs, values):
        for name, leaf in [(spec.name, x)] + (_leaves(x, spec.name) if isinstance(x, list) else []):
            print(_summary(f"input {name}", leaf))
    result = vm[args.function](*values)
    leaves = _leaves(result)
    for name, x in leaves:
        print(_summary(name, x))
    if args.output:
        arrays = {name: x for name, x in leaves if isinstance(x, np.ndarray)}
        try:
            np.savez(args.output, **arrays)
        except OSError as e:
            raise UserError(f"cannot write {args.output}: {e.strerror or e}") from None
        print(f"wrote {args.output} ({', '.join(arrays)})")


def cmd_inspect(args: argparse.Namespace) -> None:
    ex = _load_model(args.model, None, "jit", args)
    print(f"{args.model}: exec mode {ex.default_exec_mode}, precision {ex.precision}")
    if args.check_weights:
        nbytes = sum(c.nbytes for c in ex.constants)
        print(f"weights: {nbytes / 1e6:.1f} MB, their SHA-256 digest checked")
    print(ex.stats())
    print("signatures:")
    for fn in ex.functions:
        print(f"  {signature(fn, result=True)}")
    if ex.kernels:
        print("kernels:")
        width = max(len(n) for n in ex.kernels)
        for rec in ex.kernels.values():
            ops, precision = rec.meta.get("ops", ""), rec.meta.get("precision", "fp32")
            print(f"  {rec.name:<{width}}  {rec.backend:<5}  {rec.style:<6}  {precision:<4}  {ops}")
    if args.text:
        print()
        print(ex.as_text())


def cmd_bench(args: argparse.Namespace) -> None:
    if args.repeat < 1 or args.warmup < 0:
        raise UserError("--repeat must be at least 1 and --warmup at least 0")
    ex = _load_model(args.model, args.exec_mode, args.kernels, args)
    vm = rvm.VirtualMachine(ex, exec_mode=args.exec_mode)
    fn = ex.get_function(args.function)
    values = _inputs(fn, args.input, args.dim, args.seed, args.cast)
    run = vm[args.function]
    engines: dict[str, Callable[[], Any]] = {f"rvm {vm.exec_mode}": lambda: run(*values)}
    ort = _ort_runner(args.model, values) if _is_onnx(Path(args.model)) else None
    if ort is not None:
        _check_against_ort(run(*values), ort())
        engines["onnxruntime"] = ort
    rows = {
        name: _time(name, f, args.warmup, args.repeat, not args.json) for name, f in engines.items()
    }
    report = {
        "model": args.model,
        "function": args.function,
        "inputs": {
            s.name: [list(np.shape(x)), str(np.asarray(x).dtype)]
            for s, x in zip(fn.param_specs, values)
            if isinstance(x, np.ndarray)
        },
        "repeat": args.repeat,
        "median_ms": {n: statistics.median(t) * 1e3 for n, t in rows.items()},
        "min_ms": {n: min(t) * 1e3 for n, t in rows.items()},
    }
    if ort is not None:
        med = report["median_ms"]
        report["rvm_over_ort"] = med[f"rvm {vm.exec_mode}"] / med["onnxruntime"]
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.model} @{args.function}, {args.repeat} calls after {args.warmup} warm-up")
    print(f"  {'engine':<16} {'median ms':>10} {'min ms':>10}")
    for name in rows:
        print(f"  {name:<16} {report['median_ms'][name]:>10.3f} {report['min_ms'][name]:>10.3f}")
    if ort is not None:
        print(f"  rvm / onnxruntime: {report['rvm_over_ort']:.2f}x")


def _time(name: str, f: Callable[[], Any], warmup: int, repeat: int, show: bool) -> list[float]:
    for _ in range(warmup):
        f()
    times = []
    for _ in with_progress(range(repeat), lambda i: "", show, title=f"timing {name:<16}"):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return times


def _ort_runner(path: str, values: list[Any]) -> Callable[[], Any] | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {i.name: x for i, x in zip(sess.get_inputs(), values)}
    return lambda: sess.run(None, feed)


def _check_against_ort(ours: Any, theirs: list[Any]) -> None:
    leaves = [x for _, x in _leaves(ours)]
    if len(leaves) != len(theirs) or any(
        np.shape(a) != np.shape(b) or not np.allclose(a, b, rtol=1e-3, atol=1e-4, equal_nan=True)
        for a, b in zip(leaves, theirs)
    ):
        raise UserError("rvm's outputs differ from onnxruntime's on these inputs; not timing")


# -- the command line -------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rvm",
        description="Compile, run, inspect and benchmark rvm models.",
        epilog="examples:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"rvm {rvm.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def model_options(c: argparse.ArgumentParser, mode_default: str | None) -> None:
        c.add_argument("--exec-mode", choices=EXEC_MODES, default=mode_default)
        c.add_argument(
            "--kernels", choices=("jit", "numpy"), default="jit", help="for an .onnx model"
        )
        c.add_argument(
            "--precision",
            choices=PRECISIONS,
            default=None,
            help="what GEMMs and convolutions compute in, for an .onnx model (default fp32; "
            "int8 quantizes a float model and needs --calibration)",
        )
        c.add_argument(
            "--calibration",
            metavar="FILE.npz",
            help="int8 calibration inputs: per input name, batches stacked on a new axis 0",
        )

    def input_options(c: argparse.ArgumentParser) -> None:
        c.add_argument("model", help="a saved executable (.rvmx) or an ONNX model (.onnx)")
        c.add_argument("-f", "--function", default="main")
        c.add_argument(
            "--input",
            action="append",
            default=[],
            metavar="NAME=FILE.npy",
            help="an input from a .npy file (others are random)",
        )
        c.add_argument(
            "--dim",
            action="append",
            default=[],
            metavar="NAME=SIZE",
            help="the size of a symbolic dimension, for random inputs",
        )
        c.add_argument("--seed", type=int, default=0, help="of the random inputs")
        c.add_argument(
            "--cast",
            action="store_true",
            help="cast --input files to the parameters' dtypes (float64 to float32, ...)",
        )
        c.add_argument(
            "--trusted", action="store_true", help="run a .rvmx file's code whoever signed it"
        )
        c.add_argument(
            "--key",
            action="append",
            default=[],
            metavar="HEX",
            help="a signing key to trust for this .rvmx file (see README, Security)",
        )
        model_options(c, None)

    c = sub.add_parser("compile", help="compile an ONNX model to a saved executable")
    c.add_argument("model", help="an ONNX model (.onnx)")
    c.add_argument("-o", "--output", help="the .rvmx file (default: beside the model)")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    c.add_argument(
        "--force", action="store_true", help="replace an existing .rvmx beside the model"
    )
    model_options(c, "bytecode")
    c.set_defaults(run=cmd_compile)

    c = sub.add_parser("run", help="run a function once and summarize its outputs")
    input_options(c)
    c.add_argument("-o", "--output", help="save the outputs to this .npz file")
    c.set_defaults(run=cmd_run)

    c = sub.add_parser("inspect", help="statistics, signatures and kernels of an executable")
    c.add_argument("model", help="a saved executable (.rvmx) or an ONNX model (.onnx)")
    c.add_argument("--text", action="store_true", help="also print the bytecode")
    c.add_argument(
        "--check-weights",
        action="store_true",
        help="also check the weights' bytes against their digest (a load does not read them)",
    )
    c.set_defaults(run=cmd_inspect)

    c = sub.add_parser("bench", help="time a function (and ONNX Runtime on an .onnx model)")
    input_options(c)
    c.add_argument("--repeat", type=int, default=20, help="timed calls per engine")
    c.add_argument("--warmup", type=int, default=2, help="untimed calls first")
    c.add_argument("--json", action="store_true", help="print the figures as JSON")
    c.set_defaults(run=cmd_bench)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``rvm`` command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        args.run(args)
        sys.stdout.flush()  # here, so a reader gone away is a BrokenPipeError caught below
    except BrokenPipeError:
        # The reader stopped (`| head`): end quietly, as Unix tools end on SIGPIPE, and point
        # stdout at /dev/null so Python's own flush at exit finds no broken pipe either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (UserError, RVMError, OSError, ValueError, TypeError, ImportError) as e:
        lines = (" ".join(line.split()) for line in str(e).strip().splitlines())
        message = "\n".join(line for line in lines if line) or type(e).__name__
        if isinstance(e, RVMError):
            message = f"{type(e).__name__}: {message}"
        print(f"rvm: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rvm: interrupted", file=sys.stderr)
        return 130
    return 0
